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


def test_permutation_p_detects_a_real_effect_and_not_a_null():
    rng = np.random.default_rng(3)
    ref, run = _clustered_dataset(rng, 200, 4, 0.0, 0.6)
    design = ClusterDesign.build(ref["unit_id"], 2000, rng)
    assert paired_delta(ACCURACY, ref, run, design).pvalue_permutation < 0.01
    null_p = []
    for _ in range(40):
        ref, run = _clustered_dataset(rng, 60, 4, 0.0, 0.0)
        null_p.append(paired_delta(ACCURACY, ref, run,
                                   ClusterDesign.build(ref["unit_id"], 500, rng)).pvalue_permutation)
    assert 0.3 < np.mean(null_p) < 0.7  # roughly uniform under the null


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
