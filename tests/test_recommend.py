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


def _pilot(folder, answers: dict[str, tuple[str, str, float]]):
    """A pilot analysis on the instrument's first 500 items: per run (precision, answers,
    joules), answers 'base' (accuracy 0.6) or 'broken' (a quarter of them moved off)."""
    rows = load_membership("instrument").rows[:500]
    rng = np.random.default_rng(3)
    base = simulate_predictions(rows, 0.6, rng)
    labels = np.array([int(r["label"]) for r in rows])
    preds = {"base": base,
             "broken": np.where(rng.random(len(rows)) < 0.25, (labels + 1) % 3, base)}
    for name, (precision, kind, joules) in answers.items():
        write_run(folder / name, "bbq_instrument_loglik", rows, preds[kind], model="m",
                  precision=precision, energy_joules=joules, inference_seconds=joules / 100)
    names = list(answers)
    result = analyze(folder / names[0], [folder / n for n in names[1:]], n_resamples=1000,
                     mc_draws=10, seed=0, progress=False, labels=names)
    write_outputs(result, folder / "analysis")
    return folder / "analysis"


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    """'same' gives the reference's answers (a quarter of the joules), 'broken' is cheaper
    still but loses 15 points of accuracy."""
    return _pilot(tmp_path_factory.mktemp("pilot"), {
        "ref": ("bf16", "base", 4000.0), "same": ("int8", "base", 1000.0),
        "broken": ("nf4", "broken", 500.0)})


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


def test_several_pilots_choose_one_protocol_that_keeps_the_claims_for_every_model(
        pilot, tmp_path_factory, tmp_path):
    """A second model for which 'same' breaks and 'broken' is harmless.

    Only the reference protocol keeps accuracy for both, on the smallest subset where it stays
    decidable: 125 units (level SE about sqrt(.6 x .4 / 500) = 2.2 pp, MDE about 6.2 pp; 8.7 pp
    at 62 units). Each model's claim is on the card.
    """
    other = _pilot(tmp_path_factory.mktemp("pilot_b"), {
        "ref": ("bf16", "base", 2000.0), "same": ("int8", "broken", 1000.0),
        "broken": ("nf4", "base", 500.0)})
    proc = run_cli(["lm-eval-ext", "recommend", f"m1={pilot}", f"m2={other}",
                    "--claim", "accuracy=8", "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = json.loads((tmp_path / "card.json").read_text())
    chosen = card["recommended"]
    assert (chosen["protocol"], chosen["units"]) == ("ref", 125)
    assert chosen["saved_share"] == pytest.approx(0.75)
    assert max(chosen["risk_of_change"].values()) == 0.0
    assert set(card["claims"]) == {"accuracy@m1", "accuracy@m2"}
    unsafe = {o["candidate"]: o["risk_of_change"] for o in card["options"] if o["units"] == 500}
    assert unsafe["same"]["accuracy@m2"] > 0.2 > unsafe["same"]["accuracy@m1"]
    assert unsafe["broken"]["accuracy@m1"] > 0.2 > unsafe["broken"]["accuracy@m2"]
    # cost per item adds up over the models: (4000 + 2000) J / 500 items for the reference
    assert card["baseline"]["cost"] == pytest.approx(12.0 * 2000)
    same = next(o for o in card["options"] if o["candidate"] == "same" and o["units"] == 125)
    assert same["cost"] == pytest.approx((1000 + 1000) / 500 * 500)
    proc = run_cli(["lm-eval-ext", "recommend", f"m1={pilot}", "--claim", "accuracy=8"])
    assert proc.returncode == 0 and "Run same on" in proc.stdout  # alone, m1 takes 'same'


def test_pilots_that_do_not_match_are_one_line(pilot, tmp_path_factory):
    odd = _pilot(tmp_path_factory.mktemp("pilot_c"), {
        "ref": ("bf16", "base", 2000.0), "fp8": ("fp8", "base", 1000.0)})
    proc = run_cli(["lm-eval-ext", "recommend", f"m1={pilot}", f"m2={odd}",
                    "--claim", "accuracy=8"])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "is not in every pilot" in proc.stderr
    proc = run_cli(["lm-eval-ext", "recommend", f"m1={pilot}", f"m1={odd}",
                    "--claim", "accuracy=8"])
    assert proc.returncode != 0 and "two pilots have one name" in proc.stderr
