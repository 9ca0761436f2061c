"""Real lm-eval runs on the embedded model under two configurations, analysed end to end;
and bad inputs that must say which file and what to do."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from helpers import run_cli, save_lm_eval_run

from lm_eval_ext.analysis import AnalysisInputError, analyze
from lm_eval_ext.analysis.loader import load_runs
from lm_eval_ext.tasks.bbq.metrics import s_dis

TASK = "bbq_subset_12p5pct_loglik"


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory, embedded_checkpoint, data_dir):
    """fp32 and bf16 runs of the same 8 items, plus an fp32 run of 12 items of another task."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    root = tmp_path_factory.mktemp("runs")
    fp32 = HFMeteredLM(device="cpu", precision="fp32", batch_size=8, idle_seconds=0)
    bf16 = HFMeteredLM(device="cpu", precision="bf16", batch_size=8, idle_seconds=0)
    save_lm_eval_run(fp32, TASK, 8, root / "fp32", model_args="precision=fp32")
    save_lm_eval_run(bf16, TASK, 8, root / "bf16", model_args="precision=bf16")
    save_lm_eval_run(fp32, "bbq_subset_25pct_loglik", 12, root / "other_task",
                     model_args="precision=fp32")
    save_lm_eval_run(fp32, TASK, 8, root / "no_samples", log_samples=False)
    return root


@pytest.mark.slow
def test_analyze_cli_writes_report_csvs_and_figures(real_runs, tmp_path):
    out = tmp_path / "report"
    proc = run_cli(["lm-eval-ext", "analyze", "--reference", f"fp32={real_runs / 'fp32'}",
                    "--runs", f"bf16={real_runs / 'bf16'}", "--out", str(out),
                    "--bootstrap", "2000", "--mc-draws", "200", "--no-progress"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bf16: accuracy" in proc.stdout
    for name in ("report.md", "report.html", "items.csv", "deltas.csv", "membership.csv",
                 "runs.csv", "comparisons.csv", "preregistration.md"):
        assert (out / name).stat().st_size > 0, name
    for figure in ("quality_vs_cost", "subset_size", "heatmap_category",
                   "heatmap_context_polarity"):
        assert (out / "figures" / f"{figure}.png").stat().st_size > 10_000, figure
    items = pd.read_csv(out / "items.csv")
    samples = [json.loads(line) for line in
               next((real_runs / "fp32").rglob("samples_*.jsonl")).read_text().splitlines()]
    assert set(items["item_key"]) == {s["doc"]["item_key"] for s in samples}
    assert len(items) == 16 and set(items["run"]) == {"fp32", "bf16"}
    deltas = pd.read_csv(out / "deltas.csv")
    required = {"run", "metric", "subgroup_type", "subgroup", "n", "reference", "value",
                "delta_pp", "ci_low", "ci_high", "p_value", "p_adjusted"}
    assert required <= set(deltas.columns)
    overall = deltas[(deltas["subgroup_type"] == "all")].set_index("metric")
    # the reference value equals the task's own S_DIS over the logged records
    records = [s["bias_s_dis"] for s in samples]
    assert overall.loc["bias_s_dis", "reference"] == pytest.approx(s_dis(records), nan_ok=True)
    fp32_acc = np.mean([s["acc"] for s in samples])
    assert overall.loc["accuracy", "reference"] == pytest.approx(fp32_acc)
    assert overall.loc["accuracy", "n"] == 8
    report = (out / "report.md").read_text()
    assert "Did the conclusion change?" in report and "cluster bootstrap" in report


@pytest.mark.slow
def test_mismatched_tasks_are_an_error_unless_intersection(real_runs):
    with pytest.raises(AnalysisInputError, match="evaluated different items.*--intersection"):
        analyze(real_runs / "fp32", [real_runs / "other_task"], n_resamples=200, mc_draws=20,
                progress=False)
    # the items both runs evaluated, by hand from their samples files
    keys = [{json.loads(line)["doc"]["item_key"] for line in path.read_text().splitlines()}
            for folder in ("fp32", "other_task")
            for path in (real_runs / folder).rglob("samples_*.jsonl")]
    common = keys[0] & keys[1]
    # nested memberships in one order: the 12.5% task's first 8 items open the 25% task too
    from lm_eval_ext.data.instrument import load_membership

    first = [{r["item_key"] for r in load_membership(name).rows[:n]}
             for name, n in (("12p5pct", 8), ("25pct", 12))]
    assert keys == first and common == first[0]
    result = analyze(real_runs / "fp32", [real_runs / "other_task"], intersection=True,
                     n_resamples=200, mc_draws=20, progress=False)
    assert result.n_items == 8 and sum(result.dropped.values()) == 4


@pytest.mark.slow
def test_truncated_samples_file_names_file_and_line(real_runs, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(real_runs / "bf16", broken)
    samples = next(broken.rglob("samples_*.jsonl"))
    text = samples.read_text()
    samples.write_text(text[: len(text) - 200])  # cut inside the last line
    with pytest.raises(AnalysisInputError) as err:
        load_runs([broken])
    message = str(err.value)
    assert str(samples) in message and "line 8" in message and "Rerun" in message


@pytest.mark.slow
def test_run_without_samples_says_to_log_samples(real_runs):
    with pytest.raises(AnalysisInputError, match="--log_samples") as err:
        load_runs([real_runs / "no_samples"])
    assert "results_" in str(err.value)
