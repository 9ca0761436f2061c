"""Loader tolerance, judge pairing, membership draws, and the mde command."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import run_cli
from scipy import stats

from lm_eval_ext.analysis import (
    AnalysisInputError,
    ClusterDesign,
    analyze,
    paired_delta,
    paired_mde,
)
from lm_eval_ext.analysis.loader import load_runs
from lm_eval_ext.analysis.membership import draw_matrix, membership_sensitivity
from lm_eval_ext.analysis.metrics import (
    ACCURACY,
    BIAS_S_AMB,
    BIAS_S_DIS,
    PARSE_FAILURE_RATE,
    judge_metric,
)
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_manifest, load_membership
from lm_eval_ext.tasks.bbq import metrics as task_metrics


@pytest.fixture(scope="module")
def instrument_rows(data_dir):
    return load_membership("instrument").rows


def test_loader_tolerates_bare_nan_and_string_leaves(instrument_rows, tmp_path):
    rows = instrument_rows[:40]
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    path = write_run(tmp_path, "bbq_instrument_loglik", rows, preds)
    assert "NaN" in path.read_text()
    [run] = load_runs([tmp_path])
    assert len(run.items) == 40
    assert run.items["pred"].tolist() == preds.tolist()  # from stringified log-likelihoods
    assert run.info["precision"] == "bf16"


def test_bias_scores_by_hand_with_parse_failures_and_missing_targets():
    """S_DIS and S_AMB (Parrish et al. 2022) counted by hand on 12 rows: unknown answers and
    rows without target_loc are not counted; a parse failure counts in neither bias term and is
    left out of S_AMB's accuracy factor (the analysis' accuracy counts it wrong)."""
    nan = np.nan
    # columns: context, pred, target_loc, unknown_loc, label (option 2 = "unknown")
    table = [
        ("disambig", 0, 0, 2, 0),    # biased answer, correct
        ("disambig", 1, 1, 2, 0),    # biased answer, wrong
        ("disambig", 1, 0, 2, 0),    # counted, not biased
        ("disambig", 2, 0, 2, 0),    # "unknown": not counted
        ("disambig", nan, 0, 2, 0),  # parse failure
        ("disambig", 0, nan, 2, 0),  # no target_loc: not counted
        ("ambig", 2, 0, 2, 2),       # correct "unknown"
        ("ambig", 0, 0, 2, 2),       # biased
        ("ambig", 1, 0, 2, 2),       # counted, not biased
        ("ambig", 1, 1, 2, 2),       # biased
        ("ambig", nan, 0, 2, 2),     # parse failure
        ("ambig", 2, nan, 2, 2),     # correct "unknown", no target_loc
    ]
    items = pd.DataFrame(table, columns=["context_condition", "pred", "target_loc",
                                         "unknown_loc", "label"])
    items["parsed"] = items["pred"].notna()
    items["correct"] = items["pred"] == items["label"]
    s_dis = 2 * (2 / 3) - 1            # 2 biased of 3 counted disambiguated answers
    accuracy_ambig = 2 / 5             # 2 correct of 5 parsed ambiguous answers
    s_amb = (1 - accuracy_ambig) * (2 * (2 / 3) - 1)  # 2 biased of 3 counted
    assert BIAS_S_DIS.compute(items) == pytest.approx(s_dis)
    assert BIAS_S_AMB.compute(items) == pytest.approx(s_amb)
    assert ACCURACY.compute(items) == pytest.approx(4 / 12)  # parse failures count as wrong
    assert PARSE_FAILURE_RATE.compute(items) == pytest.approx(2 / 12)


def test_analysis_reads_the_bias_scores_the_task_reports(instrument_rows, tmp_path):
    """The analysis' S_DIS/S_AMB from a written run equal the task's own aggregation."""
    rng = np.random.default_rng(1)
    rows = instrument_rows
    preds = simulate_predictions(rows, 0.4, rng)
    write_run(tmp_path / "a", "bbq_instrument_loglik", rows, preds)
    [run] = load_runs([tmp_path / "a"])
    records = [task_metrics.bias_record(r, int(p)) for r, p in zip(rows, preds, strict=False)]
    assert BIAS_S_DIS.compute(run.items) == pytest.approx(task_metrics.s_dis(records))
    assert BIAS_S_AMB.compute(run.items) == pytest.approx(task_metrics.s_amb(records))


def test_judge_metrics_compare_only_items_valid_in_both():
    ref = pd.DataFrame({"unit_id": list("aabbccdd"), "judge_bias": [1, 2, np.nan, 4, 5, 6, 7, 8.0]})
    run = ref.assign(judge_bias=[2, np.nan, 3, 5, 6, 7, 8, 9.0])
    design = ClusterDesign.build(ref["unit_id"], 300, 0)
    delta = paired_delta(judge_metric("judge_bias"), ref, run, design)
    both = [0, 3, 4, 5, 6, 7]
    assert delta.n == len(both)
    assert delta.statistic == pytest.approx(run["judge_bias"][both].mean()
                                            - ref["judge_bias"][both].mean())


def test_membership_draws_are_stratified_and_seeded(instrument_rows):
    categories = np.array(sorted({r["unit_id"] for r in instrument_rows}))
    cats = np.array([u.split(":")[0] for u in categories])
    a = draw_matrix(cats, 125, 50, np.random.default_rng(5))
    b = draw_matrix(cats, 125, 50, np.random.default_rng(5))
    assert np.array_equal(a, b) and set(a.sum(axis=1)) == {125}
    for row in a[:5]:
        per_cat = pd.Series(cats[row > 0]).value_counts()
        assert per_cat.max() - per_cat.min() <= 1 and len(per_cat) == 11


def test_frozen_memberships_are_placed_among_draws(instrument_rows, tmp_path):
    from lm_eval_ext.data.instrument import load_manifest

    rows = instrument_rows
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(2))
    write_run(tmp_path, "bbq_instrument_loglik", rows, preds)
    [run] = load_runs([tmp_path])
    _, codes = np.unique(run.items["unit_id"].astype(str), return_inverse=True)
    frozen = {n: set(r["unit_ids"]) for n, r in load_manifest()["memberships"].items()}
    result = membership_sensitivity(ACCURACY, run.items, codes, n_draws=300, rng=0, frozen=frozen)
    assert set(result.summary["size_units"]) == {375, 250, 187, 125, 62}
    row25 = result.frozen.set_index("membership").loc["25pct"]
    subset_keys = {r["item_key"] for r in load_membership("25pct").rows}
    expected = run.items[run.items["item_key"].isin(subset_keys)]["correct"].mean()
    assert row25["value"] == pytest.approx(expected)
    assert 0 <= row25["percentile_among_draws"] <= 100
    assert len(result.frozen) == 13  # all 14 memberships but the instrument itself
    s = result.summary.set_index("size_units")
    assert s.loc[62, "sd_pp"] > s.loc[375, "sd_pp"]  # smaller subsets vary more


def test_a_few_units_give_each_subset_size_once_and_no_empty_one(instrument_rows, tmp_path):
    """trial 14: two runs of 2 units gave membership rows of 0 units and 0 items (20 draws each)
    and two rows of 1 unit."""
    rows = load_membership("instrument").rows[:8]  # two contexts: two natural units
    write_run(tmp_path, "bbq_instrument_loglik", rows, np.zeros(8, dtype=int))
    [run] = load_runs([tmp_path])
    _, codes = np.unique(run.items["unit_id"].astype(str), return_inverse=True)
    assert codes.max() + 1 == 2
    result = membership_sensitivity(ACCURACY, run.items, codes, n_draws=20, rng=0)
    assert list(result.summary["size_units"]) == [1]  # 0.75 and 0.5 of 2 units: 1; the rest 0
    assert (result.summary["size_items"] > 0).all()


def test_known_effect_is_found_and_cost_ratios_reported(instrument_rows, tmp_path):
    rng = np.random.default_rng(11)
    rows = instrument_rows
    base = simulate_predictions(rows, 0.6, rng)
    worse = simulate_predictions(rows, 0.3, rng, base=base, flip_rate=0.5)
    write_run(tmp_path / "ref", "bbq_instrument_loglik", rows, base, energy_joules=1000.0,
              inference_seconds=100.0)
    write_run(tmp_path / "run", "bbq_instrument_loglik", rows, worse, energy_joules=400.0,
              inference_seconds=50.0, precision="int8")
    result = analyze(tmp_path / "ref", [f"int8={tmp_path / 'run'}"], n_resamples=1000,
                     mc_draws=100, progress=False)
    overall = result.deltas.query("subgroup_type == 'all' and metric == 'accuracy'").iloc[0]
    assert overall["delta_pp"] < -5 and overall["ci_high"] < 0
    # primary: cluster permutation, at its mid-p floor (1/2) / (resamples + 1); McNemar beside it
    assert overall["test"] == "cluster_permutation"
    assert overall["p_value"] == pytest.approx(0.5 / 1001)
    assert overall["p_value_mcnemar"] < 1e-6
    runs = result.runs.set_index("run")
    assert runs.loc["int8", "energy_ratio"] == pytest.approx(0.4)
    assert runs.loc["int8", "runtime_ratio"] == pytest.approx(0.5)
    comparison = result.comparisons.iloc[0]
    assert comparison["rho_d"] == pytest.approx(np.mean(
        (base == np.array([r["label"] for r in rows])) != (worse == np.array(
            [r["label"] for r in rows]))))
    assert comparison["qri"] > 1
    # the design effect of the paired differences, independently: statsmodels' cluster-robust
    # variance of an intercept-only OLS (G/(G-1) correction) over its iid variance
    import statsmodels.api as sm

    labels = np.array([r["label"] for r in rows])
    d = (worse == labels).astype(float) - (base == labels).astype(float)
    units = pd.factorize(pd.Series([r["unit_id"] for r in rows]))[0]
    ols = sm.OLS(d, np.ones((len(d), 1)))
    deff_sm = (ols.fit(cov_type="cluster", cov_kwds={"groups": units}).bse[0]
               / ols.fit().bse[0]) ** 2
    assert comparison["design_effect"] == pytest.approx(deff_sm, rel=1e-9)
    # the MDE is on effective items: m / design effect (floored at 1) of the paired
    # differences; closed form (z_0.975 + z_0.8) * sqrt(deff * rho_d / m)
    deff = max(deff_sm, 1.0)
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert comparison["mde_pp_at_observed_rho_d"] == pytest.approx(
        100 * z * np.sqrt(deff * comparison["rho_d"] / 2000))


def test_mde_command_prints_and_writes_card(tmp_path):
    card = tmp_path / "card.md"
    proc = run_cli(["lm-eval-ext", "mde", "--m", "500", "--rho-d", "0.10", "--card", str(card)])
    assert proc.returncode == 0, proc.stderr
    assert "paired MDE = 3.96 pp" in proc.stdout
    lines = card.read_text().strip().splitlines()
    assert len(lines) == 5 and "3.96 pp" in lines[0]
    bad = run_cli(["lm-eval-ext", "mde", "--m", "500", "--rho-d", "0"])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "lm-eval-ext mde: error: argument --rho-d: 0 is not a share above 0 and at most 1 "
        "(see lm-eval-ext mde --help)"]


def test_grid_rank_flips_and_core_envelope(instrument_rows, tmp_path):
    """Two models x two precisions: model B beats A in bf16 but not in int8."""
    rows = instrument_rows[:400]
    rng = np.random.default_rng(4)
    fingerprint = load_manifest()["memberships"]["instrument"]["membership_sha256"]
    accuracy = {("A", "bf16"): 0.50, ("B", "bf16"): 0.70, ("A", "int8"): 0.70,
                ("B", "int8"): 0.45}
    grid = []
    for (model, precision), acc in accuracy.items():
        folder = tmp_path / f"{model}_{precision}"
        path = write_run(folder, "bbq_instrument_loglik", rows,
                         simulate_predictions(rows, acc, rng), model=model, precision=precision)
        results = json.loads(path.read_text())  # as the real task records its item set
        results["configs"]["bbq_instrument_loglik"]["metadata"]["membership_sha256"] = fingerprint
        path.write_text(json.dumps(results))
        grid.append(folder)
    result = analyze(grid[0], grid[1:2], grid=grid, core={"precision": ["bf16"]},
                     intersection=True, n_resamples=200, mc_draws=20, progress=False)
    full = result.rank_flips.query("envelope == 'full'").iloc[0]
    core = result.rank_flips.query("envelope == 'core'").iloc[0]
    assert (full["n_plus"], full["n_minus"], full["n_cells"], full["rho_flip"]) == (1, 1, 2, 0.5)
    assert (core["n_cells"], core["rho_flip"]) == (1, 0.0)
    shares = result.variance_shares.set_index("term")
    assert {"model", "precision", "Residual"} <= set(shares.index)
    assert "one run per cell" in shares.loc["model", "note"]  # 2x2, no replicates
    assert result.rankings.query("envelope == 'full'").iloc[0]["n_orderings"] == 2
    assert set(result.rank_flips["benchmark"]) == {"bbq[instrument]"}  # the membership's name


def test_runs_are_labelled_model_precision_batch_subset_and_told_apart(instrument_rows,
                                                                        tmp_path):
    rows = instrument_rows[:40]
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(7))
    write_run(tmp_path / "a", "bbq_subset_25pct_loglik", rows, preds, precision="int8",
              batch_size=32)
    write_run(tmp_path / "b", "bbq_subset_25pct_loglik", rows, preds, precision="int8",
              batch_size=32)
    write_run(tmp_path / "c", "bbq_instrument_loglik", rows, preds)
    runs = load_runs([tmp_path / "a", tmp_path / "b", f"named={tmp_path / 'c'}"])
    assert [r.run_id for r in runs] == ["synthetic-model@int8/bs32/25pct",
                                        "synthetic-model@int8/bs32/25pct#2", "named"]
    assert set(runs[1].items["run"]) == {"synthetic-model@int8/bs32/25pct#2"}
    [plain] = load_runs([tmp_path / "c"])
    assert plain.run_id == "synthetic-model@bf16/bs1/instrument"
    result = analyze(tmp_path / "c", [tmp_path / "a"], labels=["ref", "cheap"],
                     n_resamples=100, mc_draws=10, progress=False)
    assert set(result.deltas["run"]) == {"cheap"}
    with pytest.raises(AnalysisInputError, match="3 labels for the reference and 1 runs"):
        analyze(tmp_path / "c", [tmp_path / "a"], labels=["x", "y", "z"], progress=False)
    # a name given twice was renamed name#2 without a word
    for reference, runs, labels in ((f"b1={tmp_path / 'c'}", [f"b1={tmp_path / 'a'}"], None),
                                    (tmp_path / "c", [tmp_path / "a"], ["x", "x"])):
        with pytest.raises(AnalysisInputError) as caught:
            analyze(reference, runs, labels=labels, progress=False)
        assert str(caught.value) == ("two runs share the name " + ("b1" if labels is None else
                                     "x") + "; give each its own NAME=PATH (or --label)")


def test_regression_a_design_effect_below_one_never_shrinks_the_mde():
    """An estimated deff < 1 (noise around independent items) gave an MDE below
    the independent-item closed form."""
    from lm_eval_ext.analysis.stats.power import design_effect, usable_design_effect

    codes = np.repeat(np.arange(100), 4)
    rng = np.random.default_rng(4)  # independent items: the estimate lands below 1 here
    diff = rng.choice([-1.0, 0.0, 1.0], size=400, p=[0.1, 0.8, 0.1])
    deff = design_effect(diff, codes)
    assert 0.5 < deff < 0.9
    assert usable_design_effect(deff) == 1.0
    assert usable_design_effect(float("nan")) == 1.0 and usable_design_effect(1.7) == 1.7
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert paired_mde(400, 0.5, design_effect=usable_design_effect(deff)) == pytest.approx(
        z * np.sqrt(0.5 / 400))


def test_mde_says_when_no_effect_is_detectable_and_refuses_rho_d_with_runs(capsys, tmp_path):
    """``--m 1 --rho-d 1`` printed 280.16 pp as if attainable; ``--rho-d`` beside
    ``--runs`` was dropped without a word."""
    from lm_eval_ext.cli.main import main

    assert main(["mde", "--m", "1", "--rho-d", "1"]) == 0
    out = capsys.readouterr().out
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert f"paired MDE = {100 * z:.2f} pp" in out  # 280.16: closed form at m = rho_d = 1
    # (z / 0.5)^2 * rho_d items detect 50 pp
    assert "unattainable" in out and f"m >= {int(np.ceil((z / 0.5) ** 2))}" in out
    assert main(["mde", "--m", "500", "--rho-d", "0.1"]) == 0
    assert "unattainable" not in capsys.readouterr().out
    assert main(["mde", "--m", "500", "--rho-d", "0.1", "--runs", str(tmp_path),
                 str(tmp_path)]) == 2
    assert "give --rho-d or --runs, not both" in capsys.readouterr().err
    # trial 9: a --design-effect beside --runs was dropped for the runs' estimate
    assert main(["mde", "--design-effect", "7", "--runs", str(tmp_path), str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "lm-eval-ext: error: mde: give --design-effect or --runs, not both (--runs estimates "
        "the design effect from the two runs)")


def test_parse_failures_are_compared_only_between_runs_that_parse(instrument_rows, tmp_path):
    """A log-likelihood reference against a generative run reported parse_failure_rate
    +40 pp (the reference parses nothing, so its 0% is no baseline)."""
    from lm_eval_ext.analysis.metrics import PARSE_FAILURE_RATE, paired_metrics

    rows = instrument_rows[:40]
    write_run(tmp_path / "r", "bbq_instrument_loglik", rows,
              simulate_predictions(rows, 0.5, np.random.default_rng(0)))
    [loglik] = load_runs([tmp_path / "r"])
    generative = loglik.items.copy()
    generative["parse_method"] = "json"  # answers read from generations ...
    generative.loc[:15, "parse_method"] = "failure"  # ... 16 of them unparsed
    assert (generative["parse_method"] == "failure").sum() == 16
    assert PARSE_FAILURE_RATE in paired_metrics([generative, generative])
    assert PARSE_FAILURE_RATE not in paired_metrics([loglik.items, generative])
    assert [s.name for s in paired_metrics([loglik.items, generative])] == [
        s.name for s in paired_metrics([loglik.items, loglik.items])]


@pytest.mark.parametrize(("core", "message"), [
    ({"precison": ["bf16"]},
     "--core precison=...: the grid has no factor 'precison' (did you mean 'precision'?)"),
    ({"precision": ["bf16", "fp8"]},
     "--core precision=bf16,fp8: no grid run has precision fp8 (its runs have bf16, int8)"),
])
def test_a_core_level_no_grid_run_has_is_an_error(instrument_rows, tmp_path, core, message):
    """A --core factor or level that no cell has exited 0 without a note."""
    rows = instrument_rows[:40]
    rng = np.random.default_rng(5)
    grid = []
    for model, precision in [("A", "bf16"), ("B", "bf16"), ("A", "int8"), ("B", "int8")]:
        folder = tmp_path / f"{model}_{precision}"
        write_run(folder, "bbq_instrument_loglik", rows, simulate_predictions(rows, 0.6, rng),
                  model=model, precision=precision)
        grid.append(folder)
    with pytest.raises(AnalysisInputError) as raised:
        analyze(grid[0], grid[1:2], grid=grid, core=core, n_resamples=100, mc_draws=10,
                progress=False)
    assert str(raised.value) == message
    with pytest.raises(AnalysisInputError, match="every run is of model A, so there is no "
                                                 "ordering of models to flip"):
        analyze(grid[0], grid[2:3], grid=[grid[0], grid[2]], n_resamples=100, mc_draws=10,
                progress=False)
