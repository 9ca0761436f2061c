"""The campaign worker: cells sharing a loaded model run in one process, answering as alone."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import SMALL_CAMPAIGN, run_cli

from lm_eval_ext.campaign import build_spec
from lm_eval_ext.campaign.runner import by_loaded_model, run_lm_eval
from lm_eval_ext.campaign.worker import Worker


def _answers(folder: Path) -> pd.DataFrame:
    [samples] = folder.rglob("samples_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    return pd.DataFrame({"doc_id": [r["doc_id"] for r in rows],
                         "resps": [json.dumps(r["resps"]) for r in rows]}).sort_values("doc_id")


def _results(folder: Path) -> dict:
    [path] = folder.rglob("results_*.json")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_cells_sharing_a_model_run_in_one_worker_with_their_own_processes_answers(
        tmp_path, embedded_checkpoint):
    spec_path = tmp_path / "small.yaml"
    spec_path.write_text(yaml.safe_dump(SMALL_CAMPAIGN))
    out = tmp_path / "campaign"
    ran = run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(out), "--quiet",
                   "--no-analyze"])
    assert ran.returncode == 0, ran.stdout + ran.stderr
    cells = build_spec(SMALL_CAMPAIGN).cells
    reused = []
    for cell in cells:  # today's path: one lm-eval process per cell
        alone = tmp_path / "alone" / cell.cell_id
        assert run_lm_eval(cell.lm_eval_argv(alone), tmp_path / f"{cell.cell_id}.log",
                           echo=False) == 0
        in_worker = out / "cells" / cell.cell_id
        pd.testing.assert_frame_equal(_answers(in_worker), _answers(alone))
        shared, own = _results(in_worker), _results(alone)
        assert shared["results"] == own["results"]
        assert shared["config"]["responses"] == own["config"]["responses"]
        reused.append(shared["config"]["metering"]["warm"]["model_reused"])
        assert own["config"]["metering"]["warm"]["model_reused"] is False
    assert reused == [False, True, True]  # one load for the three cells


def test_cells_are_grouped_by_the_model_they_load_in_order_of_first_appearance():
    spec = build_spec({"models": SMALL_CAMPAIGN["models"], "tasks": SMALL_CAMPAIGN["tasks"],
                       "conditions": {
        "A": {"batch_size": 1}, "B": {"model_args": "precision=bf16", "batch_size": 1},
        "C": {"batch_size": 4}, "D": {"model_args": "precision=bf16", "batch_size": 2}}})
    assert [c.condition for c in by_loaded_model(spec.cells)] == ["A", "C", "B", "D"]


@pytest.mark.slow
def test_a_failed_job_ends_its_worker_and_the_next_job_gets_a_fresh_one(
        tmp_path, embedded_checkpoint):
    def argv(task: str, name: str) -> list[str]:
        return ["--model", "hf-metered", "--model_args", "idle_seconds=0", "--tasks", task,
                "--limit", "2", "--output_path", str(tmp_path / name), "--log_samples"]

    worker = Worker(echo=False)
    try:
        codes = [worker.run(argv("bbq_subset_12p5pct_loglik", "a"), tmp_path / "a.log"),
                 worker.run(argv("bbq_no_such_task", "b"), tmp_path / "b.log"),
                 worker.run(argv("bbq_subset_12p5pct_loglik", "c"), tmp_path / "c.log"),
                 worker.run(argv("bbq_subset_25pct_loglik", "d"), tmp_path / "d.log")]
    finally:
        worker.close()
    assert codes == [0, 2, 0, 0]
    assert "bbq_no_such_task" in (tmp_path / "b.log").read_text()
    reused = [_results(tmp_path / name)["config"]["metering"]["warm"]["model_reused"]
              for name in "acd"]
    assert reused == [False, False, True]  # c: a fresh worker after the failure; d: c's model


@pytest.mark.slow
def test_a_vllm_engine_is_reused_by_the_next_cell_of_the_same_engine(tmp_path, monkeypatch,
                                                                     embedded_checkpoint):
    """vllm-metered in a worker (the stand-in engine): the second cell takes the first one's
    engine and answers as a fresh process does; another batch size is another engine."""
    stand_in = Path(__file__).parent / "stand_in_vllm"
    monkeypatch.setenv("PYTHONPATH", f"{stand_in}:{Path.cwd()}")

    def argv(task: str, batch: int, name: str) -> list[str]:
        return ["--model", "vllm-metered", "--model_args", "precision=fp32,idle_seconds=0",
                "--tasks", task, "--limit", "2", "--batch_size", str(batch),
                "--output_path", str(tmp_path / name), "--log_samples"]

    jobs = [("bbq_subset_12p5pct_loglik", 8, "a"), ("bbq_subset_25pct_loglik", 8, "b"),
            ("bbq_subset_25pct_loglik", 4, "c")]
    worker = Worker(echo=False)
    try:
        codes = [worker.run(argv(*job), tmp_path / f"{job[2]}.log") for job in jobs]
    finally:
        worker.close()
    assert codes == [0, 0, 0], (tmp_path / "a.log").read_text()[-2000:]
    warm = [_results(tmp_path / name)["config"]["metering"]["warm"] for name in "abc"]
    assert [w["model_reused"] for w in warm] == [False, True, False]
    alone = Worker(echo=False)
    try:
        assert alone.run(argv("bbq_subset_25pct_loglik", 8, "b_alone"), tmp_path / "x.log") == 0
    finally:
        alone.close()
    pd.testing.assert_frame_equal(_answers(tmp_path / "b"), _answers(tmp_path / "b_alone"))
    assert (_results(tmp_path / "b")["results"] == _results(tmp_path / "b_alone")["results"])


@pytest.mark.slow
def test_our_error_raised_inside_lm_eval_in_a_later_job_is_one_line_and_its_exit_code(
        tmp_path, embedded_checkpoint, monkeypatch, data_dir):
    """trial 15: a registered task's manifest changed between two cells of one worker; the
    second cell printed ManifestError's 40-line traceback and exited 1."""
    from lm_eval_ext.cli.main import main

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(embedded_checkpoint.parent)
    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(cache))
    ids = tmp_path / "ids.csv"
    ids.write_text("category,example_id\nAge,1\nAge,2\n")
    assert main(["data", "fingerprint", str(ids), "--register", "bbq_two"]) == 0

    def argv(name: str) -> list[str]:
        return ["--model", "hf-metered", "--model_args", "idle_seconds=0", "--tasks",
                "bbq_two_loglik", "--output_path", str(tmp_path / name)]

    worker = Worker(echo=False)
    try:
        first = worker.run(argv("a"), tmp_path / "a.log")
        (cache / "user_tasks" / "bbq_two" / "bbq_two_ids.csv").write_text(
            "category,example_id\nAge,1\nAge,2\nAge,3\n")
        second = worker.run(argv("b"), tmp_path / "b.log")
    finally:
        worker.close()
    log = (tmp_path / "b.log").read_text()
    assert (first, second) == (0, 2), log
    assert "Traceback" not in log
    [line] = [x for x in log.splitlines() if x.startswith("lm_eval: error: ")]
    assert "now gives sample fingerprint" in line and "--register NAME --replace" in line
