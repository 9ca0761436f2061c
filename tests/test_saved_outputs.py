"""`lm_eval` never exits 0 with a lost or cut results or samples file.

lm-eval catches its own errors while saving and logs a warning. Checked here on real file
systems (conftest's ``mounted_filesystem``): lm-eval's ``EvaluationTracker`` saving into a full
disk in process, the preflight of ``--output_path``, and (slow) the real command.
"""

from __future__ import annotations

import json

import pytest
from helpers import run_cli

from lm_eval_ext.command_preflight import PreflightError, check_output_path
from lm_eval_ext.errors import EnvironmentProblem
from lm_eval_ext.plugin.saved_outputs import (
    OutputsLost,
    check_saved_results,
    check_saved_samples,
)


def _samples(count: int) -> list[dict]:
    """Samples as lm-eval's evaluator hands them to the tracker (about 2 KB each)."""
    return [{"doc_id": i, "doc": {"text": "x" * 2000}, "target": 0,
             "arguments": [("context", " a")], "resps": [[(-1.0, False)]],
             "filtered_resps": [(-1.0, False)], "filter": "none", "metrics": ["acc"],
             "doc_hash": "d", "prompt_hash": "p", "target_hash": "t", "acc": 1.0}
            for i in range(count)]


def _tracker(folder):
    from lm_eval.loggers import EvaluationTracker

    check_saved_results()
    check_saved_samples()
    return EvaluationTracker(output_path=str(folder / "out"))


def test_a_samples_file_cut_by_a_full_disk_is_an_error(mounted_filesystem):
    folder = mounted_filesystem("16k")
    tracker = _tracker(folder)
    samples = _samples(8)
    tracker.save_results_aggregated(results={"results": {"t": {"acc,none": 1.0}}},
                                    samples={"t": samples})
    with pytest.raises(OutputsLost) as error:
        tracker.save_results_samples(task_name="t", samples=samples)
    cut = next((folder / "out").rglob("samples_t_*.jsonl"))
    lines = cut.read_text().count("\n")
    assert 0 < lines < 8 and str(error.value) == (
        f"the samples file {cut} was cut at {cut.stat().st_size:,} bytes ({lines} of 8 lines) "
        "(No space left on device): the run's per-item outputs are incomplete, so it cannot be "
        "analysed; the disk or quota is full: free space and rerun")
    assert error.value.exit_code == 1


def test_a_results_file_lost_or_cut_is_an_error(mounted_filesystem):
    from lm_eval.loggers import EvaluationTracker

    lost = EvaluationTracker(output_path="/proc/x/out")  # the API has no preflight
    with pytest.raises(OutputsLost, match=r"the results file /proc/x/out/None/results_.*\.json "
                                          r"was not written \(No such file or directory\)"):
        lost.save_results_aggregated(results={"results": {}})
    folder = mounted_filesystem("4k")
    tracker = _tracker(folder)
    with pytest.raises(OutputsLost, match=r"the results file .*results_.*\.json was cut at "
                                          r"4,096 bytes and is removed \(No space left on "
                                          r"device\): nothing of this run was kept; the disk or "
                                          "quota is full"):
        tracker.save_results_aggregated(results={"results": {"t": {"x": "y" * 10_000}}})
    assert not list(folder.rglob("results_*.json"))  # as said: nothing was kept


def test_whole_files_pass(tmp_path):
    tracker = _tracker(tmp_path)
    samples = _samples(8)
    tracker.save_results_aggregated(results={"results": {"t": {"acc,none": 1.0}}},
                                    samples={"t": samples})
    tracker.save_results_samples(task_name="t", samples=samples)
    assert len(next(tmp_path.rglob("samples_t_*.jsonl")).read_text().splitlines()) == 8


def test_the_preflight_test_writes_the_output_path_and_leaves_nothing(tmp_path, mounted_filesystem):
    with pytest.raises(PreflightError, match="--output_path: cannot write /proc/x/out: No such "
                                             "file or directory"):
        check_output_path("/proc/x/out")
    read_only = mounted_filesystem("16k", read_only=True)
    with pytest.raises(PreflightError, match="is not writable; pass a folder you can write to"):
        check_output_path(str(read_only / "out"))
    full = mounted_filesystem("4k")
    (full / "filler").write_bytes(b"x" * 4096)
    with pytest.raises(EnvironmentProblem, match=f"cannot write {full}/out: No space left"):
        check_output_path(str(full / "out"))
    check_output_path(str(tmp_path / "new" / "out"))
    assert not (tmp_path / "new").exists()  # made, test-written and removed: lm-eval makes it


def test_lm_eval_into_proc_stops_before_the_model_loads():
    proc = run_cli(["lm_eval", "--model", "hf-metered", "--tasks", "bbq_subset_12p5pct_loglik",
                    "--output_path", "/proc/x/out", "--limit", "1"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "lm_eval: error: --output_path: cannot write /proc/x/out: No such file or directory; a "
        "folder on the path does not exist and cannot be made there: pass another path")
    assert "[hf-metered]" not in proc.stderr  # no model was loaded


@pytest.mark.slow
def test_lm_eval_on_a_nearly_full_disk_exits_non_zero(mounted_filesystem, embedded_checkpoint):
    """The issue's case: results written, the samples file cut at 8,192 bytes, exit code 0."""
    disk = mounted_filesystem("24k")
    proc = run_cli(["lm_eval", "--model", "hf-metered", "--model_args", "idle_seconds=0",
                    "--tasks", "bbq_subset_12p5pct_loglik", "--limit", "4", "--output_path",
                    str(disk / "out"), "--log_samples"], env={"LMEVAL_LOG_LEVEL": "WARNING"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("lm_eval: error: the samples file ") and "Traceback" not in proc.stderr
    # The results file (its size grows with the metering record) is whole; the samples file is
    # cut wherever the disk filled, and the message states the cut file's own size and lines.
    (results,) = disk.glob("out/*/results_*.json")
    assert json.loads(results.read_text())["results"]
    (samples,) = disk.glob("out/*/samples_*.jsonl")
    text = samples.read_text(encoding="utf-8", errors="replace")
    lines = text.count("\n")
    assert 0 < samples.stat().st_size and lines < 4
    assert (f"was cut at {samples.stat().st_size:,} bytes ({lines} of 4 lines) "
            "(No space left on device)") in last


# -- a size limit named; output paths as lm-eval will use them --------------------

def test_a_file_size_limit_is_named_and_the_cut_file_removed(tmp_path):
    """`ulimit -f` gave "nothing was kept; rerun" while the cut file stayed, its cause unnamed."""
    import resource

    tracker = _tracker(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, hard))
    try:
        with pytest.raises(OutputsLost) as error:
            tracker.save_results_aggregated(results={"results": {"t": {"x": "y" * 20_000}}})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert not list(tmp_path.rglob("results_*.json"))
    assert str(error.value).endswith(
        "was cut at 8,192 bytes and is removed (the file size limit of 8,192 bytes was reached "
        "(ulimit -f)): nothing of this run was kept; raise it (ulimit -f unlimited) and rerun")
    assert error.value.exit_code == 1


LONG = "x" * 300


@pytest.mark.parametrize(("path", "message"), [
    ("~/out59", "--output_path ~/out59: the ~ was not expanded (the path was quoted), so lm-eval "
                "would write into a folder named '~' here; write {home}/out59"),
    (f"out/{LONG}/run", f"--output_path: the name {LONG[:40]}... is 300 bytes, and the name "
                        "would be over the file system's 255-byte limit for one name; use a "
                        "shorter name"),
    ("out/" + "y" * 230 + ".json", "--output_path: the name " + "y" * 40 + "... is 235 bytes, "
     "and its stamped results file name would be over the file system's 255-byte limit for one "
     "name; use a shorter name"),
    ("", "--output_path '' is empty; give a folder for the results (e.g. --output_path "
         "results)"),
])
def test_an_output_path_lm_eval_would_use_otherwise_is_refused(path, message, tmp_path,
                                                              monkeypatch, capsys):
    """A quoted ~ made an empty $HOME/... while lm-eval wrote into ./~/... (rc 0); a long name
    lost the results after the whole run in a traceback; '' gave lm-eval's traceback."""
    import os
    from pathlib import Path

    from lm_eval_ext.cli import main as cli_main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    code = cli_main.main(["run", "--model", "hf-metered", "--tasks", "bbq_subset_12p5pct_loglik",
                          "--limit", "1", "--log_samples", "--output_path", path])
    assert code == 2
    assert capsys.readouterr().err.strip() == "lm-eval-ext: error: " + message.format(
        home=os.path.expanduser("~"))
    assert not list(Path(tmp_path).iterdir())  # nothing made, here or in $HOME


@pytest.mark.slow
def test_analyze_reads_what_output_path_json_wrote(embedded_lm, tmp_path):
    """`--output_path X.json` (lm-eval's file rule) writes X_<stamp>.json: analyze read it
    neither as a folder ("rerun the evaluation") nor as a file ("not a results file")."""
    from helpers import save_lm_eval_run

    from lm_eval_ext.analysis.loader import load_runs

    save_lm_eval_run(embedded_lm, "bbq_subset_12p5pct_loglik", 3, tmp_path / "run.json")
    [written] = tmp_path.glob("run_*.json")
    assert [len(r.items) for r in load_runs([tmp_path])] == [3]
    assert [len(r.items) for r in load_runs([written])] == [3]


def test_a_results_name_too_long_for_the_file_system_is_one_line(tmp_path):
    """Through the Python API (no preflight): the name's own error was a traceback from
    saved_outputs.py after the whole run."""
    from lm_eval.loggers import EvaluationTracker

    check_saved_results()
    tracker = EvaluationTracker(output_path=str(tmp_path / ("y" * 240 + ".json")))
    with pytest.raises(OutputsLost) as error:
        tracker.save_results_aggregated(results={"results": {}})
    assert "was not written (File name too long): nothing of this run was kept; pass another " \
        "path" in str(error.value)
