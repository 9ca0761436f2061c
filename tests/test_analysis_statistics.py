"""Every statistic against a closed form, scipy/statsmodels, or a simulation with known truth."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

from lm_eval_ext.analysis import (
    ACCURACY,
    ClusterDesign,
    DegenerateDataWarning,
    benjamini_hochberg,
    binomial_sd,
    design_effect,
    holm,
    mcnemar_exact,
    paired_delta,
    paired_mde,
    qri,
    rank_flip_table,
    ranking_summary,
    required_items,
    variance_shares,
)


@pytest.mark.parametrize(("b", "c", "n_same"), [(3, 12, 50), (10, 10, 5), (0, 7, 20), (25, 9, 300)])
def test_mcnemar_matches_statsmodels(b, c, n_same):
    ref = np.array([1] * b + [0] * c + [1] * n_same, bool)
    run = np.array([0] * b + [1] * c + [1] * n_same, bool)
    ours = mcnemar_exact(ref, run)
    # statsmodels: mcnemar([[a, b], [c, d]], exact=True)
    theirs = sm_mcnemar([[n_same, b], [c, 0]], exact=True)
    assert (ours.b, ours.c) == (b, c)
    assert ours.statistic == theirs.statistic
    assert ours.pvalue == pytest.approx(theirs.pvalue, rel=1e-12)


def test_mcnemar_without_discordant_pairs_is_nan_with_warning():
    with pytest.warns(DegenerateDataWarning):
        assert math.isnan(mcnemar_exact(np.ones(5, bool), np.ones(5, bool)).pvalue)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_holm_and_bh_match_statsmodels(seed):
    p = np.random.default_rng(seed).uniform(0, 0.2, size=17)
    p[3] = np.nan
    finite = np.isfinite(p)
    for ours, method in ((holm(p), "holm"), (benjamini_hochberg(p), "fdr_bh")):
        theirs = multipletests(p[finite], method=method)[1]
        assert np.allclose(ours[finite], theirs)
        assert np.isnan(ours[3])


def test_mde_paper_anchors_and_inverse():
    assert 100 * paired_mde(500, 0.10) == pytest.approx(3.96, abs=0.01)
    assert 100 * paired_mde(500, 0.05) == pytest.approx(2.80, abs=0.01)
    # (z_.975 + z_.8) = 2.8016; the inverse recovers m
    assert required_items(paired_mde(500, 0.10), 0.10) == 500
    with pytest.raises(ValueError, match="rho_d"):
        paired_mde(500, 0)


def test_mde_with_design_effect_is_the_same_formula_on_effective_items():
    assert paired_mde(500, 0.10, design_effect=2.0) == pytest.approx(paired_mde(250, 0.10))
    assert required_items(paired_mde(500, 0.10, design_effect=1.5), 0.10,
                          design_effect=1.5) == 500


def test_design_effect_closed_forms():
    codes = np.repeat(np.arange(100), 4)
    # identical differences within each cluster: deff = n_c (C/(C-1) x (n-1)/n)
    diff = np.repeat(np.tile([1.0, -1.0, 0.0, 0.0], 25), 4)
    assert design_effect(diff, codes) == pytest.approx(4 * (100 / 99) * (399 / 400))
    # differences that cancel within each cluster: no between-cluster variance
    assert design_effect(np.tile([1.0, -1.0, 0.0, 0.0], 100), codes) == pytest.approx(0.0)
    assert math.isnan(design_effect(np.zeros(400), codes))


def _unit_effect_datasets(rng, n_sets, n_units=500, per_unit=4, unit_sd=1.0, shift=0.0):
    """Paired correctness with per-unit effects drawn separately for reference and run.

    logit P(correct) = item + unit baseline + a unit effect drawn anew for each run (SD
    ``unit_sd``) + ``shift`` for the run. With shift 0 the two runs are exchangeable within
    each natural unit (the null), yet their discordances cluster by unit.
    """
    expit = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    units = np.repeat(np.arange(n_units), per_unit)
    for _ in range(n_sets):
        base = rng.normal(0, 1, n_units)[units] + rng.normal(0, 1, units.size)
        ref = rng.random(units.size) < expit(base + rng.normal(0, unit_sd, n_units)[units])
        run = rng.random(units.size) < expit(base + shift + rng.normal(0, unit_sd, n_units)[units])
        yield (pd.DataFrame({"correct": ref, "unit_id": units}),
               pd.DataFrame({"correct": run, "unit_id": units}))


@pytest.mark.slow
@pytest.mark.parametrize("unit_sd", [0.5, 1.0])
def test_primary_pvalue_keeps_type_one_error_under_unit_correlated_nulls(unit_sd):
    """1,000 null datasets (500 units x 4 rows): the primary (cluster) test rejects 3.5-6.5%
    at alpha = 0.05; the item-level McNemar beside it does not (it ignores the clustering)."""
    rng = np.random.default_rng(20261130 + int(10 * unit_sd))
    primary, item_level = [], []
    for ref, run in _unit_effect_datasets(rng, 1000, unit_sd=unit_sd):
        delta = paired_delta(ACCURACY, ref, run, ClusterDesign.build(ref["unit_id"], 399, rng))
        primary.append(delta.pvalue <= 0.05)
        item_level.append(delta.pvalue_mcnemar <= 0.05)
    print(f"unit SD {unit_sd}: cluster permutation {np.mean(primary):.3f}, "
          f"McNemar {np.mean(item_level):.3f}")
    assert delta.test == "cluster_permutation"
    assert 0.035 <= np.mean(primary) <= 0.065, np.mean(primary)
    # why McNemar is not primary: it ignores the clustering (measured 6.6% and 10.1%)
    assert np.mean(item_level) > {0.5: 0.055, 1.0: 0.09}[unit_sd], np.mean(item_level)


@pytest.mark.slow
def test_primary_test_power_and_design_effect_mde_against_simulation():
    """A true run effect (+0.25 logit): the permutation test's power matches the normal
    approximation from the simulated sampling SD of the delta, and the design-effect standard
    error sqrt(deff * rho_d / m) matches that SD (the unit of analysis of the MDE)."""
    rng = np.random.default_rng(11)
    rejected, deltas, model_se = [], [], []
    for ref, run in _unit_effect_datasets(rng, 400, unit_sd=1.0, shift=0.25):
        delta = paired_delta(ACCURACY, ref, run, ClusterDesign.build(ref["unit_id"], 399, rng))
        rejected.append(delta.pvalue <= 0.05)
        deltas.append(delta.statistic)
        d = run["correct"].to_numpy(float) - ref["correct"].to_numpy(float)
        rho_d = float(np.mean(d != 0))
        model_se.append(math.sqrt(design_effect(d, ref["unit_id"]) * rho_d / d.size))
    mean, sd = float(np.mean(deltas)), float(np.std(deltas, ddof=1))
    expected_power = stats.norm.cdf(mean / sd - 1.96) + stats.norm.cdf(-mean / sd - 1.96)
    power = float(np.mean(rejected))
    print(f"power {power:.3f} (normal approximation {expected_power:.3f}); delta {100 * mean:.2f}"
          f" pp, SD {100 * sd:.2f} pp; design-effect SE {100 * np.mean(model_se):.2f} pp")
    assert 0.4 < power < 0.95
    assert power == pytest.approx(expected_power, abs=0.07)
    # rho_d/m is the variance of mean(d) under the null; with a shift it overstates it by
    # mean(d)^2/m (a few percent here): the MDE stays conservative.
    assert float(np.mean(model_se)) == pytest.approx(sd, rel=0.12)


def test_binomial_and_hypergeometric_sd_match_simulation():
    rng = np.random.default_rng(7)
    population = (rng.random(2000) < 0.3).astype(float)
    p = population.mean()
    draws = np.array([population[rng.choice(2000, 500, replace=False)].mean()
                      for _ in range(4000)])
    assert binomial_sd(p, 500, 2000) == pytest.approx(draws.std(ddof=1), rel=0.06)
    assert binomial_sd(p, 500) == pytest.approx(math.sqrt(p * (1 - p) / 500))


def test_qri():
    assert qri(-3.0, 1.5) == 2.0
    assert qri(3.0, 3.0, 4.0) == pytest.approx(3 / 5)


def _clustered_dataset(rng, n_clusters, per_cluster, t_ref, t_run):
    cluster = np.repeat(np.arange(n_clusters), per_cluster)
    u = rng.normal(size=n_clusters)[cluster]
    e = rng.normal(size=cluster.size)  # shared item effect: paired outcomes correlate
    ref = u + e + rng.normal(size=cluster.size) > t_ref
    run = u + e + rng.normal(size=cluster.size) > t_run
    frame = lambda c: pd.DataFrame({"correct": c, "unit_id": cluster.astype(str)})  # noqa: E731
    return frame(ref), frame(run)


@pytest.mark.slow
def test_cluster_bootstrap_ci_coverage_with_known_truth():
    """Coverage of the 95% percentile cluster-bootstrap CI of a paired accuracy delta over
    600 simulated clustered datasets must lie in 93-97%."""
    rng = np.random.default_rng(20261129)
    t_ref, t_run = 0.0, 0.25
    sd = math.sqrt(3.0)  # cluster + item + noise, all N(0, 1)
    truth = stats.norm.cdf(-t_run / sd) - stats.norm.cdf(-t_ref / sd)
    covered, n_sets = 0, 600
    for _ in range(n_sets):
        ref, run = _clustered_dataset(rng, 120, 4, t_ref, t_run)
        design = ClusterDesign.build(ref["unit_id"], 1000, rng)
        ci = paired_delta(ACCURACY, ref, run, design).ci
        covered += ci.low <= truth <= ci.high
    coverage = covered / n_sets
    assert 0.93 <= coverage <= 0.97, coverage


def test_permutation_pvalue_detects_a_real_effect_and_not_a_null():
    rng = np.random.default_rng(3)
    ref, run = _clustered_dataset(rng, 200, 4, 0.0, 0.6)
    design = ClusterDesign.build(ref["unit_id"], 2000, rng)
    delta = paired_delta(ACCURACY, ref, run, design)
    assert delta.test == "cluster_permutation" and delta.pvalue < 0.01
    null_pvalues = []
    for _ in range(40):
        ref, run = _clustered_dataset(rng, 60, 4, 0.0, 0.0)
        null_pvalues.append(paired_delta(ACCURACY, ref, run,
                                   ClusterDesign.build(ref["unit_id"], 500, rng)).pvalue)
    assert 0.3 < np.mean(null_pvalues) < 0.7  # roughly uniform under the null


def test_undefined_resamples_are_dropped_from_the_interval_only_with_a_flag():
    """Below 10% undefined draws, intervals silently came from the rest."""
    from lm_eval_ext.analysis.stats.bootstrap import percentile_intervals

    rng = np.random.default_rng(2)
    draws = rng.normal(size=(2000, 3))
    draws[:100, 1] = np.nan  # 5% undefined: interval from the defined 1,900
    draws[:400, 2] = np.inf  # 20%: no interval
    with pytest.warns(DegenerateDataWarning) as caught:
        low, high, undefined = percentile_intervals(draws, 0.9)
    assert undefined.tolist() == pytest.approx([0.0, 0.05, 0.2])
    assert [low[1], high[1]] == pytest.approx(np.quantile(draws[100:, 1], [0.05, 0.95]))
    assert [low[0], high[0]] == pytest.approx(np.quantile(draws[:, 0], [0.05, 0.95]))
    assert np.isnan(low[2]) and np.isnan(high[2])
    messages = " ".join(str(w.message) for w in caught)
    assert "1 interval(s) with >10% undefined" in messages
    assert "1 interval(s) from the defined resamples only (up to 5.0% undefined" in messages


def test_degenerate_subgroups_give_nan_not_zero():
    ref = pd.DataFrame({"correct": [True, False], "unit_id": ["a", "a"]})
    design = ClusterDesign.build(ref["unit_id"], 200, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        delta = paired_delta(ACCURACY, ref, ref.assign(correct=[True, True]), design)
    assert delta.statistic == pytest.approx(0.5)
    assert math.isnan(delta.ci.low) and math.isnan(delta.ci.high)


def _grid():
    # 3 models x 4 configs; A always beats C; A vs B flips in one config
    values = {"c1": (0.8, 0.7, 0.5), "c2": (0.75, 0.7, 0.4), "c3": (0.6, 0.65, 0.5),
              "c4": (0.9, 0.8, 0.6)}
    return pd.DataFrame([{"benchmark": "bbq", "config": c, "model": m, "value": v}
                         for c, vs in values.items() for m, v in zip("ABC", vs, strict=False)])


def test_rank_flips_by_hand():
    table = rank_flip_table(_grid()).set_index(["model_a", "model_b"])
    assert table.loc[("A", "B"), ["n_plus", "n_minus", "n_cells"]].tolist() == [3, 1, 4]
    assert table.loc[("A", "B"), "rho_flip"] == 0.25
    assert table.loc[("A", "C"), "rho_flip"] == 0.0


def test_mean_kendall_tau_matches_scipy():
    grid = _grid()
    wide = grid.pivot(index="config", columns="model", values="value")
    taus = [stats.kendalltau(wide.loc[a], wide.loc[b]).statistic
            for i, a in enumerate(wide.index) for b in wide.index[i + 1:]]
    summary = ranking_summary(grid).iloc[0]
    assert summary["mean_kendall_tau"] == pytest.approx(np.mean(taus))
    assert summary["n_orderings"] == 2  # A > B > C and B > A > C


def test_variance_shares_match_balanced_closed_form():
    rng = np.random.default_rng(0)
    rows = [{"benchmark": "b", "model": m, "template_tier": t, "value":
             {"m1": 0.0, "m2": 0.3}[m] + {"t1": 0.0, "t2": 0.1, "t3": -0.1}[t]
             + rng.normal(0, 0.02)}
            for m in ("m1", "m2") for t in ("t1", "t2", "t3") for _ in range(5)]
    data = pd.DataFrame(rows)
    shares = variance_shares(data, factors=("model", "template_tier"),
                             interactions=False).set_index("term")
    grand = data["value"].mean()
    total = ((data["value"] - grand) ** 2).sum()
    for factor, term in (("model", "model"), ("template_tier", "template_tier")):
        means = data.groupby(factor)["value"].mean()
        counts = data.groupby(factor)["value"].size()
        ss = float((counts * (means - grand) ** 2).sum())  # balanced: Type II SS = main-effect SS
        assert shares.loc[term, "sum_sq"] == pytest.approx(ss, rel=1e-9)
        assert shares.loc[term, "share"] == pytest.approx(ss / total, rel=1e-9)
    assert shares.loc["model", "share"] > 0.7


@pytest.mark.parametrize(("up", "down", "same"), [(14, 6, 80), (9, 9, 40), (30, 12, 458), (3, 0, 20)])
def test_permutation_p_with_independent_items_is_the_sign_test(up, down, same):
    """One item per unit: swapping runs flips the sign of each discordant pair, so the
    conventional p is scipy's exact two-sided binomial test on the discordant pairs and the
    mid-p is 2 [P(X < k) + P(X = k) / 2] (k = the smaller count), up to resampling error."""
    from lm_eval_ext.analysis import permutation_pvalues

    ref = np.r_[np.zeros(up), np.ones(down), np.ones(same // 2), np.zeros(same - same // 2)]
    run = np.r_[np.ones(up), np.zeros(down), np.ones(same // 2), np.zeros(same - same // 2)]
    design = ClusterDesign.build(np.arange(ref.size), 40_000, np.random.default_rng(7))
    sums = [design.sums(ACCURACY.features(pd.DataFrame({"correct": c}))[:, None, :])
            for c in (ref, run)]
    conventional = permutation_pvalues(ACCURACY.value, design, *sums, mid_p=False)[0]
    mid = permutation_pvalues(ACCURACY.value, design, *sums)[0]
    n, k = up + down, min(up, down)
    exact = stats.binomtest(k, n, 0.5).pvalue
    exact_mid = 1 - stats.binom.pmf(n // 2, n, 0.5) / 2 if up == down else (
        2 * (stats.binom.cdf(k - 1, n, 0.5) + stats.binom.pmf(k, n, 0.5) / 2))
    assert conventional == pytest.approx(exact, abs=0.006)
    assert mid == pytest.approx(exact_mid, abs=0.006)
    assert mid < conventional  # the mid-p counts ties by half


def test_permutation_p_without_discordant_pairs_is_one():
    from lm_eval_ext.analysis import permutation_pvalues

    same = np.r_[np.ones(30), np.zeros(20)]
    design = ClusterDesign.build(np.arange(50), 500, np.random.default_rng(1))
    sums = design.sums(ACCURACY.features(pd.DataFrame({"correct": same}))[:, None, :])
    assert permutation_pvalues(ACCURACY.value, design, sums, sums)[0] == 1.0


def test_each_runs_own_interval_matches_the_wald_interval_and_the_cluster_robust_one():
    """The level intervals beside each delta (quality vs cost's error bars): with one item
    per cluster the percentile bootstrap matches the Wald interval p +- 1.96 sqrt(p(1-p)/n);
    with 4 correlated items per unit it matches statsmodels' cluster-robust SE of the mean."""
    import statsmodels.api as sm

    rng = np.random.default_rng(7)
    ref = pd.DataFrame({"correct": rng.random(1000) < 0.3, "unit_id": np.arange(1000)})
    run = pd.DataFrame({"correct": rng.random(1000) < 0.6, "unit_id": np.arange(1000)})
    delta = paired_delta(ACCURACY, ref, run, ClusterDesign.build(ref["unit_id"], 4000, rng))
    for ci, p in ((delta.reference_ci, delta.reference), (delta.value_ci, delta.value)):
        half = 1.96 * math.sqrt(p * (1 - p) / 1000)
        assert ci.low == pytest.approx(p - half, abs=0.1 * half)
        assert ci.high == pytest.approx(p + half, abs=0.1 * half)
    ref, run = next(_unit_effect_datasets(rng, 1, n_units=400))
    delta = paired_delta(ACCURACY, ref, run, ClusterDesign.build(ref["unit_id"], 4000, rng))
    fit = sm.OLS(run["correct"].astype(float), np.ones(len(run))).fit(
        cov_type="cluster", cov_kwds={"groups": run["unit_id"]})
    width = delta.value_ci.high - delta.value_ci.low
    assert width == pytest.approx(2 * 1.96 * float(fit.bse.iloc[0]), rel=0.1)


def test_batched_kendall_tau_b_matches_scipy_with_ties():
    from lm_eval_ext.analysis.stats.rank_flips import kendall_tau_b

    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 4, size=(200, 6)), rng.integers(0, 4, size=(200, 6))
    ours = kendall_tau_b(x.astype(float), y.astype(float))
    for row in range(200):
        expected = stats.kendalltau(x[row], y[row]).statistic
        assert ours[row] == pytest.approx(expected, nan_ok=True)


def _known_grid(accuracies: dict, units: int = 100, seed: int = 0):
    """Cells and per-unit counts of a grid with known accuracies (4 items per unit)."""
    rng = np.random.default_rng(seed)
    rows, sums = [], {}
    for index, ((config, model), accuracy) in enumerate(accuracies.items()):
        correct = rng.random((units, 4)) < accuracy
        sums[index] = pd.DataFrame({"correct": correct.sum(1).astype(float),
                                    "n": np.full(units, 4.0)},
                                   index=[f"u{u}" for u in range(units)])
        rows.append({"benchmark": "bbq", "config": config, "model": model,
                     "value": correct.mean()})
    return pd.DataFrame(rows), sums


def test_rank_flip_intervals_know_a_real_flip_from_resampling_noise():
    """Known truth: A far ahead in c1 and c2, B far ahead in c3 (one real flip in three
    conditions: rho_flip 1/3 in every resample, beyond the noise); two models of equal accuracy
    reorder under resampling alone (large noise, nothing beyond it)."""
    from lm_eval_ext.analysis.stats.rank_flips import rank_flip_intervals

    cells, sums = _known_grid({("c1", "A"): 0.8, ("c1", "B"): 0.3, ("c2", "A"): 0.8,
                         ("c2", "B"): 0.3, ("c3", "A"): 0.3, ("c3", "B"): 0.8})
    pairs, taus = rank_flip_intervals(cells, sums, 500, 1)
    row = pairs.iloc[0]
    assert (row["rho_flip_ci_low"], row["rho_flip_ci_high"]) == pytest.approx((1 / 3, 1 / 3))
    assert row["ordering_noise"] < 0.01 and row["beyond_noise"]
    tau = taus.iloc[0]
    assert tau["mean_kendall_tau_ci_low"] == pytest.approx(-1 / 3)  # (1 - 1 - 1) / 3
    cells, sums = _known_grid({(c, m): 0.5 for c in ("c1", "c2", "c3") for m in ("A", "B")}, seed=2)
    row = rank_flip_intervals(cells, sums, 500, 1)[0].iloc[0]
    assert row["ordering_noise"] > 0.15 and not row["beyond_noise"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_judge_permutation_p_equals_exact_enumeration_of_all_sign_flips(seed):
    """12 natural units of 1-3 judge-scored items (scores in tenths, not integers): with the
    resampling rows set to all 2^12 swap patterns, the package's p is the exact one. The
    reference enumerates the patterns in integer arithmetic (tenths), so its ties are exact."""
    from itertools import product

    from lm_eval_ext.analysis import permutation_pvalues
    from lm_eval_ext.analysis.metrics import judge_metric

    rng = np.random.default_rng(seed)
    k = 12
    units = np.repeat(np.arange(k), rng.integers(1, 4, k))
    tenths = {r: rng.integers(0, 11, units.size) for r in ("ref", "run")}
    spec = judge_metric("judge_score")
    patterns = np.array(list(product((0.0, 1.0), repeat=k)))
    design = ClusterDesign(units, k, np.ones_like(patterns), patterns)
    sums = [design.sums(spec.features(pd.DataFrame({"judge_score": tenths[r] / 10}))[:, None, :])
            for r in ("ref", "run")]
    ours = {mid: permutation_pvalues(spec.value, design, *sums, mid_p=mid)[0]
            for mid in (True, False)}

    unit_diff = np.bincount(units, tenths["run"] - tenths["ref"], minlength=k).astype(int)
    observed = abs(int(unit_diff.sum()))
    null = np.abs((1 - 2 * patterns.astype(int)) @ unit_diff)  # a swapped unit changes sign
    above, tied = int((null > observed).sum()), int((null == observed).sum())
    exact_mid, exact = (above + tied / 2) / 2 ** k, (above + tied) / 2 ** k
    # the package counts the observed delta once more among B + 1 (here B = 2^k)
    assert ours[True] == pytest.approx((above + (tied + 1) / 2) / (2 ** k + 1), abs=1e-12)
    assert ours[False] == pytest.approx((above + tied + 1) / (2 ** k + 1), abs=1e-12)
    assert ours[True] == pytest.approx(exact_mid, abs=1 / 2 ** k)
    assert ours[False] == pytest.approx(exact, abs=1 / 2 ** k)


def test_rank_flip_test_keeps_its_size_on_the_boundary_null_and_finds_large_flips():
    """Known truth. No true flip, one side as close as it gets (gaps +8, 0, +8, 0 pp): 300
    grids call a flip beyond noise at most 5% of the time (+3 Monte Carlo SDs); the rule
    before (rho_flip interval above the ordering noise) called one far more often. Real flips
    (+10, -10, +10, -10 pp on 800 items): found in most grids."""
    from lm_eval_ext.analysis.stats.rank_flips import rank_flip_intervals
    from lm_eval_ext.analysis.synthetic import two_model_grid

    rng = np.random.default_rng(5)
    called = before = 0
    for _ in range(300):
        row = rank_flip_intervals(*two_model_grid((8, 0, 8, 0), rng, 200), 199, rng)[0].iloc[0]
        called += bool(row["beyond_noise"])
        before += bool(row["rho_flip_ci_low"] > row["ordering_noise"])
    assert called / 300 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 300)
    assert before / 300 > 0.1
    found = sum(bool(rank_flip_intervals(*two_model_grid((10, -10, 10, -10), rng, 200), 199,
                                         rng)[0].iloc[0]["beyond_noise"]) for _ in range(40))
    assert found >= 30


def test_flip_pvalue_is_one_without_spread_and_holm_adjusts_over_pairs():
    from lm_eval_ext.analysis.stats.rank_flips import flip_pvalue, rank_flip_intervals

    assert flip_pvalue(np.array([0.1]), np.zeros((10, 1))) == 1.0
    assert flip_pvalue(np.array([0.1, -0.1]), np.zeros((10, 2))) == 1.0
    rng = np.random.default_rng(2)
    cells, sums = _known_grid({(c, m): acc for c in ("c1", "c2") for m, acc in
                               zip("ABC", (0.8, 0.3, 0.5) if c == "c1" else (0.3, 0.8, 0.5),
                                   strict=True)}, seed=3)
    pairs = rank_flip_intervals(cells, sums, 199, rng)[0]
    expected = multipletests(pairs["flip_p"], method="holm")[1]
    assert pairs["flip_p_holm"].to_numpy() == pytest.approx(expected)
    assert pairs["beyond_noise"].tolist() == list(expected <= 0.05)


def test_a_grid_cell_with_two_runs_is_refused_never_averaged():
    from lm_eval_ext.analysis import AnalysisInputError
    from lm_eval_ext.analysis.stats.rank_flips import cell_matrix

    cells = pd.DataFrame({"config": ["bf16", "bf16", "int8"], "model": ["a", "a", "a"],
                          "value": [0.5, 0.7, 0.6], "run": ["r1", "r2", "r3"]})
    with pytest.raises(AnalysisInputError) as caught:
        cell_matrix(cells)
    assert str(caught.value) == ("grid cell a / bf16 holds several runs (r1, r2); a cell is one "
                                 "run, never a mean: pass one run per model x configuration x "
                                 "item set")
    assert cell_matrix(cells.drop(index=1)).loc["bf16", "a"] == 0.5  # one run per cell


@pytest.mark.parametrize("alpha", [0.05, 1e-10, 1e-17, 1e-300])
def test_mde_quantile_holds_for_tiny_alpha_against_mpmath(alpha):
    """--alpha 1e-17 made 1 - alpha/2 round to 1: an infinite MDE, then an OverflowError
    (trial 8). The normal quantile against mpmath at 50 digits: erfc(z / sqrt 2) = alpha."""
    import mpmath

    from lm_eval_ext.analysis import paired_mde, required_items

    mpmath.mp.dps = 50
    z_alpha = float(mpmath.findroot(lambda z: mpmath.erfc(z / mpmath.sqrt(2)) - alpha,
                                    float(stats.norm.isf(alpha / 2))))
    expected = (z_alpha + stats.norm.ppf(0.8)) * math.sqrt(0.1 / 500)
    assert paired_mde(500, 0.1, alpha, 0.8) == pytest.approx(expected, rel=1e-12)
    assert math.isfinite(required_items(0.05, 0.1, alpha, 0.8))
    from lm_eval_ext.analysis.stats.recommend import level_mde_pp  # recommend's own (a nan card)

    z_sum = z_alpha + stats.norm.ppf(0.8)
    assert level_mde_pp(2.0, 50, 200, alpha, 0.8) == pytest.approx(z_sum * 2.0 * 0.5, rel=1e-12)
