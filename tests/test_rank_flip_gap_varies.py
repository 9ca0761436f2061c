"""``gap_varies_p``: Hotelling's T^2 against scipy/statsmodels, and its size on known nulls."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats import multivariate

from lm_eval_ext.analysis.stats.bootstrap import bootstrap_counts
from lm_eval_ext.analysis.stats.rank_flips import (
    cell_influence,
    gap_varies_pvalue,
    rank_flip_intervals,
)
from lm_eval_ext.analysis.synthetic import two_model_grid


def _unit_gaps(cells: pd.DataFrame, sums: dict) -> np.ndarray:
    """(units, conditions): each unit's accuracy of model a minus b's (equal-size units)."""
    def accuracy(model: str) -> np.ndarray:
        rows = cells.index[cells["model"] == model]
        return np.array([sums[i]["correct"] / sums[i]["n"] for i in rows]).T

    return accuracy("a") - accuracy("b")


@pytest.mark.parametrize(("gaps", "correlated"), [((0, 4), False), ((0, 3, -3, 2), True),
                                                  ((1, 0, 0, 2, 0, -1, 0, 3), False)])
def test_gap_varies_p_is_hotellings_t2_of_the_units_deviations(gaps, correlated):
    """On units of 4 items each the gaps are means of the units' gaps, so the p is Hotelling's
    one-sample T^2 test that the units' deviations from their mean over conditions average to 0
    (statsmodels' test_mvmean on all but one of them); with two conditions a paired t-test."""
    rng = np.random.default_rng(len(gaps))
    cells, sums = two_model_grid(gaps, rng, 62, correlated)
    ours = rank_flip_intervals(cells, sums, 99, rng)[0].iloc[0]["gap_varies_p"]
    unit_gaps = _unit_gaps(cells, sums)
    deviations = unit_gaps - unit_gaps.mean(axis=1, keepdims=True)
    reference = stats.ttest_1samp(unit_gaps[:, 0] - unit_gaps[:, 1], 0.0).pvalue \
        if len(gaps) == 2 else multivariate.test_mvmean(deviations[:, :-1]).pvalue
    assert ours == pytest.approx(reference, rel=1e-9)


def test_cell_influence_gives_the_bootstrap_covariance_of_ratio_accuracies():
    """Units of 1-6 items (accuracy a ratio of sums): the influences' covariance over n is the
    covariance the natural-unit bootstrap gives the cells' accuracies (20,000 resamples)."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 7, 300).astype(float)
    ability = rng.random(300)
    shared = rng.random((300, 6)) < ability[:, None]  # correlated cells: half their items shared
    correct = np.array([np.where(np.arange(6) < sizes[:, None],
                                 np.where(rng.random((300, 6)) < 0.5, shared,
                                          rng.random((300, 6)) < ability[:, None]), 0).sum(1)
                        for _ in range(3)], float)
    counts = np.tile(sizes, (3, 1))
    weights = bootstrap_counts(300, 20_000, rng)
    boot = np.cov((weights @ correct.T) / (weights @ counts.T), rowvar=False)
    ours = np.cov(cell_influence(correct, counts)) / 300
    assert np.diag(ours) == pytest.approx(np.diag(boot), rel=0.05)
    assert ours[0, 1] == pytest.approx(boot[0, 1], rel=0.1)


def test_gap_varies_p_ignores_a_condition_that_repeats_another_and_needs_two():
    """A condition whose outputs repeat another's adds no dimension (the p is unchanged, not
    blown up by a singular covariance); one condition, or no spread, gives 1."""
    rng = np.random.default_rng(3)
    cells, sums = two_model_grid((0, 8, -8), rng, 62, True)
    first = cells[cells["config"] == "c0"]
    copy = first.assign(config="c3").set_axis(first.index + len(cells))
    wider = pd.concat([cells, copy])
    wider_sums = {**sums, **{i + len(cells): sums[i] for i in first.index}}
    p = rank_flip_intervals(cells, sums, 99, rng)[0].iloc[0]["gap_varies_p"]
    assert p < 0.5
    assert rank_flip_intervals(wider, wider_sums, 99, rng)[0].iloc[0]["gap_varies_p"] == \
        pytest.approx(p, rel=1e-9)
    assert rank_flip_intervals(first, sums, 99, rng)[0].iloc[0]["gap_varies_p"] == 1.0
    assert gap_varies_pvalue(np.array([0.1, 0.0]), np.zeros((50, 2))) == 1.0


def _null_rate(gaps_pp: list[float], grids: int, units: int, seed: int) -> float:
    """Share of grids (independent conditions, 4 items a unit) with gap_varies_p <= 0.05."""
    rng = np.random.default_rng(seed)
    half = np.repeat(np.asarray(gaps_pp) / 200, 2) * np.tile([1, -1], len(gaps_pp))
    rejected = 0
    for _ in range(grids):
        chance = stats.logistic.cdf(rng.normal(size=units))
        correct = rng.binomial(4, np.clip(chance[None, :] + half[:, None], 0, 1)).astype(float)
        influence = cell_influence(correct, np.full(correct.shape, 4.0))
        gaps = correct[0::2].mean(1) / 4 - correct[1::2].mean(1) / 4
        rejected += gap_varies_pvalue(gaps, (influence[0::2] - influence[1::2]).T) <= 0.05
    return rejected / grids


def test_gap_varies_p_keeps_its_size_on_tied_and_constant_gap_nulls_and_finds_a_varying_gap():
    """Known truth, 2 x 8 grids on 62 units: with the gap 0 or 3 pp in every condition (no
    interaction) 3,000 grids reject within 3 Monte Carlo SDs of 5% (the bootstrap max-|t| before
    rejected 7.3% and 6.9% of such grids in benchmarks/rank_flip_simulation.py); gaps
    alternating +-6 pp are found in most grids."""
    band = 3 * np.sqrt(0.05 * 0.95 / 3000)
    for gap in (0.0, 3.0):
        assert abs(_null_rate([gap] * 8, 3000, 62, int(gap)) - 0.05) <= band
    assert _null_rate([6.0, -6.0] * 4, 300, 62, 9) >= 0.6


def test_gap_varies_p_of_a_pair_counts_only_the_units_its_runs_scored():
    """A third model scored on twice the units leaves the pair's p as without it."""
    rng = np.random.default_rng(4)
    cells, sums = two_model_grid((0, 5, -5, 0), rng, 62, False)
    alone = rank_flip_intervals(cells, sums, 99, rng)[0].iloc[0]["gap_varies_p"]
    more = {len(cells) + c: pd.DataFrame({"correct": rng.integers(0, 5, 124).astype(float),
                                          "n": np.full(124, 4.0)},
                                         index=[f"u{u}" for u in range(124)]) for c in range(4)}
    third = pd.DataFrame([{"benchmark": "bbq", "config": f"c{c}", "model": "c",
                           "value": float(more[len(cells) + c]["correct"].mean() / 4)}
                          for c in range(4)], index=list(more))
    pairs = rank_flip_intervals(pd.concat([cells, third]), {**sums, **more}, 99, rng)[0]
    pair = pairs[(pairs["model_a"] == "a") & (pairs["model_b"] == "b")].iloc[0]
    assert pair["gap_varies_p"] == pytest.approx(alone, rel=1e-9)
