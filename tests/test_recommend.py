"""`lm-eval-ext recommend`: the cheapest protocol certified (with error control) to keep claims.

Checked against statsmodels' Holm, textbook paired standard errors, a loop-by-loop bootstrap-t
written here, exact binomial bounds, hand-worked pilots with known answers (the audit's
all-or-nothing pilot among them), and synthetic pilots through the real pipeline. The error
rates with the tool's own selection are simulated in ``benchmarks/recommend_simulation.py``
(a small run of it is in ``benchmarks/tests``).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from helpers import RESULTS, needs_results, run_cli
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from lm_eval_ext.analysis import analyze
from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_DIS
from lm_eval_ext.analysis.recommendation import MEASURED_ERROR
from lm_eval_ext.analysis.report import write_outputs
from lm_eval_ext.analysis.stats.bootstrap import bootstrap_counts
from lm_eval_ext.analysis.stats.equivalence import CAUGHT_SHARE, hidden_change_pvalue
from lm_eval_ext.analysis.stats.pilot_contrasts import claim_estimates
from lm_eval_ext.analysis.stats.recommend import (
    MIN_PILOT_UNITS,
    Candidate,
    Claim,
    ClaimEstimate,
    certify,
    claim_pvalue,
    level_mde_pp,
    recommend,
    se_from_interval,
)
from lm_eval_ext.analysis.synthetic import move_answers, simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_membership


def test_mde_scales_with_the_pilot_se_and_the_square_root_of_units():
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)  # 2.8016
    assert level_mde_pp(1.0, 500, 125) == pytest.approx(z * 2.0)
    assert level_mde_pp(1.0, 125, 500, alpha=0.1, power=0.9) == pytest.approx(
        (stats.norm.ppf(0.95) + stats.norm.ppf(0.9)) * 0.5)
    assert se_from_interval(-1.96, 1.96) == pytest.approx(1.0, rel=1e-3)


#: studentised draws at the normal quantiles: a hand-made estimate's bootstrap-t p is then the
#: normal TOST p (to 1e-4), so that the selection tests below have a closed form
NORMAL_DRAWS = stats.norm.ppf((np.arange(19_999) + 0.5) / 19_999)


def normal_tost(shift, se, margin):
    return max(stats.norm.sf((margin - shift) / se), stats.norm.sf((shift + margin) / se))


#: the share of alpha the missed-unit scenario keeps (the rest bounds pilots that caught some)
KEPT = 1 - CAUGHT_SHARE


def test_the_hidden_change_floor_is_the_exact_binomial_chance_of_missing_every_moved_unit():
    assert hidden_change_pvalue(5.0, 100.0, 62) == pytest.approx(stats.binom.pmf(0, 62, 0.05))
    assert hidden_change_pvalue(5.0, 200.0, 62) == pytest.approx(stats.binom.pmf(0, 62, 0.025))
    assert hidden_change_pvalue(150.0, 100.0, 62) == 0.0  # out of reach of any change
    assert hidden_change_pvalue(5.0, None, 62) == 1.0  # a metric with no known answers
    equal = ClaimEstimate(0.0, 0.0, 1.0, 62, identical=True, leverage_pp=100.0)
    assert claim_pvalue(equal, Claim("accuracy", 5.0)) == pytest.approx(0.95 ** 62 / KEPT)
    unknown = ClaimEstimate(0.0, 0.0, 1.0, 62, identical=True)
    assert claim_pvalue(unknown, Claim("judge_bias", 5.0)) == 1.0
    small = ClaimEstimate(0.1, 0.5, 1.0, MIN_PILOT_UNITS - 1, leverage_pp=100.0,
                          t_draws=NORMAL_DRAWS)
    assert claim_pvalue(small, Claim("accuracy", 5.0)) == 1.0
    # the floor bounds every p, not only identical outputs': a tiny SE cannot go below it
    sharp = ClaimEstimate(0.0, 0.01, 1.0, 62, leverage_pp=100.0, t_draws=NORMAL_DRAWS)
    assert claim_pvalue(sharp, Claim("accuracy", 5.0)) == pytest.approx(0.95 ** 62 / KEPT)


def test_drawn_without_replacement_from_the_instrument_the_floor_is_hypergeometric():
    """The pilot's units are a draw without replacement from the 500-unit instrument: missing
    all 25 units a 5-point shift needs is scipy's hypergeometric chance (0.0334 at 62 units,
    against 0.0416 with replacement)."""
    for n in (45, 62, 100, 250):
        assert hidden_change_pvalue(5.0, 100.0, n, 500) == pytest.approx(
            stats.hypergeom.pmf(0, 500, 25, n), rel=1e-9)
    assert hidden_change_pvalue(10.0, 200.0, 62, 500) == pytest.approx(
        stats.hypergeom.pmf(0, 500, 25, 62), rel=1e-9)
    equal = ClaimEstimate(0.0, 0.0, 1.0, 62, identical=True, leverage_pp=100.0)
    assert claim_pvalue(equal, Claim("accuracy", 5.0), 500) == pytest.approx(
        stats.hypergeom.pmf(0, 500, 25, 62) / KEPT)  # 0.0352: certified at 0.05


def _accuracy_estimate(ref, cand, units, resamples=2000, seed=0):
    frames = {"m": {"ref": _items(units, ref), "c": _items(units, cand)}}
    return claim_estimates(frames, "ref", [Claim("accuracy", 5.0)], {"accuracy": ACCURACY},
                           resamples, seed)["c"]["accuracy"]


def test_the_audit_pilot_with_one_broken_unit_of_62_is_not_certified():
    """One unit right on its 4 items under the reference and wrong under the candidate, the
    other 61 identical: Student's TOST on the units' means (statsmodels' ``ttost_paired``)
    certifies it (p 0.020; the audit's 0.0205 used the bootstrap SD), since the pilot's SE
    shrinks with the change it missed; the bootstrap-t does not (the 37% of resamples without
    the broken unit have no SE at all)."""
    units = np.repeat(np.arange(62), 4)
    ref = np.random.default_rng(0).random(units.size) < 0.5
    ref[:4] = True
    cand = ref.copy()
    cand[:4] = False
    est = _accuracy_estimate(ref, cand, units)
    by_unit = {run: 100 * x.astype(float).reshape(62, 4).mean(1) for run, x in
               (("ref", ref), ("cand", cand))}
    d = by_unit["cand"] - by_unit["ref"]
    assert est.shift_pp == pytest.approx(-100 / 62) and est.shift_se_pp == pytest.approx(
        d.std(ddof=1) / math.sqrt(62))
    student = ttost_paired(by_unit["cand"], by_unit["ref"], -5.0, 5.0)[0]
    assert 0.015 < student < 0.025
    assert claim_pvalue(est, Claim("accuracy", 5.0)) > 0.3


def test_a_20_unit_pilot_with_one_changed_item_is_not_certified():
    units = np.repeat(np.arange(20), 4)
    ref = np.random.default_rng(1).random(units.size) < 0.5
    cand = ref.copy()
    cand[0] = not cand[0]
    est = _accuracy_estimate(ref, cand, units)
    assert claim_pvalue(est, Claim("accuracy", 5.0)) == pytest.approx(0.95 ** 20 / KEPT)  # 0.377


@pytest.mark.parametrize("n_units", [62, 100, 250])
def test_one_changed_item_is_certified_wherever_identical_outputs_are(n_units):
    """Before, every resample that missed the one changed item (37% of them) had no SE and
    counted as T* = -inf, so p stayed at 0.36-0.37 at any size and margin. A resample without
    spread is now studentised by the pilot's SE: the item's p is the identical outputs' one
    (the hidden-change floor) within 1/(B+1), and certified at margin 5."""
    units = np.repeat(np.arange(n_units), 4)
    ref = np.random.default_rng(n_units).random(units.size) < 0.5
    cand = ref.copy()
    cand[5] = not cand[5]
    claim = Claim("accuracy", 5.0)
    est = _accuracy_estimate(ref, cand, units)
    same = _accuracy_estimate(ref, ref.copy(), units)
    p, pvalue_same = claim_pvalue(est, claim, 500), claim_pvalue(same, claim, 500)
    assert same.identical and pvalue_same == pytest.approx(stats.hypergeom.pmf(0, 500, 25, n_units)
                                                      / KEPT)
    assert p <= 0.05 and p <= pvalue_same + 1 / 2001 + 1e-3


def test_the_bootstrap_t_p_is_a_loop_over_resampled_units_and_hidden_shares():
    """The package's vectorised bootstrap-t against plain loops: for each resample of units
    (the same counts), the mean of the drawn units' differences and their textbook SE
    (sd / sqrt(n); the pilot's own SE for a resample without spread), T* = (mean* - mean) /
    SE*, the two one-sided counts; then the largest over broken shares s of the chance of
    missing them times the one-sided test of the rest against (5 - 100 s) / (1 - s), over the
    share of alpha that scenario keeps."""
    rng = np.random.default_rng(7)
    n, resamples = 150, 999
    units = np.repeat(np.arange(n), 4)
    ref = rng.random(units.size) < stats.logistic.cdf(rng.normal(0, 1, n))[units]
    cand = np.where(rng.random(units.size) < 0.06, ~ref, ref)
    ref[:8] = True
    cand[:8] = [False, False, False, True] * 2  # two units lose 3 of 4: skewed, none fully
    est = _accuracy_estimate(ref, cand, units, resamples, seed=3)
    assert est.full_up == est.full_down == 0
    d = 100 * (cand.astype(float) - ref).reshape(n, 4).mean(1)
    d = d[sorted(range(n), key=str)]  # the tool numbers units in the order of their ids
    counts = bootstrap_counts(n, resamples, 3)
    se = d.std(ddof=1) / math.sqrt(n)
    t_star = []
    for row in counts:
        drawn = np.repeat(d, row.astype(int))
        spread = drawn.std(ddof=1) / math.sqrt(n)
        t_star.append((drawn.mean() - d.mean()) / (spread if spread > 0 else se))
    t_star = np.array(t_star)
    assert np.allclose(est.t_draws, t_star, atol=1e-9)

    def one_sided(margin):
        below = (t_star <= (d.mean() - margin) / se).sum()
        above = (t_star >= (d.mean() + margin) / se).sum()
        return (1 + max(below, above)) / (resamples + 1)

    steps = [0.05 * i / 400 for i in range(401)]
    terms = [(1 - lo) ** n * one_sided((5 - 100 * hi) / (1 - hi))
             for lo, hi in zip(steps[:-1], steps[1:], strict=True)]
    expected = max(*terms, 0.95 ** n) / KEPT
    assert expected > one_sided(5) / KEPT  # the hidden share matters on this pilot
    assert claim_pvalue(est, Claim("accuracy", 5.0)) == pytest.approx(expected)


def test_a_pilot_that_caught_a_broken_unit_is_bounded_as_one_that_missed_it():
    """The audit's liberal case: a protocol breaks 2% of units outright and moves the rest the
    same way; a 100-unit pilot catches one broken unit (its 4 items right -> wrong) while the
    rest moved the other way by chance, so the pilot's shift is 0.0. Before, only the pilots
    that missed every broken unit were bounded and this one was certified (p 0.0073). Now the
    scenario "caught k = 1" is bounded too: the largest over broken shares s of Binomial(100,
    s)'s P(K = 1) times the bootstrap-t p of the pilot less that unit against the rest's share
    of the margin, over the scenario's share of alpha; here a loop with its own resamples."""
    n = 100
    units = np.repeat(np.arange(n), 4)
    rng = np.random.default_rng(56)
    ref = rng.random(units.size) < stats.logistic.cdf(rng.normal(0, 1, n))[units]
    ref[:4] = True
    cand = move_answers(ref, -0.03 / 0.98, 0.02, rng)
    cand[:4] = False
    est = _accuracy_estimate(ref, cand, units)
    assert (est.shift_pp, est.full_down, est.full_up) == (0.0, 1, 0)
    p = claim_pvalue(est, Claim("accuracy", 5.0))
    rest = 100 * (cand.astype(float) - ref).reshape(n, 4).mean(1)[1:]
    draws = np.random.default_rng(0).integers(0, n - 1, (20_000, n - 1))
    drawn = rest[draws]
    se = rest.std(ddof=1) / math.sqrt(n - 1)
    spread = drawn.std(1, ddof=1) / math.sqrt(n - 1)
    t_star = (drawn.mean(1) - rest.mean()) / np.where(spread > 0, spread, se)
    shares = np.linspace(0, 0.05, 401)
    lower = [(1 + (t_star >= (rest.mean() + (5 - 100 * hi) / (1 - hi)) / se).sum()) / 20_001
             for hi in shares[1:]]
    caught = max(stats.binom.pmf(1, n, lo) * q for lo, q in zip(shares[:-1], lower,
                                                                 strict=True))
    assert p == pytest.approx(caught / (CAUGHT_SHARE / 2), rel=0.15)
    assert p > 0.2


def _bbq_items(n_units, pred):
    """Units of 2 ambiguous + 2 disambiguated items; option 0 biased, 1 other, 2 unknown."""
    ambig = np.tile([True, True, False, False], n_units)
    return pd.DataFrame({
        "unit_id": np.repeat(np.arange(n_units), 4).astype(str),
        "item_key": np.arange(4 * n_units), "context_condition": np.where(ambig, "ambig",
                                                                          "disambig"),
        "label": np.where(ambig, 2, np.arange(4 * n_units) % 2), "target_loc": 0,
        "unknown_loc": 2, "pred": pred.astype(float), "parse_method": "loglik",
        "correct": pred == np.where(ambig, 2, np.arange(4 * n_units) % 2)})


def test_the_bias_score_shift_se_is_the_bootstrap_sd_of_the_ratio():
    """S_DIS is a ratio of sums: its delta-method SE (the studentising SE) against the SD of
    S_DIS(candidate) - S_DIS(reference) over units resampled in a plain loop, within 5%."""
    rng = np.random.default_rng(2)
    n = 200
    ref = rng.integers(0, 3, 4 * n)
    cand = np.where(rng.random(4 * n) < 0.15, rng.integers(0, 3, 4 * n), ref)
    frames = {"m": {"ref": _bbq_items(n, ref), "c": _bbq_items(n, cand)}}
    est = claim_estimates(frames, "ref", [Claim("bias_s_dis", 10.0)],
                          {"bias_s_dis": BIAS_S_DIS}, 200, 0)["c"]["bias_s_dis"]

    def s_dis(pred, items):
        counted = (items % 4 >= 2) & (pred[items] != 2)  # disambiguated, not "unknown"
        return 100 * (2 * (counted & (pred[items] == 0)).sum() / counted.sum() - 1)

    every = np.arange(4 * n)
    shifts = []
    for _ in range(4000):
        counts = np.bincount(rng.integers(0, n, n), minlength=n)
        items = np.repeat(every, np.repeat(counts, 4))
        shifts.append(s_dis(cand, items) - s_dis(ref, items))
    assert est.shift_pp == pytest.approx(s_dis(cand, every) - s_dis(ref, every))
    assert est.shift_se_pp == pytest.approx(np.std(shifts, ddof=1), rel=0.05)


def _estimate(shift, se=1.0, level_se=1.0, units=125):
    return ClaimEstimate(shift, se, level_se, units, leverage_pp=100.0, t_draws=NORMAL_DRAWS)


def _candidate(name, cost, shifts, level_se=1.0, units=125):
    claims = ("accuracy", "bias_s_dis")
    return Candidate(name, cost, {c: _estimate(s, 1.0, level_se, units)
                                  for c, s in zip(claims, shifts, strict=True)})


CLAIMS = [Claim("accuracy", 4.0), Claim("bias_s_dis", 4.0)]


def test_certificates_are_holm_over_candidates_of_the_largest_claim_p():
    """Intersection-union within a candidate (its largest claim p, never below the floor), Holm
    across candidates: the adjusted p's are statsmodels' Holm of those maxima."""
    candidates = [_candidate("ref", 4.0, (0, 0)), _candidate("a", 1.0, (0.2, 1.0)),
                  _candidate("b", 2.0, (0.1, 0.3)), _candidate("c", 3.0, (3.9, 0.0))]
    certificates = certify(candidates, CLAIMS, 0.05, "ref")
    assert set(certificates) == {"a", "b", "c"}
    joint = [max(claim_pvalue(_estimate(s), k) for s, k in zip(shifts, CLAIMS, strict=True))
             for shifts in ((0.2, 1.0), (0.1, 0.3), (3.9, 0.0))]
    # normal theory over a continuous hidden share h (a share h of the 125 units, missed with
    # chance (1 - h)^125, may carry 100 h points of the shift; the rest is tested at 4 - 100 h);
    # the package takes h on a grid, each step at its worst corner (slightly larger)
    hidden = np.linspace(0.0, 0.04, 4001)[:-1]
    closed = [max(max((1 - h) ** 125 * normal_tost(s, 1.0, (4 - 100 * h) / (1 - h))
                      for h in hidden) for s in shifts) / KEPT
              for shifts in ((0.2, 1.0), (0.1, 0.3), (3.9, 0.0))]
    closed = [max(c, 0.96 ** 125 / KEPT) for c in closed]  # never below the floor
    assert all(c - 2e-4 <= j <= c + 5e-3 for c, j in zip(closed, joint, strict=True))
    expected = multipletests(joint, alpha=0.05, method="holm")
    assert [certificates[n].pvalue for n in "abc"] == pytest.approx(joint)
    assert [certificates[n].pvalue_adjusted for n in "abc"] == pytest.approx(expected[1])
    assert [certificates[n].certified for n in "abc"] == list(expected[0]) == [True, True, False]


def test_the_cheapest_certified_and_decidable_option_is_chosen():
    """Margin 4 pp, SE 1 pp on 125 units. 'shifty' (cheapest, shift 3.5 pp) is not certified.
    'good' (1 J/item, level SE 1.0) is decidable once 2.8016 x sqrt(125/n) <= 4, i.e. n >= 62
    (62 units, 248 items, 248 J); 'pricey' costs more at every size."""
    candidates = [_candidate("ref", 4.0, (0, 0)), _candidate("shifty", 0.5, (3.5, 0.0)),
                  _candidate("good", 1.0, (0.0, 0.5)), _candidate("pricey", 3.0, (0.0, 0.0))]
    result = recommend(candidates, CLAIMS, [31, 62, 125, 250], 4, reference="ref")
    assert (result.chosen.candidate, result.chosen.units, result.chosen.cost) == ("good", 62,
                                                                                  248.0)
    assert not result.certificates["shifty"].certified
    good = {o.units: o for o in result.options if o.candidate == "good"}
    assert not good[31].decidable and good[62].decidable
    assert result.units_to_certify is None and not result.reasons


def test_a_pilot_too_small_recommends_nothing_and_says_how_many_units_it_would_need():
    """The issue's case: 3 units, every delta 0 -> nothing certified, nothing recommended."""
    ref = Candidate("ref", 4.0, {"accuracy": ClaimEstimate(0.0, 0.0, 20.0, 3)})
    b4 = Candidate("b4", 1.0, {"accuracy": ClaimEstimate(0.0, 0.0, 20.0, 3, True, 100.0)})
    result = recommend([ref, b4], [Claim("accuracy", 2.0)], [62, 125, 250, 500], 4,
                       reference="ref")
    assert result.chosen is None
    # identical outputs, accuracy: (1 - 0.02) ** n <= 0.05 * KEPT needs n >= 151
    assert result.units_to_certify == math.ceil(math.log(0.05 * KEPT) / math.log(0.98)) == 151
    assert "fewer than the 20" in result.reasons[0] and "about 151 units" in result.reasons[1]


def _items(units, correct):
    return pd.DataFrame({"unit_id": units.astype(str), "item_key": np.arange(units.size),
                         "correct": correct})


def test_contrast_estimates_match_cluster_robust_standard_errors():
    """One model's shift and a between-model contrast's shift: the joint bootstrap SE is the
    natural-unit cluster-robust SE of the per-item differences (statsmodels' formula by hand:
    sqrt(sum_c D_c^2) / n with D_c the unit's summed centred differences), within 3%."""
    rng = np.random.default_rng(4)
    units = np.repeat(np.arange(150), 4)
    p = stats.logistic.cdf(rng.normal(0, 1, 150))[units]
    outcomes = {m: {r: rng.random(units.size) < p for r in ("ref", "cand")} for m in "ab"}
    frames = {m: {r: _items(units, c) for r, c in runs.items()} for m, runs in outcomes.items()}
    claims = [Claim("accuracy", 5.0, ("a",)), Claim("accuracy", 5.0, ("b", "a"))]
    est = claim_estimates(frames, "ref", claims, {"accuracy": ACCURACY}, 20_000, 0)["cand"]

    def cluster_se(d):
        centred = np.bincount(units, d - d.mean())
        return 100 * math.sqrt(150 / 149 * (centred ** 2).sum()) / d.size

    one = outcomes["a"]["cand"].astype(float) - outcomes["a"]["ref"]
    both = (outcomes["b"]["cand"].astype(float) - outcomes["b"]["ref"]) - one
    assert est["accuracy@a"].shift_pp == pytest.approx(100 * one.mean())
    assert est["accuracy@b-a"].shift_pp == pytest.approx(100 * both.mean())
    assert est["accuracy@a"].shift_se_pp == pytest.approx(cluster_se(one), rel=0.03)
    assert est["accuracy@b-a"].shift_se_pp == pytest.approx(cluster_se(both), rel=0.03)
    level = outcomes["b"]["cand"].astype(float) - outcomes["a"]["cand"]
    assert est["accuracy@b-a"].level_se_pp == pytest.approx(cluster_se(level), rel=0.03)
    assert est["accuracy@a"].n_units == 150 and not est["accuracy@a"].identical


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


def _missed(hidden_share, n_units, population=500):
    """P(n units drawn without replacement from ``population`` miss a ``hidden_share`` of
    them): the product of (N - h - i) / (N - i), for a real number h of units too."""
    hidden = hidden_share * population
    return math.prod((population - hidden - i) / (population - i) for i in range(n_units))


def test_recommend_command_picks_the_certified_protocol(pilot, tmp_path):
    """'same' repeats the reference's answers on 125 units of the 500-unit instrument:
    accuracy cannot have moved by 8 points unless 40 of its units changed, and the pilot drew
    none of them: p = C(460, 125) / C(500, 125) over the missed scenario's share of alpha.
    'broken' is not certified."""
    proc = run_cli(["lm-eval-ext", "recommend", str(pilot), "--claim", "accuracy=8",
                    "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = json.loads((tmp_path / "card.json").read_text())
    chosen = card["recommended"]
    assert chosen["protocol"] == "same"
    assert card["certificates"]["same"]["p_value"] == pytest.approx(
        stats.hypergeom.pmf(0, 500, 40, 125) / KEPT)
    assert card["settings"]["population_units"] == 500
    assert not card["certificates"]["broken"]["certified"]
    assert card["baseline"] == {"protocol": "ref", "units": 500, "items": 2000, "cost": 16000.0}
    assert chosen["cost"] == pytest.approx(2.0 * chosen["items"])  # 1,000 J over 500 items
    smaller = [o for o in card["options"] if o["candidate"] == "same"
               and o["units"] < chosen["units"]]
    assert all(not o["decidable"] for o in smaller)  # the smallest decidable size was taken
    text = (tmp_path / "card.md").read_text()
    assert "Run same on" in text and "<= 0.05" in text and "Holm over 2 candidate protocols" in text
    assert "Not covered: a significance verdict" in text
    assert f"was {100 * MEASURED_ERROR.rate:.1f}%" in text
    assert math.isclose(chosen["saved"], 16000.0 - chosen["cost"])


def test_identical_answers_certify_a_bias_score_by_the_hidden_change_floor(pilot, tmp_path):
    """S_DIS = 2 B / C - 1 over the disambiguated items: one item's answer moves it by at most
    2 / C (biased -> unknown and back), a unit with k such items by 2 k / C, so a share s of
    units moves it by at most s x n x max_k 2 k / C (x100 points). 'same' repeats every answer:
    its p is the chance that 125 units miss every unit of a protocol moving S_DIS by 15 points."""
    proc = run_cli(["lm-eval-ext", "recommend", str(pilot), "--claim", "accuracy=8",
                    "--claim", "bias_s_dis=15", "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    items = pd.read_csv(pilot / "items.csv")
    ref = items[items["run"] == "ref"]
    disambig = ref["context_condition"] == "disambig"
    counted = (disambig & ref["pred"].notna() & (ref["pred"] != ref["unknown_loc"])).sum()
    per_unit = disambig.groupby(ref["unit_id"]).sum()
    leverage = len(per_unit) * 100 * 2 * per_unit.max() / counted
    card = json.loads((tmp_path / "card.json").read_text())
    p = card["certificates"]["same"]["p_per_claim"]
    assert p["bias_s_dis"] == pytest.approx(_missed(15 / leverage, 125) / KEPT, rel=1e-6)
    assert p["accuracy"] == pytest.approx(_missed(0.08, 125) / KEPT, rel=1e-6)
    assert card["recommended"]["protocol"] == "same"


def test_bad_claims_and_folders_are_one_line(pilot, tmp_path):
    cases = {("accuracy",): "claim 'accuracy' is not METRIC=MARGIN_PP",
             ("nosuch=2",): "the pilot has no metric 'nosuch'; it has accuracy, bias_s_amb, "
                            "bias_s_dis",
             ("accuracy@other=2",): "'other' is not a pilot (A) or a difference of two pilots"}
    for claim, message in cases.items():
        proc = run_cli(["lm-eval-ext", "recommend", str(pilot), "--claim", *claim])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert message in proc.stderr
    proc = run_cli(["lm-eval-ext", "recommend", str(tmp_path / "nowhere"), "--claim", "accuracy=2"])
    assert proc.returncode == 2 and "pilot folder" in proc.stderr and "not found" in proc.stderr
    proc = run_cli(["lm-eval-ext", "recommend", str(tmp_path), "--claim", "accuracy=2"])
    assert proc.returncode == 2 and "has no runs.csv" in proc.stderr


def test_several_pilots_choose_one_protocol_that_keeps_the_claims_for_every_model(
        pilot, tmp_path_factory, tmp_path):
    """A second model for which 'same' breaks and 'broken' is harmless.

    No candidate keeps accuracy for both; the reference protocol does, on the smallest subset
    where it stays decidable: 125 units (level SE about sqrt(.6 x .4 / 500) = 2.2 pp, MDE about
    6.2 pp; 8.7 pp at 62 units). Each model's claim is on the card; a between-model claim is a
    contrast of its own.
    """
    other = _pilot(tmp_path_factory.mktemp("pilot_b"), {
        "ref": ("bf16", "base", 2000.0), "same": ("int8", "broken", 1000.0),
        "broken": ("nf4", "base", 500.0)})
    proc = run_cli(["lm-eval-ext", "recommend", f"m1={pilot}", f"m2={other}",
                    "--claim", "accuracy=8", "--claim", "accuracy@m1-m2=8",
                    "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = json.loads((tmp_path / "card.json").read_text())
    chosen = card["recommended"]
    assert (chosen["protocol"], chosen["units"]) == ("ref", 125)
    assert chosen["saved_share"] == pytest.approx(0.75)
    assert set(card["claims"]) == {"accuracy@m1", "accuracy@m2", "accuracy@m1-m2"}
    p = {name: c["p_per_claim"] for name, c in card["certificates"].items()}
    assert p["same"]["accuracy@m1"] < 0.05 < p["same"]["accuracy@m2"]
    assert p["broken"]["accuracy@m2"] < 0.05 < p["broken"]["accuracy@m1"]
    assert p["same"]["accuracy@m1-m2"] > 0.5  # m2 alone moved: the difference moved
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


def test_selection_among_candidates_at_the_margin_keeps_the_error_rate():
    """Known truth: four cheaper candidates that all truly shift accuracy by exactly the margin
    (the hardest null for the multiplicity), pilot estimates ~ Normal(margin, SE) with normal
    studentised draws. The chosen protocol is a wrong one at most alpha of the time (here 2,000
    pilots: within 3 Monte Carlo SDs); per-claim tests without Holm choose a wrong one about
    1 - 0.95^4 of the time, well above alpha."""
    rng = np.random.default_rng(11)
    claim = Claim("accuracy", 3.0)
    wrong = unadjusted = 0
    pilots = 2000
    for _ in range(pilots):
        shifts = rng.normal(3.0, 1.5, 4)
        candidates = [Candidate("ref", 10.0, {"accuracy": ClaimEstimate(0.0, 0.0, 0.5, 250)})]
        candidates += [Candidate(f"c{i}", 1.0 + i, {"accuracy": ClaimEstimate(
            s, 1.5, 0.5, 250, leverage_pp=100.0, t_draws=NORMAL_DRAWS)})
            for i, s in enumerate(shifts)]
        result = recommend(candidates, [claim], [250], 4, reference="ref")
        wrong += result.chosen.candidate != "ref"
        unadjusted += any(normal_tost(s, 1.5, 3.0) <= 0.05 for s in shifts)
    assert wrong / pilots <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / pilots)
    assert unadjusted / pilots > 0.12


@needs_results
def test_the_committed_simulation_keeps_alpha_and_the_power_asked_for():
    """benchmarks/recommend_simulation.py's file of 2026-12-05 (pilots drawn without
    replacement from a 500-unit instrument): every null cell's error within Monte Carlo error
    of alpha or below, >= 2,000 pilots in the partly hidden cells and their pooled error <=
    alpha; one changed item certified at 62, 100 and 250 units; an equal protocol certified in
    >= 75% of 62-unit pilots at 0.5% and 3% churn, below the LP ceiling; with a declared
    order the equal cheapest of five recommended in >= 50% of them; the exact all-or-nothing
    case <= alpha; the card's figures are the file's."""
    folder = RESULTS / "recommend_2026-12-05"
    data = json.loads((folder / "recommend_simulation.json").read_text())
    nulls = [c for c in data["cells"] if not c["kind"].startswith("power")]
    hidden = [c for c in nulls if c["kind"].startswith("partly_hidden")]
    assert data["population_units"] == 500 and len(hidden) == 12
    assert all(c["pilots"] >= 2000 for c in hidden)
    assert all(c["rules"]["recommend"]["error"]["ci95"][0] <= data["alpha"] for c in nulls)
    pooled = data["summary"]["recommend"]["pooled_partly_hidden"]
    assert pooled["rate"] <= data["alpha"]
    assert all(row["p"] <= data["alpha"] for row in data["one_changed_item"])
    assert data["exact_all_or_nothing"]["error"] <= data["alpha"]
    cells = {c["key"]: c["rules"]["recommend"] for c in data["cells"]}
    ceilings = {(c["pilot_units"], c["churn"]): c["ceiling_power"] for c in json.loads(
        (folder / "certificate_ceiling.json").read_text())["ceilings"]}
    for churn in (0.005, 0.03):
        power = cells[f"power_churn{churn:g}_62u_1c"]["certified_equal"]
        assert 0.75 <= power["rate"] and power["ci95"][0] <= ceilings[62, churn]
    assert cells["power_declared_churn0.03_62u_5c"]["chose_equal"]["rate"] >= 0.5
    largest = data["summary"]["recommend"]["largest"]
    m = MEASURED_ERROR
    assert (m.rate, m.cells, m.pilots) == (largest["rate"], len(nulls),
                                           sum(c["pilots"] for c in nulls))
    assert m.ci95 == pytest.approx(tuple(largest["ci95"]), abs=1e-4)
    assert m.pooled_partly_hidden == pooled["rate"]
    assert m.pooled_partly_hidden_ci95 == pytest.approx(tuple(pooled["ci95"]), abs=1e-4)
    assert m.source.endswith("recommend_2026-12-05/recommend_simulation.json")


def test_a_metric_without_known_answers_gives_no_unit_count_and_says_why():
    """Only a candidate whose answers equal the reference's, on a metric that does not say what
    answers an item could get: no standard error and no floor, so no count of pilot units would
    certify it; the card says why."""
    ref = Candidate("ref", 4.0, {"judge_x": ClaimEstimate(0.0, 0.0, 3.0, 125)})
    same = Candidate("same", 1.0, {"judge_x": ClaimEstimate(0.0, 0.0, 3.0, 125, True)})
    result = recommend([ref, same], [Claim("judge_x", 10.0)], [125], 4, reference="ref")
    assert result.units_to_certify is None and not result.certificates["same"].certified
    assert "does not say which answers an item could get" in result.reasons[0]


@pytest.mark.parametrize(("n_units", "se", "shift"), [(62, 3.0, 1.5), (250, 1.8, 2.5)])
def test_the_advice_names_a_pilot_larger_than_this_one_from_the_deciding_test(n_units, se,
                                                                               shift):
    """Before, a 62- or a 250-unit pilot that certified nothing was told "it would need about
    59 units". The count now comes from the deciding test's own terms (shift 0 at the planned
    power, the pilot's SE scaled, the instrument's floor), searched above the pilot's size; a
    pilot of that size passes and one unit fewer does not."""
    from lm_eval_ext.analysis.stats.recommend import projected_pvalue

    est = ClaimEstimate(shift, se, 1.0, n_units, leverage_pp=100.0, t_draws=NORMAL_DRAWS)
    ref = Candidate("ref", 4.0, {"accuracy": ClaimEstimate(0.0, 0.0, 1.0, n_units)})
    noisy = Candidate("noisy", 1.0, {"accuracy": est})
    claim = Claim("accuracy", 5.0)
    result = recommend([ref, noisy], [claim], [62, 125, 250, 500], 4, reference="ref",
                       population_units=500)
    assert not result.certificates["noisy"].certified
    needed = result.units_to_certify
    assert needed is not None and needed > n_units
    assert projected_pvalue(est, claim, needed, 0.8, 500) <= 0.05
    assert projected_pvalue(est, claim, needed - 1, 0.8, 500) > 0.05 or needed - 1 == n_units
    assert f"a pilot of about {needed} units" in result.reasons[0]


def test_a_candidate_this_pilot_should_have_certified_gets_no_larger_pilot_advice():
    """250 units, SE 1 point, but a shift of 3.5 points against a margin of 5: were its true
    shift 0 this pilot would have certified it, so a larger pilot is not the remedy."""
    est = ClaimEstimate(3.5, 1.0, 1.0, 250, leverage_pp=100.0, t_draws=NORMAL_DRAWS)
    ref = Candidate("ref", 4.0, {"accuracy": ClaimEstimate(0.0, 0.0, 1.0, 250)})
    result = recommend([ref, Candidate("near", 1.0, {"accuracy": est})],
                       [Claim("accuracy", 5.0)], [62, 125, 250, 500], 4, reference="ref",
                       population_units=500)
    assert not result.certificates["near"].certified and result.units_to_certify is None
    assert "a larger pilot is not the remedy" in result.reasons[0]


def test_the_reference_on_the_full_instrument_is_not_called_a_smaller_subset():
    """The card said "the reference protocol itself on a smaller subset" when it recommended
    the full 500-unit instrument."""
    from lm_eval_ext.analysis.recommendation import card

    ref = Candidate("ref", 4.0, {"accuracy": ClaimEstimate(0.0, 0.0, 4.0, 62)})
    moved = Candidate("moved", 1.0, {"accuracy": ClaimEstimate(
        4.0, 1.0, 4.0, 62, leverage_pp=100.0, t_draws=NORMAL_DRAWS)})
    claims = [Claim("accuracy", 5.0)]
    reference = {"reference": "ref", "cost_unit": "J", "reference_cost_per_item": 4.0}
    for sizes, smaller in (([62, 125, 250, 500], False), ([62, 125, 250, 400], True)):
        result = recommend([ref, moved], claims, sizes, 4, reference="ref")
        assert (result.chosen.candidate, result.chosen.units) == ("ref", max(sizes))
        text = card(result, claims, reference, 500, {"alpha": 0.05})["guarantee"]
        assert text.startswith("the reference protocol itself")
        assert ("on a smaller subset" in text) == smaller


def test_a_declared_order_spends_alpha_as_declared_and_bad_names_are_one_line(pilot, tmp_path):
    """--order same,broken: 'same' is tested first at the full alpha and certified; --order
    broken,same: 'broken' fails first, so the sequence stops and 'same' is not certified."""
    first = run_cli(["lm-eval-ext", "recommend", str(pilot), "--claim", "accuracy=8",
                     "--order", "same,broken", "--out", str(tmp_path / "a")])
    assert first.returncode == 0, first.stderr[-2000:]
    card = json.loads((tmp_path / "a" / "card.json").read_text())
    assert card["certificates"]["same"]["certified"]
    assert card["certificates"]["same"]["p_adjusted"] == card["certificates"]["same"]["p_value"]
    assert "a fixed sequence declared before the pilot (same, broken)" in card["guarantee"]
    second = run_cli(["lm-eval-ext", "recommend", str(pilot), "--claim", "accuracy=8",
                      "--order", "broken,same", "--out", str(tmp_path / "b")])
    card = json.loads((tmp_path / "b" / "card.json").read_text())
    assert second.returncode == 0 and not card["certificates"]["same"]["certified"]
    for flags, message in ((["--order", "same,nosuch"], "'nosuch' in --order/--weights is not "
                                                        "a candidate run of the pilot"),
                           (["--weights", "same=x"], "--weights entry 'same=x' is not RUN=W"),
                           (["--weights", "same=0"], "--weights must be positive numbers"),
                           (["--order", "ref"], "'ref' in --order/--weights is not a "
                                                "candidate run")):
        proc = run_cli(["lm-eval-ext", "recommend", str(pilot), "--claim", "accuracy=8",
                        *flags])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_one_pilot_given_twice_is_named_as_such(pilot, capsys):
    """`recommend P P` was told to name them NAME=FOLDER, and named they were refused again."""
    from lm_eval_ext.cli import main as cli_main

    for args in ([str(pilot), str(pilot)], [f"a={pilot}", f"b={pilot}"]):
        assert cli_main.main(["recommend", *args, "--claim", "accuracy=8"]) == 2
        assert capsys.readouterr().err.strip() == (
            f"lm-eval-ext: error: recommend: the pilot {pilot.resolve()} is given twice; give "
            "each model's own pilot once (one analyze folder per model)")
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=8"]) == 0  # followed
