"""`lm-eval-ext data fingerprint` on the paper's manifest, registration, and bad input."""


import pytest
from conftest import run_cli
from test_bbq_data import PAPER_SAMPLE_SHA256


def test_prints_the_paper_fingerprint(data_dir):
    proc = run_cli(["lm-eval-ext", "data", "fingerprint",
                    str(data_dir / "bbq/derived/vector_frozen_2000_ids.csv")])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == PAPER_SAMPLE_SHA256


@pytest.mark.slow
def test_register_makes_a_task_lm_eval_finds(data_dir, tmp_path):
    env = {"LM_EVAL_EXT_CACHE": str(tmp_path / "cache")}
    manifest = data_dir / "bbq/derived/vector_frozen_2000_ids.csv"
    proc = run_cli(["lm-eval-ext", "data", "fingerprint", str(manifest), "--register",
                    "bbq_vector_frozen2000"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert "registered bbq_vector_frozen2000 (2000 rows)" in proc.stderr
    check = run_cli(["lm-eval", "validate", "--tasks",
                     "bbq_vector_frozen2000,bbq_vector_frozen2000_loglik"], env=env)
    assert check.returncode == 0, check.stdout + check.stderr


def test_registered_task_loads_exactly_the_manifest_items(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path / "cache"))
    from lm_eval.tasks import TaskManager

    from lm_eval_ext.data.external_manifest import read_manifest_keys
    from lm_eval_ext.paths import user_tasks_dir
    from lm_eval_ext.tasks.bbq.registered import register_manifest_task

    manifest = data_dir / "bbq/derived/vector_frozen_2000_ids.csv"
    register_manifest_task(manifest, "bbq_paper_set")
    tm = TaskManager(include_path=str(user_tasks_dir()), include_defaults=False)
    task = tm.load(["bbq_paper_set"])["tasks"]["bbq_paper_set"]
    keys = {(d["category"], d["example_id"]) for d in task.eval_docs}
    assert keys == set(read_manifest_keys(manifest))
    assert task.config.metadata["sample_sha256"] == PAPER_SAMPLE_SHA256


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("category,id\nAge,1\n", "lacks column(s) example_id"),
        ("category,example_id\nAge,one\n", "row 2: example_id 'one' is not an integer"),
        ("category,example_id\nAge,1\nAge,1\n", "row 3: duplicate item ('Age', 1)"),
        ("category,example_id\nAges,1\n", "item ('Ages', 1) is not in BBQ"),
        ("category,example_id\n", "has no rows"),
    ],
)
def test_bad_manifests_say_what_is_wrong(data_dir, tmp_path, content, message):
    path = tmp_path / "m.csv"
    path.write_text(content)
    proc = run_cli(["lm-eval-ext", "data", "fingerprint", str(path)])
    assert proc.returncode == 2
    assert message in proc.stderr and str(path) in proc.stderr


@pytest.mark.slow
def test_register_rejects_bad_or_taken_names(data_dir, tmp_path):
    env = {"LM_EVAL_EXT_CACHE": str(tmp_path / "cache")}
    manifest = str(data_dir / "bbq/derived/vector_frozen_2000_ids.csv")
    bad = run_cli(["lm-eval-ext", "data", "fingerprint", manifest, "--register", "My Set"], env=env)
    assert bad.returncode == 2 and "is invalid" in bad.stderr
    taken = run_cli(["lm-eval-ext", "data", "fingerprint", manifest, "--register",
                     "bbq_subset_25pct"], env=env)
    assert taken.returncode == 2 and "already defined by" in taken.stderr


def test_instrument_command_reproduces_the_manifest(data_dir):
    proc = run_cli(["lm-eval-ext", "data", "instrument"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reproduces from the data: OK" in proc.stdout
