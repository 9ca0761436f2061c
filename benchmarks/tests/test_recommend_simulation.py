"""recommend_simulation.py's known truth holds: every null shifts its claim by the margin."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import recommend_simulation as sim  # noqa: E402


@pytest.mark.parametrize("kind", list(sim.ACCURACY_NULLS))
def test_each_accuracy_null_shifts_accuracy_by_the_margin(kind):
    """Over 200,000 units the candidate's accuracy minus the reference's is the margin (-5
    points, +5 upwards, -10 for the margin-10 kind; the superpopulation the pilots are drawn
    from), within 0.15 points (4 SDs or more)."""
    rng = np.random.default_rng(5)
    ref = sim.accuracy_reference(200_000, rng)
    forced, cand = sim.ACCURACY_NULLS[kind](ref, rng)
    margin = sim.Cell(kind, 62, 1).margin * (1 if kind.endswith("_up") else -1)
    assert 100 * (cand.mean() - forced.mean()) == pytest.approx(margin, abs=0.15)


@pytest.mark.parametrize("kind", list(sim.ACCURACY_NULLS))
def test_every_candidate_of_a_pilot_keeps_its_shift_when_several_share_the_reference(kind):
    """Four candidates share one reference, which carries every candidate's forced answers:
    each candidate still shifts accuracy by the margin (30,000 units, within 0.35 points)."""
    frames, shifted = sim.simulate_instrument(sim.Cell(kind, 62, 4), np.random.default_rng(8),
                                              None, 30_000)
    runs = frames["m"]
    margin = sim.Cell(kind, 62, 1).margin * (1 if kind.endswith("_up") else -1)
    for name in shifted:
        shift = 100 * (runs[name]["correct"].mean() - runs["ref"]["correct"].mean())
        assert shift == pytest.approx(margin, abs=0.35), name


@pytest.mark.slow
def test_the_bbq_move_rates_shift_the_bias_scores_by_their_margins():
    """The rates calibrated in closed form move S_DIS by +10 and S_AMB by +5 points on a
    drawn population of 400,000 units, within 0.25 (about 3 SDs)."""
    rng = np.random.default_rng(99)
    layout = sim.bbq_layout(400_000, rng)
    ref = sim.bbq_reference(layout, rng)
    for metric, margin in (("bias_s_dis", 10.0), ("bias_s_amb", 5.0)):
        rate = sim.calibrate_rate(metric, margin)
        assert 0 < rate < 1 and sim.population_shift(metric, rate) == pytest.approx(margin)
        cand = sim.bbq_candidate(layout, ref, metric, rate, rng.random((len(layout), 3)))
        spec = sim.SPECS[metric]
        shift = 100 * (spec.compute(sim.bbq_frame(layout, cand))
                       - spec.compute(sim.bbq_frame(layout, ref)))
        assert shift == pytest.approx(margin, abs=0.25)


def test_between_model_pilots_move_model_a_only_and_churn_model_b():
    rng = np.random.default_rng(3)
    frames, shifted = sim.simulate_instrument(sim.Cell("between_models", 62, 2), rng, None, 2000)
    assert shifted == ["c0", "c1"]
    a, b = frames["a"], frames["b"]
    for name in shifted:
        moved_a = a[name]["correct"].to_numpy() != a["ref"]["correct"].to_numpy()
        assert not (a[name]["correct"].to_numpy()[moved_a]).any()  # only right -> wrong
        assert 0.08 < moved_a.reshape(-1, 4).any(1).mean() < 0.12  # a tenth of the units
        moved_b = b[name]["correct"].to_numpy() != b["ref"]["correct"].to_numpy()
        assert 0.02 < moved_b.mean() < 0.04  # 3% churn


def test_a_small_run_writes_both_rules_and_the_exact_case(tmp_path):
    cell = sim.Cell("all_or_nothing", 62, 1)
    row = sim.run_cell(cell, 3, 0.05, 200, 0, None)
    assert row["key"] == "all_or_nothing_62u_1c" and set(row["rules"]) == {
        "recommend", "t_tost_before"}
    exact = sim.exact_all_or_nothing(62, 0.05, 0.05, 200)
    probabilities = [r["probability"] for r in exact["units"]]
    assert sum(probabilities) == pytest.approx(1.0)
    # only the pilot that shows no broken unit is certified: the chance of drawing none of the
    # instrument's 25 broken units of 500 in 62, scipy's hypergeometric 0.0334
    assert [r["broken_units"] for r in exact["units"] if r["p"] <= 0.05] == [0]
    assert exact["error"] == pytest.approx(stats.hypergeom.pmf(0, 500, 25, 62))
    assert exact["units"][1]["p_before"] < 0.05  # Student's TOST certifies one broken unit
    assert exact["error_before"] > 0.15
