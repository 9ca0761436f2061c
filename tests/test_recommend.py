"""`lm-eval-ext recommend`: the cheapest candidate x subset size that keeps every claim.

Checked against closed forms (scipy's normal quantiles), a simulation of the risk, hand-made
pilots whose answer is known, and a synthetic pilot through the real analysis pipeline.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import run_cli
from scipy import stats

from lm_eval_ext.analysis import analyze
from lm_eval_ext.analysis.report import write_outputs
from lm_eval_ext.analysis.stats.recommend import (
    Candidate,
    Claim,
    PilotMetric,
    change_risk,
    level_mde_pp,
    recommend,
    se_from_interval,
)
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_membership


def test_mde_scales_with_the_pilot_se_and_the_square_root_of_units():
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)  # 2.8016
    assert level_mde_pp(1.0, 500, 125) == pytest.approx(z * 2.0)
    assert level_mde_pp(1.0, 125, 500, alpha=0.1, power=0.9) == pytest.approx(
        (stats.norm.ppf(0.95) + stats.norm.ppf(0.9)) * 0.5)
    assert se_from_interval(-1.96, 1.96) == pytest.approx(1.0, rel=1e-3)


@pytest.mark.parametrize(("delta", "se", "margin"), [(0.0, 1.0, 2.0), (1.5, 1.0, 2.0),
                                                      (-3.0, 0.5, 2.0)])
def test_change_risk_matches_a_simulation(delta, se, margin):
    draws = np.random.default_rng(0).normal(delta, se, 400_000)
    assert change_risk(delta, se, margin) == pytest.approx(np.mean(np.abs(draws) > margin),
                                                           abs=0.003)
    assert change_risk(delta, 0.0, margin) == float(abs(delta) > margin)


def _candidate(name, cost, delta, delta_se, level_se, units=125):
    metric = PilotMetric(delta, delta_se, level_se, units)
    return Candidate(name, cost, {"accuracy": metric, "bias_s_dis": metric})


def test_the_cheapest_safe_and_decidable_option_is_chosen():
    """Hand-worked: margin 2 pp. 'shifty' is cheapest but shifts by 3 pp (risk ~0.84): out.
    'good' (1 J/item, level SE 1.0 pp at 125 units) is decidable once
    2.8016 x 1.0 x sqrt(125/n) <= 2, i.e. n >= 246: 250 units (1,000 items, 1,000 J).
    'pricey' is decidable at 125 units (500 items x 3 J = 1,500 J) and so costs more."""
    candidates = [_candidate("shifty", 0.5, 3.0, 0.5, 1.0),
                  _candidate("good", 1.0, 0.0, 0.5, 1.0),
                  _candidate("pricey", 3.0, 0.0, 0.5, 0.7)]
    claims = [Claim("accuracy", 2.0), Claim("bias_s_dis", 2.0)]
    result = recommend(candidates, claims, [62, 125, 250, 500], 4)
    assert (result.chosen.candidate, result.chosen.units, result.chosen.cost) == ("good", 250,
                                                                                  1000.0)
    shifty = [o for o in result.options if o.candidate == "shifty"]
    assert all(not o.safe for o in shifty)
    assert shifty[0].risk["accuracy"] == pytest.approx(stats.norm.sf(-2) + stats.norm.cdf(-10))
    needed = 125 * (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) ** 2 / 4
    good = {o.units: o for o in result.options if o.candidate == "good"}
    assert not good[125].decidable and good[250].decidable and 125 < needed <= 250
    assert recommend(candidates, [Claim("accuracy", 0.1)], [62, 125], 4).chosen is None


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    """A pilot on the 25% membership's first 500 items: 'same' gives the reference's answers
    (a quarter of the joules), 'broken' is cheaper still but loses 15 points of accuracy."""
    rows = load_membership("instrument").rows[:500]
    rng = np.random.default_rng(3)
    base = simulate_predictions(rows, 0.6, rng)
    labels = np.array([int(r["label"]) for r in rows])
    broken = np.where(rng.random(len(rows)) < 0.25, (labels + 1) % 3, base)
    folder = tmp_path_factory.mktemp("pilot")
    for name, preds, joules in (("ref", base, 4000.0), ("same", base, 1000.0),
                                ("broken", broken, 500.0)):
        write_run(folder / name, "bbq_instrument_loglik", rows, preds, model="m",
                  precision={"ref": "bf16", "same": "int8", "broken": "nf4"}[name],
                  energy_joules=joules, inference_seconds=joules / 100)
    result = analyze(folder / "ref", [folder / "same", folder / "broken"], n_resamples=1000,
                     mc_draws=10, seed=0, progress=False,
                     labels=["ref", "same", "broken"])
    write_outputs(result, folder / "analysis")
    return folder / "analysis"


def test_recommend_command_picks_the_protocol_that_keeps_the_claims(pilot, tmp_path):
    proc = run_cli(["lm-eval-ext", "recommend", str(pilot), "--claim", "accuracy=8",
                    "--claim", "bias_s_dis=15", "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = json.loads((tmp_path / "card.json").read_text())
    chosen = card["recommended"]
    assert chosen["protocol"] == "same"
    broken = [o for o in card["options"] if o["candidate"] == "broken"]
    assert broken and not any(o["not_expected_to_move"] for o in broken)
    assert card["baseline"] == {"protocol": "ref", "units": 500, "items": 2000, "cost": 16000.0}
    assert chosen["cost"] == pytest.approx(2.0 * chosen["items"])  # 1,000 J over 500 items
    smaller = [o for o in card["options"] if o["candidate"] == "same"
               and o["units"] < chosen["units"]]
    assert all(not o["decidable"] for o in smaller)  # the smallest decidable size was taken
    assert "Run same on" in (tmp_path / "card.md").read_text()
    assert math.isclose(chosen["saved"], 16000.0 - chosen["cost"])


def test_bad_claims_and_folders_are_one_line(pilot, tmp_path):
    proc = run_cli(["lm-eval-ext", "recommend", str(pilot), "--claim", "accuracy"])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "claim 'accuracy' is not METRIC=MARGIN_PP" in proc.stderr
    proc = run_cli(["lm-eval-ext", "recommend", str(tmp_path), "--claim", "accuracy=2"])
    assert proc.returncode != 0 and "deltas.csv not found" in proc.stderr
