"""`lm-eval-ext data fingerprint` on the paper's manifest, registration, and bad input."""


import pytest
from helpers import PAPER_SAMPLE_SHA256, run_cli


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
    assert "overrides existing task" not in check.stderr  # the package tag, indexed twice


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
    # the packaged tasks' version (2.0 fixed the bias rule, 2.1 mixed the few-shot pool); 1.1
    # labelled the fixed rule as the inverted one (trial 18, N18_15)
    packaged = tm.load(["bbq_subset_25pct"])["tasks"]["bbq_subset_25pct"]
    assert task.config.metadata["version"] == packaged.config.metadata["version"] == 2.1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("category,id\nAge,1\n", "lacks column(s) example_id"),
        ("category,example_id\nAge,one\n", "row 2: example_id 'one' is not an integer"),
        ("category,example_id\nAge,1\nAge,1\n", "row 3: duplicate item ('Age', 1)"),
        ("category,example_id\nAges,1\n",
         "item ('Ages', 1) is not in BBQ: no category 'Ages' (did you mean 'Age'?)"),
        ("category,example_id\nAge,99999\n",
         "item ('Age', 99999) is not in BBQ: Age has example_id 0-3679, not 99999"),
        ("category,example_id\n", "has no rows"),
    ],
)
def test_bad_manifests_say_what_is_wrong(data_dir, tmp_path, content, message, capsys):
    from lm_eval_ext.cli.main import main  # the console script's function, in process

    path = tmp_path / "m.csv"
    path.write_text(content)
    assert main(["data", "fingerprint", str(path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert message in line and str(path) in line


@pytest.mark.slow
def test_register_refuses_bad_or_taken_names_and_replaces_a_user_task_only_on_request(
        data_dir, tmp_path, monkeypatch, capsys):
    """--register over an existing user task replaced it without a word."""
    from lm_eval_ext.cli.main import main
    from lm_eval_ext.paths import user_tasks_dir

    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path / "cache"))
    manifest = str(data_dir / "bbq/derived/vector_frozen_2000_ids.csv")
    assert main(["data", "fingerprint", manifest, "--register", "My Set"]) == 2
    out, err = capsys.readouterr()
    assert "is invalid" in err and out == ""  # refused before the manifest was read
    assert main(["data", "fingerprint", manifest, "--register", "bbq_subset_25pct"]) == 2
    assert "already defined by" in capsys.readouterr().err

    two, other = tmp_path / "two.csv", tmp_path / "other.csv"
    two.write_text("category,example_id\nAge,1\nAge,2\n")
    other.write_text("category,example_id\nAge,3\n")
    ids = user_tasks_dir() / "bbq_mine" / "bbq_mine_ids.csv"
    assert main(["data", "fingerprint", str(two), "--register", "bbq_mine"]) == 0
    assert main(["data", "fingerprint", str(two), "--register", "bbq_mine"]) == 0  # same items
    capsys.readouterr()
    assert main(["data", "fingerprint", str(other), "--register", "bbq_mine"]) == 2
    assert "already registered for another item set (2 rows" in capsys.readouterr().err
    assert ids.read_text().splitlines()[1:] == ["Age,1", "Age,2"]  # kept
    assert main(["data", "fingerprint", str(other), "--register", "bbq_mine", "--replace"]) == 0
    assert ids.read_text().splitlines()[1:] == ["Age,3"]
    assert sorted(p.name for p in user_tasks_dir().iterdir()) == ["bbq_mine"]  # nothing staged


def test_instrument_command_reproduces_the_manifest(data_dir):
    proc = run_cli(["lm-eval-ext", "data", "instrument"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reproduces from the data: OK" in proc.stdout


def test_a_manifest_changed_since_it_was_registered_is_told_to_register_again(data_dir,
                                                                             tmp_path):
    from lm_eval_ext.data.external_manifest import ManifestError, load_manifest_rows

    path = tmp_path / "m.csv"
    path.write_text("category,example_id\nAge,1\nAge,2\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest_rows(path, expected_sample_sha256="0" * 64)
    actual = str(caught.value).split("gives sample fingerprint ")[1].split(",")[0]
    assert str(caught.value) == (
        f"manifest {path} now gives sample fingerprint {actual}, but it was registered with "
        f"{'0' * 64}; the file or the BBQ data changed. Register it again from the manifest "
        "CSV it came from (`lm-eval-ext data fingerprint CSV --register NAME --replace`), not "
        "from this copy.")
    assert len(load_manifest_rows(path, expected_sample_sha256=actual)) == 2  # as registered


def test_a_registered_task_damaged_after_registration_is_one_line_and_not_cemented(
        data_dir, tmp_path, monkeypatch, capsys):
    """trial 13: a registered task whose YAML was cut ran into lm-eval's TypeError traceback
    after the model loaded; re-registering from the task's own cut copy of its IDs was taken
    without --replace (7 rows over the 8 registered), cementing the damage."""
    from lm_eval_ext.cli.main import main
    from lm_eval_ext.command_preflight import PreflightError, check_command_line
    from lm_eval_ext.paths import user_tasks_dir

    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path / "cache"))
    two = tmp_path / "two.csv"
    two.write_text("category,example_id\nAge,1\nAge,2\n")
    assert main(["data", "fingerprint", str(two), "--register", "bbq_mine"]) == 0
    folder = user_tasks_dir() / "bbq_mine"
    argv = ["--model", "hf-metered", "--tasks", "bbq_mine_loglik"]
    check_command_line(argv)  # intact: it builds
    ids = folder / "bbq_mine_ids.csv"
    ids.write_text("category,example_id\nAge,1\n")  # the task's own copy, cut
    capsys.readouterr()
    assert main(["data", "fingerprint", str(ids), "--register", "bbq_mine"]) == 2
    assert "already registered for another item set (2 rows" in capsys.readouterr().err
    assert main(["data", "fingerprint", str(two), "--register", "bbq_mine", "--replace"]) == 0
    task_yaml = folder / "bbq_mine_loglik.yaml"
    task_yaml.write_text(task_yaml.read_text().split("custom_dataset")[0])  # cut after tag
    with pytest.raises(PreflightError) as caught:
        check_command_line(argv)
    assert str(caught.value).startswith("lm-eval cannot build the task(s) bbq_mine_loglik (")
    assert str(caught.value).endswith(
        f"its files under {user_tasks_dir()} were changed after `lm-eval-ext data fingerprint "
        "--register` wrote them: register it again from the manifest CSV it came from "
        "(`lm-eval-ext data fingerprint CSV --register NAME --replace`), and run again")
    assert main(["data", "fingerprint", str(two), "--register", "bbq_mine", "--replace"]) == 0
    check_command_line(argv)  # followed


def test_a_file_in_the_registered_folder_that_redefines_a_packaged_task_is_refused(
        tmp_path, monkeypatch):
    """trial 14: a hand-placed YAML in the cache's user_tasks named like a packaged task ran in
    its place, with only lm-eval's generic warning."""
    from lm_eval_ext.command_preflight import PreflightError, check_command_line
    from lm_eval_ext.paths import user_tasks_dir

    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path / "cache"))
    mine = user_tasks_dir() / "mine" / "copy.yaml"
    mine.parent.mkdir(parents=True)
    data = tmp_path / "items.jsonl"
    data.write_text('{"q": "Who?"}\n')
    mine.write_text(  # a task lm-eval builds: it would run silently under the packaged name
        f"task: bbq_subset_25pct_loglik\ndataset_path: json\ndataset_kwargs: {{data_files: "
        f"{{test: {data}}}}}\ntest_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: '{{q}}'\ndoc_to_target: 0\ndoc_to_choice: [a, b]\n")
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct_loglik"])
    assert str(caught.value) == (
        f"task bbq_subset_25pct_loglik is the package's own, and a file under the "
        f"registered-task folder defines it again ({mine}), which lm-eval would run in its "
        "place: remove that file (a task of your own needs another name), and run again")
    mine.unlink()
    check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct_loglik"])


def test_the_packaged_task_names_are_those_lm_eval_indexes_from_the_package(tmp_path,
                                                                         monkeypatch):
    from lm_eval.tasks import TaskManager

    from lm_eval_ext.paths import package_tasks_dir
    from lm_eval_ext.task_building import packaged_task_names

    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path / "cache"))  # no user tasks
    manager = TaskManager(include_path=[str(package_tasks_dir())], include_defaults=False)
    indexed = {name for name, entry in manager.task_index.items()
               if entry.yaml_path and entry.kind.name == "TASK"}
    assert packaged_task_names() == indexed and "bbq_subset_25pct_loglik" in indexed
