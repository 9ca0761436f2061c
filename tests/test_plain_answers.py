"""A plain answer for every input a new user produced; no traceback, no silent result.

Files of the wrong shape (valid JSON that is no results file or sample), a misspelt benchmark,
`run` without --model, a cache folder that cannot be written, a task that needs the hub
offline, a device torch does not know, and a sequential run of one configuration against
itself: each is one line naming the input and the fix.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import run_cli

from lm_eval_ext.analysis import AnalysisInputError
from lm_eval_ext.analysis.loader import load_runs
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.cli import main as cli_main
from lm_eval_ext.data.instrument import load_membership

TASK = "bbq_subset_12p5pct_loglik"


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir):
    rows = load_membership("12p5pct").rows
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    return write_run(tmp_path_factory.mktemp("run") / "run", TASK, rows, preds)


def _one_line(argv: list[str], capsys, code: int = 2) -> str:
    """``lm-eval-ext ARGV`` in process: its exit code and its one line on stderr."""
    assert cli_main.main(argv) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("content", "kind"), [("{}", "mapping without tasks"), ("[]", "list")])
def test_a_results_file_of_the_wrong_shape_is_named(run, tmp_path, content, kind):
    """`{}` and `[]` reached the catch-all ("No objects to concatenate", "'list' object has no
    attribute 'get'")."""
    folder = tmp_path / "bad"
    shutil.copytree(run.parent, folder)
    results = next(folder.glob("results_*.json"))
    results.write_text(content)
    with pytest.raises(AnalysisInputError) as error:
        load_runs([folder])
    assert str(error.value) == (
        f"{results} is JSON but not an lm-eval results file (a {kind}; lm-eval writes a "
        "mapping with \"results\" and \"configs\" per task): pass the results file lm-eval "
        "wrote, or rerun the evaluation with --log_samples")


def test_a_samples_line_of_the_wrong_shape_names_its_line(run, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(run.parent, folder)
    samples = next(folder.glob("samples_*.jsonl"))
    lines = samples.read_text().splitlines()
    lines[2] = json.dumps([1, 2, 3])
    samples.write_text("\n".join(lines) + "\n")
    with pytest.raises(AnalysisInputError) as error:
        load_runs([folder])
    assert str(error.value) == (
        f"{samples} line 3 is a JSON list, not a sample (lm-eval writes one mapping per line): "
        "the line was damaged after lm-eval wrote it. Pass the run's own file, or rerun the "
        "evaluation with --log_samples")


def test_a_misspelt_benchmark_is_a_usage_error(capsys):
    """`data verify bbqq` printed the right words inside "this is a bug" (exit 1)."""
    assert _one_line(["data", "verify", "bbqq"], capsys) == (
        "lm-eval-ext: error: unknown benchmark 'bbqq' (did you mean bbq?); known: bbq, "
        "crows_pairs, toxigen, truthfulqa, xstest")


def test_a_cache_that_cannot_be_written_is_one_line(tmp_path):
    """LM_EVAL_EXT_CACHE under /proc: a 60-line traceback."""
    proc = run_cli(["lm-eval-ext", "run", "--model", "hf-metered", "--tasks", TASK, "--limit",
                    "1", "--output_path", str(tmp_path / "out")],
                   env={"LM_EVAL_EXT_CACHE": "/proc/x"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "lm-eval-ext: error: cannot write the cache /proc/x/models/"
        "SmolLM2-135M-Instruct-b179c9523d0e: No such file or directory (LM_EVAL_EXT_CACHE="
        "/proc/x); set LM_EVAL_EXT_CACHE to a folder you can write")
    assert not (tmp_path / "out").exists()  # nothing written, not even an empty folder


def test_a_task_that_needs_the_hub_offline_is_one_line():
    """lm-eval's task that downloads its data set, offline: a datasets traceback."""
    import datasets

    from lm_eval_ext.plugin.lm_eval_cli import one_line_error

    with pytest.raises(ConnectionError) as raised:
        datasets.load_dataset("allenai/ai2_arc", "ARC-Easy")
    error = one_line_error(raised.value)
    assert str(error) == (
        "a task's data set could not be loaded: Couldn't reach 'allenai/ai2_arc' on the Hub "
        "(OfflineModeIsEnabled); the task downloads it from the Hugging Face hub: connect to "
        "the hub (unset HF_HUB_OFFLINE and HF_DATASETS_OFFLINE where set), run it once "
        "online so that datasets caches it, or use one of this package's tasks (e.g. "
        "bbq_subset_25pct), which read local files")
    assert error.exit_code == 1


def test_a_grid_of_a_task_that_needs_the_hub_is_one_line_not_a_path_error(tmp_path, capsys):
    """A grid of lm-eval's `bbq` (its data on the hub), offline: 'cannot use a file: Couldn't
    reach oskarvanderwal/bbq on the Hub ...; pass another path' (trial 7)."""
    from lm_eval_ext.cli.main import main

    grid = tmp_path / "grid.yaml"
    grid.write_text('models: {a: "precision=fp32", b: "precision=bf16"}\nbenchmarks: [bbq]\n')
    assert main(["grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run"]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("lm-eval-ext: error: a task's data set could not be loaded: "
                           "Couldn't reach 'oskarvanderwal/bbq' on the Hub")
    assert line.endswith("or use one of this package's tasks (e.g. bbq_subset_25pct), which "
                         "read local files")
    grid.write_text('models: {a: "precision=fp32", b: "precision=bf16"}\n'
                    "benchmarks: [bbq_subset_25pct]\n")
    assert main(["grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run",
                 "--calibration-limit", "0"]) == 0  # followed


def test_a_device_torch_does_not_know_is_refused(tmp_path, capsys):
    """`--device gpu` ran on the CPU with exit code 0."""
    line = _one_line(["run", "--model", "hf-metered", "--tasks", TASK, "--limit", "1",
                      "--device", "gpu", "--output_path", str(tmp_path / "out")], capsys)
    assert line == ("lm-eval-ext: error: --device gpu is not a device torch knows (lm-eval "
                    "would run on the CPU); use cuda (or cuda:N) for a GPU, or cpu")


@pytest.mark.parametrize(("candidate", "kind"), [
    # identical reference and candidate ran four evaluations to "unresolved"
    ("idle_seconds=0", "are one configuration (model args 'idle_seconds=0', batch 1)"),
    # trial 14: arms differing only in how they are measured ran to "unresolved" too
    ("idle_seconds=0.5,energy=off", "differ only in energy, idle_seconds, which change no "
                                    "answer here (how a run is measured, a default written "
                                    "out, or generation settings on the log-likelihood path)"),
    # trial 15: the embedded checkpoint's own fp32, and a generation setting on the loglik path
    ("idle_seconds=0,precision=fp32", "differ only in precision, which change no answer here"),
    ("idle_seconds=0,generation=standard", "differ only in generation, which change no answer"),
])
def test_sequential_of_one_configuration_against_itself_is_refused(candidate, kind, tmp_path,
                                                                   capsys):
    line = _one_line(["sequential", "--reference-args", "idle_seconds=0", "--candidate-args",
                      candidate, "--out", str(tmp_path / "o")], capsys)
    assert line.startswith(f"lm-eval-ext: error: sequential: the reference and the candidate "
                           f"{kind}")
    assert line.endswith(
        "so every look would compare the same answers; give the candidate the change to test "
        "(e.g. --candidate-batch 8, or --candidate-args with another precision)")
    assert not (tmp_path / "o").exists()


def test_sequential_arms_of_another_precision_or_generation_path_are_two_configurations():
    from lm_eval_ext.campaign.sequential_evaluation import Arm, _same_answers

    ref = Arm("idle_seconds=0", "1")
    assert _same_answers(ref, Arm("idle_seconds=0,precision=bf16", "1"), "loglik") is None
    assert _same_answers(ref, Arm("idle_seconds=0,generation=standard", "1"), "generative") is None
    assert _same_answers(ref, Arm("idle_seconds=0", "4"), "loglik") is None


@pytest.mark.slow
def test_run_without_a_model_runs_hf_metered(tmp_path, embedded_checkpoint):
    """`lm-eval-ext run` without --model fell to lm-eval's `hf` and a TypeError traceback."""
    proc = run_cli(["lm-eval-ext", "run", "--model_args", "idle_seconds=0", "--tasks", TASK,
                    "--limit", "1", "--output_path", str(tmp_path / "out")])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lm-eval-ext run: no --model given: using hf-metered" in proc.stderr
    [results] = (tmp_path / "out").rglob("results_*.json")
    assert json.loads(results.read_text())["config"]["model"] == "hf-metered"


@pytest.mark.parametrize("content", ['{"results": {}, "configs": {"t": 1}}',
                                     '{"results": {}, "configs": {"t": {}}, "config": []}'])
def test_a_results_file_whose_tasks_are_not_mappings_is_named(run, tmp_path, content):
    """Found in the trial after the fix: `configs: {t: 1}` reached the catch-all."""
    folder = tmp_path / "bad"
    shutil.copytree(run.parent, folder)
    results = next(folder.glob("results_*.json"))
    results.write_text(content)
    with pytest.raises(AnalysisInputError, match="is JSON but not an lm-eval results file"):
        load_runs([folder])


@pytest.mark.parametrize(("change", "why"), [
    ({"doc_id": "abc"}, "doc_id is 'abc', not the item's number lm-eval writes"),
    ({"filtered_resps": None}, "no filtered_resps list (the answers after lm-eval's filters)"),
])
def test_a_sample_without_lm_evals_fields_names_the_field(run, tmp_path, change, why):
    """Without filtered_resps the item counted as unparsed, silently."""
    folder = tmp_path / "bad"
    shutil.copytree(run.parent, folder)
    samples = next(folder.glob("samples_*.jsonl"))
    lines = samples.read_text().splitlines()
    sample = json.loads(lines[2])
    for key, value in change.items():
        if value is None:
            del sample[key]
        else:
            sample[key] = value
    lines[2] = json.dumps(sample)
    samples.write_text("\n".join(lines) + "\n")
    with pytest.raises(AnalysisInputError) as error:
        load_runs([folder])
    assert str(error.value) == (f"{samples}: sample 3 of task {TASK}: {why}; rerun lm_eval with "
                                "--log_samples or repair the line")


def test_a_run_of_bbq_and_another_benchmark_has_bbq_cells_only():
    """BBQ and CrowS-Pairs in one run: the context x polarity cells sorted NaN with text (a
    TypeError in analyze); the other benchmark's items belong to no such cell."""
    import pandas as pd

    from lm_eval_ext.analysis.stats.subgroups import subgroup_masks

    items = pd.DataFrame({
        "category": ["Age", "Age", "race-color"], "benchmark_group": ["Age", "Age", "race-color"],
        "context_condition": ["ambig", "disambig", None],
        "question_polarity": ["neg", "nonneg", None], "stereotyped_groups": ["old", "old", ""]})
    cells = {name: mask.tolist() for kind, name, mask in subgroup_masks(items, min_group_n=1)
             if kind == "context_polarity"}
    assert cells == {"ambig/neg": [True, False, False], "disambig/nonneg": [False, True, False]}


def test_mde_runs_of_other_item_sets_says_what_it_left_out(run, tmp_path, capsys):
    """A 12-item run against a 6-item run was paired on 6 items without a word."""
    rows = load_membership("12p5pct").rows[:40]
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(3))
    fewer = write_run(tmp_path / "fewer", TASK, rows, preds)
    assert cli_main.main(["mde", "--runs", str(run.parent), str(fewer.parent)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("empirical"))
    n_ref = len(load_membership("12p5pct").rows)
    assert line.endswith(f"over 40 paired items (the items both runs hold; left out: "
                         f"{n_ref - 40} of synthetic-model@bf16/bs1/12p5pct)"), line
