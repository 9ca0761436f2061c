"""Every energy ratio a reader sees has an interval and names its sides' execution modes:
``runs.csv`` and the report of ``analyze``, the campaign's energy table, and ``--execution``."""

import math

import numpy as np
import pandas as pd
import pytest

from lm_eval_ext.analysis import analyze
from lm_eval_ext.analysis.report import write_outputs
from lm_eval_ext.analysis.synthetic import write_run
from lm_eval_ext.campaign.spec import build_spec
from lm_eval_ext.errors import ConfigError

TASK = "bbq_subset_12p5pct_loglik"


def _metering(joules, se, seconds, seconds_se, mode, flags=()):
    return {"metering": {"precision": "bf16", "batch_size": 1, "energy_joules": joules,
                         "energy_joules_se": se, "inference_seconds": seconds,
                         "inference_seconds_se": seconds_se, "energy_source": "nvml",
                         "execution_mode": mode, "flags": list(flags),
                         "energy_joules_idle_corrected": joules / 2,
                         "energy_joules_idle_corrected_se": None if se is None else 2 * se,
                         "gpus": [{"uuid": "GPU-x"}]}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("12p5pct").rows[:40]
    preds = np.array([r["label"] for r in rows])
    root = tmp_path_factory.mktemp("ratios")
    paths = {
        "M0": write_run(root / "M0", TASK, rows, preds, extra_config=_metering(
            1000.0, 10.0, 10.0, 0.1, "graph_replay")),
        "M2": write_run(root / "M2", TASK, rows, preds, precision="int8", extra_config=_metering(
            4000.0, 60.0, 40.0, 0.5, "lm_eval_forward")),
        "M3": write_run(root / "M3", TASK, rows, preds, precision="nf4", extra_config=_metering(
            1500.0, None, 15.0, None, "graph_replay")),
        "M5b": write_run(root / "M5b", TASK, rows, preds, precision="int8",
                         extra_config=_metering(2000.0, None, 20.0, None, "derived",
                                                flags=("derived_energy",))),
    }
    result = analyze(f"M0={paths['M0']}", [f"{k}={v}" for k, v in paths.items() if k != "M0"],
                     n_resamples=200, mc_draws=10, progress=False)
    out = write_outputs(result, root / "report")
    return pd.read_csv(out["runs"]).set_index("run"), out["report_md"].read_text()


def test_runs_csv_ratio_intervals_are_the_log_scale_delta_method(runs):
    table, _ = runs
    half = 1.959964 * math.hypot(60 / 4000, 10 / 1000)
    m2 = table.loc["M2"]
    assert m2["energy_ratio"] == pytest.approx(4.0)
    assert (m2["energy_ratio_ci_low"], m2["energy_ratio_ci_high"]) == pytest.approx(
        (4 * math.exp(-half), 4 * math.exp(half)), rel=1e-5)
    half_t = 1.959964 * math.hypot(0.5 / 40, 0.1 / 10)
    assert m2["runtime_ratio_ci_high"] == pytest.approx(4 * math.exp(half_t), rel=1e-5)
    half_c = 1.959964 * math.hypot(120 / 2000, 20 / 500)
    assert m2["energy_ratio_idle_corrected_ci_low"] == pytest.approx(4 * math.exp(-half_c),
                                                                      rel=1e-5)
    assert m2["joules_per_item_ci_high"] == pytest.approx((4000 + 1.959964 * 60) / 40, rel=1e-6)


def test_a_ratio_across_execution_modes_is_flagged(runs):
    table, report = runs
    assert bool(table.loc["M2", "modes_differ"]) and not bool(table.loc["M3", "modes_differ"])
    assert "execution modes differ (lm_eval_forward vs graph_replay)" in table.loc["M2",
                                                                                    "ratio_note"]
    assert "**Execution modes differ** for M2 (lm_eval_forward)" in report
    assert "4 [3.4" in report  # the ratio printed with its interval


def test_no_interval_where_a_side_has_none_and_derived_energy_says_so(runs):
    table, _ = runs
    assert np.isnan(table.loc["M3", "energy_ratio_ci_low"])
    assert table.loc["M3", "energy_ratio"] == pytest.approx(1.5)
    assert "no energy interval" in table.loc["M3", "ratio_note"]
    assert "derived energy" in table.loc["M5b", "ratio_note"]
    assert np.isnan(table.loc["M5b", "energy_ratio_ci_low"])


# --- campaigns -----------------------------------------------------------------------------

def test_execution_lm_eval_sets_lm_evals_own_mode_on_every_cell():
    raw = {"models": {"m": "idle_seconds=0"}, "tasks": [TASK], "execution": "lm-eval",
           "conditions": {"M0": {"model_args": "precision=bf16", "batch_size": 1},
                          "M1": {"batch_size": 8}}}
    spec = build_spec(raw)
    for cell in spec.cells:
        assert "cuda_graphs=false" in cell.model_args
        assert "generation=standard" in cell.model_args
    fast = build_spec({**raw, "execution": "fast"})
    assert all("cuda_graphs" not in c.model_args for c in fast.cells)
    assert spec.cells[0].config_sha256() != fast.cells[0].config_sha256()
    with pytest.raises(ConfigError, match="models.m with conditions.M0: model arg "
                                          "cuda_graphs=true contradicts execution: lm-eval"):
        build_spec({**raw, "models": {"m": "cuda_graphs=true"}})
    with pytest.raises(ConfigError, match="execution: 'paper' is not a mode"):
        build_spec({**raw, "execution": "paper"})


def test_execution_given_twice_differently_is_refused(tmp_path):
    from lm_eval_ext.campaign import campaign_source

    spec = tmp_path / "c.yaml"
    spec.write_text(f"models: {{m: ''}}\ntasks: [{TASK}]\nexecution: lm-eval\n"
                    "conditions: {M0: {batch_size: 1}}\n")
    with pytest.raises(ConfigError, match="sets execution: lm-eval, and --execution asks for "
                                          "fast"):
        campaign_source(str(spec), preset_options={"execution": "fast"})
    same, _ = campaign_source(str(spec), preset_options={"execution": "lm-eval"})
    assert "cuda_graphs=false" in same.cells[0].model_args


def test_the_preset_in_lm_evals_mode_is_another_campaign():
    from lm_eval_ext.campaign.presets import paper_stress_test

    raw = paper_stress_test(execution="lm-eval", limit=5)
    assert raw["name"] == "paper-stress-test-loglik-lm-eval"
    spec = build_spec(raw)
    assert all("cuda_graphs=false" in c.model_args for c in spec.cells)


def test_the_campaign_energy_table_is_relative_to_the_reference_with_intervals():
    from lm_eval_ext.campaign.energy import energy_markdown, energy_table

    raw = {"models": {"m": ""}, "tasks": [TASK],
           "conditions": {"M0": {"batch_size": 1}, "M2": {"model_args": "precision=int8"},
                          "M4": {"tasks": ["bbq_subset_25pct_loglik"]}}}
    spec = build_spec(raw)
    ids = {c.condition: c.cell_id for c in spec.cells}
    records = {
        ids["M0"]: {"n_items": 100, "energy_joules": 700.0, "energy_joules_se": 7.0,
                    "inference_seconds": 5.0, "inference_seconds_se": 0.05,
                    "execution_mode": "graph_replay"},
        ids["M2"]: {"n_items": 100, "energy_joules": 7000.0, "energy_joules_se": 35.0,
                    "inference_seconds": 50.0, "inference_seconds_se": 0.2,
                    "execution_mode": "lm_eval_forward"},
        ids["M4"]: {"n_items": 50, "energy_joules": 350.0, "execution_mode": "derived",
                    "derived_from": ids["M0"], "energy_flags": ["derived_energy"]},
    }
    table = energy_table(spec, records, "m").set_index("condition")
    assert table.loc["M2", "energy_ratio"] == pytest.approx(10.0)
    half = 1.959964 * math.hypot(35 / 7000, 7 / 700)
    assert table.loc["M2", "energy_ratio_ci_high"] == pytest.approx(10 * math.exp(half),
                                                                    rel=1e-5)
    assert table.loc["M4", "energy_ratio"] == pytest.approx(0.5)
    assert "derived energy" in table.loc["M4", "ratio_note"]
    assert ("50 items against the reference's 100: the ratios compare totals"
            in table.loc["M4", "ratio_note"])
    assert "items against" not in table.loc["M2", "ratio_note"]  # same item count
    assert table.loc["M4", "joules_per_item"] == pytest.approx(7.0)  # = M0's 700 J / 100
    text = energy_markdown(table.reset_index(), "m")
    assert "**Execution modes differ**" in text and "M2 (lm_eval_forward)" in text
    assert energy_table(spec, {ids["M2"]: records[ids["M2"]]}, "m") is None  # no reference


def test_each_benchmarks_cells_are_relative_to_its_own_reference_cell():
    """Trial 17 (N17_164): BBQ and CrowS-Pairs x batch 1/2: every ratio was against the BBQ
    M0 cell (CrowS-Pairs M0 'runtime 0.0916' against itself), and table1.md had no task column
    to tell the two M0 rows apart."""
    from lm_eval_ext.campaign.energy import energy_table
    from lm_eval_ext.campaign.table1 import table1_markdown

    raw = {"models": {"m": ""}, "tasks": [TASK, "crows_pairs_ext"],
           "conditions": {"M0": {"batch_size": 1}, "M1": {"batch_size": 2}}}
    spec = build_spec(raw)
    seconds = {("M0", TASK): 50.0, ("M1", TASK): 25.0, ("M0", "crows_pairs_ext"): 4.0,
               ("M1", "crows_pairs_ext"): 3.0}
    records = {c.cell_id: {"n_items": 8, "inference_seconds": seconds[c.condition, c.task],
                           "inference_seconds_se": 0.01, "execution_mode": "graph_replay"}
               for c in spec.cells}
    table = energy_table(spec, records, "m").set_index(["condition", "task"])
    assert table.loc[("M0", "crows_pairs_ext"), "runtime_ratio"] == 1.0  # its own reference
    assert table.loc[("M1", "crows_pairs_ext"), "runtime_ratio"] == pytest.approx(0.75)
    assert table.loc[("M1", TASK), "runtime_ratio"] == pytest.approx(0.5)
    del records[spec.cell("m", "M0", "crows_pairs_ext")[0].cell_id]
    partial = energy_table(spec, records, "m").set_index(["condition", "task"])
    assert partial.loc[("M1", "crows_pairs_ext"), "ratio_note"] == (
        "its task crows_pairs_ext has no finished M0 cell to compare with")
    assert pd.isna(partial.loc[("M1", "crows_pairs_ext"), "runtime_ratio"])
    shown = table.reset_index().assign(**{k: None for k in (
        "accuracy", "bias_s_dis", "bias_s_amb", "judge_bias_score", "judge_reasoning_quality",
        "derived_from")})
    assert "| condition | task | items |" in table1_markdown(shown, "m")


def test_the_cards_saving_has_an_interval_and_names_a_mode_difference():
    from lm_eval_ext.analysis.recommendation import saving_interval

    reference = {"reference": "M0", "cost_per_item": {"M0": 10.0, "M2": 5.0},
                 "cost_per_item_se": {"M0": 0.2, "M2": 0.15},
                 "modes": {"M0": "graph_replay", "M2": "lm_eval_forward"}}
    # the candidate on 1,000 items against the reference on 2,000: cost 5,000 vs 20,000 J
    out = saving_interval(reference, "M2", 5000.0, 20000.0)
    half = 1.959964 * math.hypot(0.15 / 5, 0.2 / 10)
    assert out["saved_share_ci95"] == pytest.approx(
        [1 - 0.25 * math.exp(half), 1 - 0.25 * math.exp(-half)], rel=1e-5)
    assert "execution modes differ (lm_eval_forward vs graph_replay)" in out["cost_note"]
    seconds = {**reference, "cost_per_item_se": {"M0": math.nan, "M2": math.nan}}
    assert saving_interval(seconds, "M2", 5000.0, 20000.0)["saved_share_ci95"] is None


def test_a_side_that_is_not_resolved_gives_no_interval_and_no_corrected_ratio():
    from lm_eval_ext.analysis.run_table import cost_ratios

    # the idle-corrected M0 is 19 J with an SE of 1,750 J (a real H100 cell at 60 items)
    table = cost_ratios(pd.DataFrame([
        {"run": "M0", "n_items": 60, "energy_joules": 1421.0, "energy_joules_se": 1750.0,
         "energy_joules_idle_corrected": 19.0, "energy_joules_idle_corrected_se": 1750.0,
         "inference_seconds": 11.6, "inference_seconds_se": 0.5,
         "execution_mode": "graph_replay", "energy_derived": False, "is_reference": True},
        {"run": "M2", "n_items": 60, "energy_joules": 3020.0, "energy_joules_se": 80.0,
         "energy_joules_idle_corrected": 113.0, "energy_joules_idle_corrected_se": 80.0,
         "inference_seconds": 24.5, "inference_seconds_se": 0.7,
         "execution_mode": "graph_replay", "energy_derived": False, "is_reference": False}]))
    m2 = table.iloc[1]
    assert m2["energy_ratio"] == pytest.approx(3020 / 1421) and np.isnan(m2["energy_ratio_ci_low"])
    assert np.isnan(m2["energy_ratio_idle_corrected"])
    assert "not resolved" in m2["ratio_note"]
    assert m2["runtime_ratio_ci_low"] < 24.5 / 11.6 < m2["runtime_ratio_ci_high"]


@pytest.mark.parametrize("flag", ["other_processes", "other_gpu_processes"])
def test_a_side_loaded_by_other_processes_gives_no_interval(flag):
    """Trial 17 (N17_69): two cells of the same 4 items and settings on a CPU shared with
    another process: runtime ratio 0.696 [0.485, 0.998], an interval excluding 1 from the
    runs' own slices, with both sides flagged other_processes and no word of it."""
    from lm_eval_ext.analysis.run_table import cost_ratios

    side = {"n_items": 4, "energy_joules": None, "energy_joules_se": None,
            "energy_joules_idle_corrected": None, "energy_joules_idle_corrected_se": None,
            "execution_mode": "graph_replay", "energy_derived": False}
    table = cost_ratios(pd.DataFrame([
        {**side, "run": "M0", "inference_seconds": 10.0, "inference_seconds_se": 0.5,
         "energy_flags": flag, "is_reference": True},
        {**side, "run": "M4", "inference_seconds": 6.96, "inference_seconds_se": 0.5,
         "energy_flags": "", "is_reference": False}]))
    m4 = table.iloc[1]
    assert m4["runtime_ratio"] == pytest.approx(0.696)
    assert np.isnan(m4["runtime_ratio_ci_low"]) and np.isnan(m4["runtime_ratio_ci_high"])
    assert ("other processes loaded the machine during the reference (flag other_processes "
            "or other_gpu_processes): no interval, as the runs' own slices do not cover that "
            "load; rerun on an idle machine") in m4["ratio_note"]
