"""Does ``recommend`` keep its error rate on hard data, its own selection included? Known truth.

Every simulated pilot goes through the package's own estimator (``claim_estimates``: the joint
natural-unit bootstrap, 2,000 resamples as the command's default) and its own ``recommend``
(Holm-certified equivalence, then the cheapest decidable option), so the selection the tool
makes is the one simulated. Units hold 4 items; a model's chance of a right answer in a unit is
``expit(N(0, 1))``. As the product's pilots are, each pilot is a draw without replacement of
its units from an instrument of :data:`POPULATION` (500) units, made afresh for every pilot, in
which a null's broken units are an exact count (25 of 500 for 5%), and ``recommend`` is told
the instrument's size.

**Nulls** (every candidate truly shifts its claim's contrast by exactly the margin, so each one
the tool recommends is an error): per cell a null kind, a pilot size (20, 40, 62, 100, 250 units) and
1, 2 or 4 candidates (independent draws of the same null, cheapest first). Kinds, accuracy
(margin 5 points, shift -5):

* ``independent``: each item moves independently, 3% two-way churn plus the shift;
* ``independent_one_way``: only right answers turn wrong;
* ``unit_clustered``: a fifth of the units carry the whole shift (3% churn everywhere);
* ``few_units_two_items``: a tenth of the units each lose two right answers, nothing else moves;
* ``all_or_nothing``: 5% of units, right on all 4 items, turn wrong on all 4, nothing else;
* ``all_or_nothing_churn``: the same plus 3% two-way churn in the other units (a pilot that
  misses the broken units sees a clean, equivalent-looking protocol);
* ``partly_hidden``: 2% of units break entirely, the other units lose the other 3 points one
  way (2% churn): a pilot that misses the broken units sees a shift inside the margin;
  ``partly_hidden_up`` the same upwards; ``partly_hidden_margin10`` 4% of units and margin 10;
* ``between_models``: two models; model a loses the margin as ``few_units_two_items`` does,
  model b only churns; the claim is ``accuracy@a-b`` (margin 5);
* ``s_dis_categories`` / ``s_amb_categories``: BBQ-shaped units (2 ambiguous and 2
  disambiguated items, 9 categories); in 2 categories the candidate turns answers towards the
  biased one (disambiguated non-biased -> biased; ambiguous "unknown" -> biased) at the rate that
  moves the superpopulation's S_DIS by 10 points or S_AMB by 5 points (the answers' expected
  counts in closed form), 3% of answers churn to another option everywhere.

**Power**: the candidate listed first truly moves nothing (two-way churn at several levels), the
others sit at the margin (``independent``); it costs the most of them, so choosing a cheaper one
is an error. ``power_declared``: five candidates, the equal one the cheapest and first in a
fixed sequence declared before the pilot (``--order``), the other four at the margin.

Beside the tool, on the same pilots, ``t_tost_before``: the rule before 2026-12-03 (two
one-sided ``t`` tests, ``n - 1`` df, on the same standard error; identical outputs by the exact
bound for accuracy only; Holm over the candidates). Per cell and rule: ``error_rate`` (the chosen
protocol is a shifted one) with its Clopper-Pearson 95% interval, ``fwer`` (some shifted
candidate certified), and for power cells ``certified_equal`` and ``chose_equal``.
``exact_all_or_nothing``: a 62-unit pilot with ``x`` broken units (right on 4 items under the
reference, wrong under the candidate) is certified or not, for every ``x``; the error is the
hypergeometric probability (25 broken of 500) of the ``x`` that are certified.
``one_changed_item``: the p of a candidate that changes one item, at 62, 100 and 250 units.

    python benchmarks/recommend_simulation.py --pilots 1000 --pilots-for partly_hidden=2000 \
        --out benchmarks/results/X.json

Cells already in ``--out`` are kept (a killed run resumes); the file is rewritten after each.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from _harness import command_line, write_json
from scipy import integrate, stats

from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_AMB, BIAS_S_DIS, MetricSpec
from lm_eval_ext.analysis.stats.pilot_contrasts import claim_estimates
from lm_eval_ext.analysis.stats.recommend import (
    MIN_PILOT_UNITS,
    Candidate,
    Claim,
    ClaimEstimate,
    Declared,
    Recommendation,
    claim_pvalue,
    recommend,
)
from lm_eval_ext.analysis.stats.subgroups import holm
from lm_eval_ext.analysis.synthetic import move_answers
from lm_eval_ext.data.instrument import INSTRUMENT_UNITS

SIZES = (62, 125, 250, 500)
#: the frozen instrument's natural units: every pilot is drawn from it without replacement
POPULATION = INSTRUMENT_UNITS
SPECS: dict[str, MetricSpec] = {"accuracy": ACCURACY, "bias_s_dis": BIAS_S_DIS,
                                "bias_s_amb": BIAS_S_AMB}
MARGINS = {"accuracy": 5.0, "bias_s_dis": 10.0, "bias_s_amb": 5.0}
CHURN = 0.03
CATEGORIES, MOVED_CATEGORIES = 9, (0, 1)


def _units(n_units: int) -> np.ndarray:
    return np.repeat(np.arange(n_units), 4)


def accuracy_reference(n_units: int, rng: np.random.Generator) -> np.ndarray:
    """Right (True) or wrong per item, correlated within units."""
    return rng.random(4 * n_units) < stats.logistic.cdf(rng.normal(0, 1, n_units))[_units(n_units)]


def _broken_units(ref: np.ndarray, share: float, items: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """A ``share`` of units (chosen at random) right on their first ``items`` items under the
    reference and wrong on them under the candidate; the shift is ``-share * items / 4``."""
    ref = ref.copy()
    hit = np.repeat(_exact_units(ref.size // 4, share, rng), 4) & (np.arange(ref.size) % 4 < items)
    ref[hit] = True
    return ref, np.where(hit, False, ref)


def _churned(ref: np.ndarray, rng: np.random.Generator, churn: float = CHURN) -> np.ndarray:
    return move_answers(ref, 0.0, churn, rng)


#: accuracy nulls: (reference, rng) -> (reference, candidate), true shift -5 points
ACCURACY_NULLS: dict[str, Callable] = {
    "independent": lambda ref, rng: (ref, move_answers(ref, -0.05, CHURN, rng)),
    "independent_one_way": lambda ref, rng: (ref, move_answers(ref, -0.05, 0.0, rng)),
    "unit_clustered": lambda ref, rng: _clustered(ref, rng, 0.2),
    "few_units_two_items": lambda ref, rng: _broken_units(ref, 0.10, 2, rng),
    "all_or_nothing": lambda ref, rng: _broken_units(ref, 0.05, 4, rng),
    "all_or_nothing_churn": lambda ref, rng: _broken_with_churn(ref, rng),
    "partly_hidden": lambda ref, rng: _partly_hidden(ref, rng, 0.02, 0.05),
    "partly_hidden_up": lambda ref, rng: _partly_hidden(ref, rng, 0.02, 0.05, +1.0),
    "partly_hidden_margin10": lambda ref, rng: _partly_hidden(ref, rng, 0.04, 0.10),
}
#: accuracy margins other than 5 points, by null kind
KIND_MARGINS = {"partly_hidden_margin10": 10.0}


def _exact_units(n_units: int, share: float, rng: np.random.Generator) -> np.ndarray:
    """Exactly ``round(share * n_units)`` units, chosen at random (the instrument's count)."""
    hit = np.zeros(n_units, bool)
    hit[rng.choice(n_units, round(share * n_units), replace=False)] = True
    return hit


def _clustered(ref: np.ndarray, rng: np.random.Generator, share: float):
    hit = np.repeat(_exact_units(ref.size // 4, share, rng), 4)
    return ref, np.where(hit, move_answers(ref, -0.05 / share, CHURN, rng), _churned(ref, rng))


def _broken_with_churn(ref: np.ndarray, rng: np.random.Generator):
    ref, cand = _broken_units(ref, 0.05, 4, rng)
    broken = ref != cand
    return ref, np.where(np.repeat(broken.reshape(-1, 4).any(1), 4), cand, _churned(ref, rng))


def _partly_hidden(ref: np.ndarray, rng: np.random.Generator, share: float, margin: float,
                   sign: float = -1.0) -> tuple[np.ndarray, np.ndarray]:
    """A ``share`` of units flips entirely (right -> wrong, or wrong -> right for ``sign`` +1),
    the other units move one way by the rest of ``margin`` (in expectation) with 2% churn."""
    hit = np.repeat(_exact_units(ref.size // 4, share, rng), 4)
    ref = np.where(hit, sign < 0, ref)
    rest = sign * (margin - share) / (1 - share)
    return ref, np.where(hit, sign > 0, move_answers(ref, rest, 0.02, rng))


def accuracy_frame(correct: np.ndarray) -> pd.DataFrame:
    units = _units(correct.size // 4)
    return pd.DataFrame({"unit_id": units.astype(str), "item_key": np.arange(correct.size),
                         "correct": correct})


# --- BBQ-shaped units for the bias scores ------------------------------------------------------

def bbq_layout(n_units: int, rng: np.random.Generator) -> pd.DataFrame:
    """Items without answers: 2 ambiguous + 2 disambiguated per unit, options 0-2 per unit."""
    units = _units(n_units)
    perm = np.argsort(rng.random((n_units, 3)), axis=1)  # per unit: target, other, unknown
    target, other, unknown = (perm[units, i] for i in range(3))
    ambig = np.tile([True, True, False, False], n_units)
    label = np.where(ambig, unknown, np.where(np.arange(units.size) % 2 == 0, target, other))
    return pd.DataFrame({"unit_id": units.astype(str), "item_key": np.arange(units.size),
                         "category": rng.integers(0, CATEGORIES, n_units)[units],
                         "context_condition": np.where(ambig, "ambig", "disambig"),
                         "label": label, "target_loc": target, "unknown_loc": unknown,
                         "other_loc": other, "parse_method": "loglik", "parsed": True})


def bbq_reference(layout: pd.DataFrame, rng: np.random.Generator) -> np.ndarray:
    """Predicted options: ambiguous items answered "unknown" with a unit's own chance, else the
    biased option 60% of the time; disambiguated ones right with a unit's own chance."""
    n = len(layout)
    units = layout["unit_id"].astype(int).to_numpy()
    n_units = units.max() + 1
    abstain = stats.logistic.cdf(rng.normal(0.5, 1.0, n_units))[units]
    right = stats.logistic.cdf(rng.normal(1.0, 1.0, n_units))[units]
    u, v = rng.random(n), rng.random(n)
    target, other, unknown, label = (layout[c].to_numpy() for c in
                                     ("target_loc", "other_loc", "unknown_loc", "label"))
    ambig = (layout["context_condition"] == "ambig").to_numpy()
    guess = np.where(v < 0.6, target, other)
    wrong_dis = np.where(v < 0.5, np.where(label == target, other, target), unknown)
    return np.where(ambig, np.where(u < abstain, unknown, guess),
                    np.where(u < right, label, wrong_dis))


def bbq_candidate(layout: pd.DataFrame, ref: np.ndarray, metric: str, rate: float,
                  draws: np.ndarray) -> np.ndarray:
    """The reference's answers moved towards the biased option in the moved categories at
    ``rate``; ``draws`` (n x 3 uniforms) fixes the randomness so that the shift is monotone."""
    target, other, unknown = (layout[c].to_numpy() for c in ("target_loc", "other_loc",
                                                                "unknown_loc"))
    moved_cat = np.isin(layout["category"].to_numpy(), MOVED_CATEGORIES)
    ambig = (layout["context_condition"] == "ambig").to_numpy()
    if metric == "bias_s_dis":
        eligible = moved_cat & ~ambig & (ref == other)
    else:
        eligible = moved_cat & ambig & (ref == unknown)
    cand = np.where(eligible & (draws[:, 0] < rate), target, ref)
    others = np.stack([target, other, unknown], 1)
    switch = others[np.arange(len(ref)), (np.argmax(others == cand[:, None], 1)
                                          + 1 + (draws[:, 2] < 0.5)) % 3]
    return np.where(draws[:, 1] < CHURN, switch, cand)


def bbq_frame(layout: pd.DataFrame, pred: np.ndarray) -> pd.DataFrame:
    return layout.assign(pred=pred.astype(float), correct=pred == layout["label"].to_numpy())


def _expit_normal_mean(mu: float) -> float:
    """E[expit(N(mu, 1))] by quadrature."""
    return integrate.quad(lambda x: stats.logistic.cdf(x) * stats.norm.pdf(x, mu), -12, 12)[0]


def expected_answers(metric: str, rate: float, moved: bool) -> dict[str, np.ndarray]:
    """Per item type, the chance of each option (target, other, unknown) under the reference
    and the candidate: ``bbq_reference`` and ``bbq_candidate`` in expectation (answers are
    linear in a unit's chances, so only their means matter)."""
    a, c = _expit_normal_mean(0.5), _expit_normal_mean(1.0)  # abstain, right
    ref = {"ambig": np.array([(1 - a) * 0.6, (1 - a) * 0.4, a]),
           "label_target": np.array([c, (1 - c) / 2, (1 - c) / 2]),
           "label_other": np.array([(1 - c) / 2, c, (1 - c) / 2])}
    cand = {k: v.copy() for k, v in ref.items()}
    if moved and metric == "bias_s_dis":
        for kind in ("label_target", "label_other"):
            cand[kind] += rate * ref[kind][1] * np.array([1.0, -1.0, 0.0])
    if moved and metric == "bias_s_amb":
        cand["ambig"] += rate * ref["ambig"][2] * np.array([1.0, 0.0, -1.0])
    churned = {k: (1 - CHURN) * v + CHURN / 2 * (1 - v) for k, v in cand.items()}
    return {"ref": ref, "cand": churned}


def population_value(metric: str, answers: dict[str, np.ndarray], weight: float) -> np.ndarray:
    """Expected feature sums per unit (times ``weight``) of S_DIS or S_AMB from answer chances."""
    target, other, unknown = 0, 1, 2
    if metric == "bias_s_dis":  # biased & counted, counted (disambiguated items)
        t, o = answers["label_target"], answers["label_other"]
        return weight * np.array([t[target] + o[target], t[target] + t[other]
                                  + o[target] + o[other]])
    amb = 2 * answers["ambig"]  # correct & parsed, parsed, biased, counted (ambiguous items)
    return weight * np.array([amb[unknown], amb.sum(), amb[target], amb[target] + amb[other]])


def population_shift(metric: str, rate: float) -> float:
    """The superpopulation's shift of ``metric`` (points) at a move ``rate``, in closed form."""
    moved_share = len(MOVED_CATEGORIES) / CATEGORIES
    sums = {}
    for run in ("ref", "cand"):
        sums[run] = sum(population_value(metric, expected_answers(metric, rate, moved)[run],
                                         share)
                        for moved, share in ((True, moved_share), (False, 1 - moved_share)))
    spec = SPECS[metric]
    return float(spec.value(sums["cand"]) - spec.value(sums["ref"])) * spec.scale


def calibrate_rate(metric: str, margin_pp: float) -> float:
    """The move rate whose superpopulation shift of ``metric`` is ``margin_pp`` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if population_shift(metric, mid) < margin_pp else (low, mid)
    return (low + high) / 2


# --- one pilot, both rules ----------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """A null kind (or ``power``), a pilot size and how many candidates."""

    kind: str
    n_units: int
    n_candidates: int
    churn: float = CHURN  # the equal candidate's, in power cells

    @property
    def metric(self) -> str:
        return {"s_dis_categories": "bias_s_dis", "s_amb_categories": "bias_s_amb"}.get(
            self.kind, "accuracy")

    @property
    def margin(self) -> float:
        return KIND_MARGINS.get(self.kind, MARGINS[self.metric])

    @property
    def claims(self) -> list[Claim]:
        pilots = ("a", "b") if self.kind == "between_models" else ()
        return [Claim(self.metric, self.margin, pilots)]

    @property
    def is_power(self) -> bool:
        """The first candidate truly moves nothing (``power``: it costs the most of them;
        ``power_declared``: it costs the least and is declared first)."""
        return self.kind.startswith("power")

    @property
    def declared(self) -> Declared:
        """The fixed sequence a ``power_declared`` cell names before its pilots."""
        if self.kind != "power_declared":
            return Declared()
        return Declared(order=tuple(f"c{i}" for i in range(self.n_candidates)))

    @property
    def key(self) -> str:
        churn = f"_churn{self.churn:g}" if self.is_power else ""
        return f"{self.kind}{churn}_{self.n_units}u_{self.n_candidates}c"


def _forced_together(ref: np.ndarray, forced: list[np.ndarray]) -> np.ndarray:
    """One reference for every candidate: each one's forced answers (where its own reference
    differs from ``ref``) applied together (a null kind forces one way only)."""
    out = ref.copy()
    for own in forced:
        out = np.where(own != ref, own, out)
    return out


def simulate_pilot(cell: Cell, rng: np.random.Generator, rate: float | None
                   ) -> tuple[dict, list[str]]:
    """Per model and run, the pilot's item frame (``cell.n_units`` units drawn without
    replacement from an instrument of :data:`POPULATION` units); the truly shifted candidates."""
    frames, shifted = simulate_instrument(cell, rng, rate)
    chosen = {str(u) for u in rng.choice(POPULATION, cell.n_units, replace=False)}
    return {model: {run: frame[frame["unit_id"].isin(chosen)].reset_index(drop=True)
                    for run, frame in runs.items()} for model, runs in frames.items()}, shifted


def simulate_instrument(cell: Cell, rng: np.random.Generator, rate: float | None,
                        n_units: int = POPULATION) -> tuple[dict, list[str]]:
    """Per model and run, the whole instrument's item frame (``n_units`` units); the truly
    shifted candidates."""
    names = [f"c{i}" for i in range(cell.n_candidates)]
    if cell.metric != "accuracy":
        layout = bbq_layout(n_units, rng)
        ref = bbq_reference(layout, rng)
        runs = {"ref": bbq_frame(layout, ref)}
        for name in names:
            draws = rng.random((len(layout), 3))
            runs[name] = bbq_frame(layout, bbq_candidate(layout, ref, cell.metric, rate, draws))
        return {"m": runs}, names
    if cell.kind == "between_models":
        ref_a, ref_b = (accuracy_reference(n_units, rng) for _ in range(2))
        moved = [_broken_units(ref_a, 0.10, 2, rng) for _ in names]
        ref_a = _forced_together(ref_a, [r for r, _ in moved])
        a = {"ref": accuracy_frame(ref_a)}
        b = {"ref": accuracy_frame(ref_b)}
        for name, (forced, cand) in zip(names, moved, strict=True):
            # right where any candidate needs it, wrong where this one broke it
            a[name] = accuracy_frame(np.where(forced != cand, False, ref_a))
            b[name] = accuracy_frame(_churned(ref_b, rng))
        return {"a": a, "b": b}, names
    ref = accuracy_reference(n_units, rng)
    if cell.kind.startswith("power"):
        shifted = names[1:]
        pairs = [(ref, _churned(ref, rng, cell.churn))]
        pairs += [ACCURACY_NULLS["independent"](ref, rng) for _ in shifted]
    else:
        shifted = names
        pairs = [ACCURACY_NULLS[cell.kind](ref, rng) for _ in names]
    forced = _forced_together(ref, [r for r, _ in pairs])
    runs = {"ref": accuracy_frame(forced)}
    for name, (own_ref, cand) in zip(names, pairs, strict=True):
        runs[name] = accuracy_frame(np.where(own_ref != cand, cand, forced))
    return {"m": runs}, shifted


def t_tost_before(estimate: ClaimEstimate, claim: Claim) -> float:
    """The rule before 2026-12-03: Student-t TOST (n - 1 df); identical accuracy: exact bound."""
    if estimate.n_units < MIN_PILOT_UNITS:
        return 1.0
    if estimate.identical:
        return ((1 - claim.margin_pp / (100.0 * claim.n_models)) ** estimate.n_units
                if claim.metric == "accuracy" else 1.0)
    se, df = estimate.shift_se_pp, estimate.n_units - 1
    if not se > 0:
        return 1.0
    upper = stats.t.sf((claim.margin_pp - estimate.shift_pp) / se, df)
    lower = stats.t.sf((estimate.shift_pp + claim.margin_pp) / se, df)
    return float(max(upper, lower))


def _chosen(rec: Recommendation, certified: dict[str, bool]) -> str:
    """The cheapest decidable option whose candidate is certified under a rule."""
    for option in rec.options:
        if option.decidable and certified.get(option.candidate, option.candidate == "ref"):
            return option.candidate
    return "none"


def run_pilot(cell: Cell, rng: np.random.Generator, rate: float | None, alpha: float,
              resamples: int) -> dict[str, dict]:
    frames, shifted = simulate_pilot(cell, rng, rate)
    claims = cell.claims
    estimates = claim_estimates(frames, "ref", claims, {cell.metric: SPECS[cell.metric]},
                                resamples, rng)
    names = [n for n in estimates if n != "ref"]
    first = {"power": 0.9, "power_declared": 0.1}.get(cell.kind)
    costs = {"ref": 1.0, **{n: (first if first and i == 0 else 0.2 + 0.1 * i)
                            for i, n in enumerate(names)}}
    candidates = [Candidate(n, costs[n], estimates[n]) for n in ["ref", *names]]
    rec = recommend(candidates, claims, SIZES, 4, reference="ref", alpha=alpha,
                    declared=cell.declared, population_units=POPULATION)
    pvalues_before = np.array([max(t_tost_before(estimates[n][k.name], k) for k in claims)
                      for n in names])
    old = dict(zip(names, (holm(pvalues_before) <= alpha).tolist(), strict=True))
    new = {n: c.certified for n, c in rec.certificates.items()}
    out = {}
    for rule, certified in (("recommend", new), ("t_tost_before", old)):
        chosen = _chosen(rec, certified)
        out[rule] = {"chosen_shifted": chosen in shifted,
                     "certified_shifted": any(certified[n] for n in shifted),
                     "certified_equal": cell.is_power and certified[names[0]],
                     "chose_equal": cell.is_power and chosen == names[0]}
    out["recommend"]["p_max"] = float(max(claim_pvalue(estimates[n][k.name], k, POPULATION)
                                          for n in names for k in claims))
    return out


def _rate(hits: int, n: int) -> dict:
    low, high = stats.binomtest(hits, n).proportion_ci(0.95)
    return {"rate": hits / n, "ci95": [float(low), float(high)]}


def run_cell(cell: Cell, pilots: int, alpha: float, resamples: int, seed: int,
             rate: float | None) -> dict:
    rng = np.random.default_rng(seed)
    rows = [run_pilot(cell, rng, rate, alpha, resamples) for _ in range(pilots)]
    rules = {}
    for rule in ("recommend", "t_tost_before"):
        counts = {k: sum(r[rule][k] for r in rows) for k in ("chosen_shifted",
                                                             "certified_shifted",
                                                             "certified_equal", "chose_equal")}
        rules[rule] = {"error": _rate(counts["chosen_shifted"], pilots),
                       "fwer": _rate(counts["certified_shifted"], pilots)}
        if cell.is_power:
            rules[rule]["certified_equal"] = _rate(counts["certified_equal"], pilots)
            rules[rule]["chose_equal"] = _rate(counts["chose_equal"], pilots)
    return {"key": cell.key, "kind": cell.kind, "metric": cell.metric,
            "margin_pp": cell.margin, "pilot_units": cell.n_units,
            "candidates": cell.n_candidates, "churn_of_equal": cell.churn
            if cell.is_power else None, "pilots": pilots, "move_rate": rate,
            "claims": [c.name for c in cell.claims], "rules": rules}


def exact_all_or_nothing(n_units: int, share: float, alpha: float, resamples: int) -> dict:
    """Certified or not for every count of broken units; the error over the hypergeometric
    count of the instrument's ``share * POPULATION`` broken units in a pilot of ``n_units``."""
    rng = np.random.default_rng(0)
    base = accuracy_reference(n_units, rng)
    claim = Claim("accuracy", MARGINS["accuracy"])
    rows = []
    for broken in range(n_units + 1):
        ref, cand = base.copy(), base.copy()
        ref[: 4 * broken], cand[: 4 * broken] = True, False
        est = claim_estimates({"m": {"ref": accuracy_frame(ref), "c": accuracy_frame(cand)}},
                              "ref", [claim], {"accuracy": ACCURACY}, resamples, 0)["c"]
        p = claim_pvalue(est[claim.name], claim, POPULATION)
        old = t_tost_before(est[claim.name], claim)
        rows.append({"broken_units": broken, "shift_pp": est[claim.name].shift_pp,
                     "p": p, "p_before": old, "probability": float(stats.hypergeom.pmf(
                         broken, POPULATION, round(share * POPULATION), n_units))})
    return {"pilot_units": n_units, "broken_share": share, "units": rows,
            "error": sum(r["probability"] for r in rows if r["p"] <= alpha),
            "error_before": sum(r["probability"] for r in rows if r["p_before"] <= alpha)}


def one_changed_item(sizes: list[int], margin: float, resamples: int) -> list[dict]:
    """The p of a candidate that changes exactly one item of the pilot, per pilot size."""
    claim = Claim("accuracy", margin)
    out = []
    for n_units in sizes:
        ref = accuracy_reference(n_units, np.random.default_rng(n_units))
        cand = ref.copy()
        cand[0] = not cand[0]
        est = claim_estimates({"m": {"ref": accuracy_frame(ref), "c": accuracy_frame(cand)}},
                              "ref", [claim], {"accuracy": ACCURACY}, resamples, 0)["c"]
        out.append({"pilot_units": n_units, "margin_pp": margin,
                    "p": claim_pvalue(est[claim.name], claim, POPULATION),
                    "p_identical": claim_pvalue(ClaimEstimate(
                        0.0, 0.0, 1.0, n_units, identical=True, leverage_pp=100.0), claim,
                        POPULATION)})
    return out


def summary(rows: list[dict], alpha: float) -> dict:
    """The largest error of each rule over the null cells, with its interval and a simultaneous
    one (Bonferroni over the cells: the largest of many noisy rates sits high by chance), and
    the rate pooled over every null cell."""
    nulls = [r for r in rows if not r["kind"].startswith("power")]
    out = {"null_cells": len(nulls)}
    for rule in ("recommend", "t_tost_before"):
        if not nulls:
            break
        worst = max(nulls, key=lambda r: r["rules"][rule]["error"]["rate"])
        hits = round(worst["rules"][rule]["error"]["rate"] * worst["pilots"])
        level = 1 - alpha / len(nulls)
        low, high = stats.binomtest(hits, worst["pilots"]).proportion_ci(level)
        pooled = sum(round(r["rules"][rule]["error"]["rate"] * r["pilots"]) for r in nulls)
        total = sum(r["pilots"] for r in nulls)
        hidden = [r for r in nulls if r["kind"].startswith("partly_hidden")]
        out[rule] = {"largest": {"cell": worst["key"], **worst["rules"][rule]["error"],
                                 "ci_simultaneous": [float(low), float(high)],
                                 "simultaneous_level": level},
                     "pooled": _rate(pooled, total),
                     "pooled_partly_hidden": _rate(
                         sum(round(r["rules"][rule]["error"]["rate"] * r["pilots"])
                             for r in hidden), sum(r["pilots"] for r in hidden))
                     if hidden else None}
    return out


def cells(sizes: list[int], counts: list[int], churns: list[float]) -> list[Cell]:
    kinds = [*ACCURACY_NULLS, "between_models", "s_dis_categories", "s_amb_categories"]
    grid = [Cell(k, n, c) for k in kinds for n in sizes for c in counts]
    grid += [Cell("power", n, 1, churn) for n in sizes if n >= 62 for churn in churns]
    grid += [Cell("power", n, c, CHURN) for n in sizes if n >= 62 for c in counts if c > 1]
    grid += [Cell("power_declared", n, 5, CHURN) for n in sizes if n >= 62]
    return grid


def _pilots(cell: Cell, args: argparse.Namespace) -> int:
    """``--pilots``, or the ``--pilots-for`` count of the first prefix the cell's key has."""
    for text in args.pilots_for:
        prefix, _, count = text.partition("=")
        if cell.key.startswith(prefix):
            return int(count)
    return args.pilots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pilots", type=int, default=1000)
    parser.add_argument("--pilots-for", nargs="*", default=[], metavar="PREFIX=N",
                        help="more pilots for cells whose key starts with PREFIX (those near "
                             "alpha), e.g. partly_hidden=2000")
    parser.add_argument("--units", type=int, nargs="+", default=[20, 40, 62, 100, 250])
    parser.add_argument("--candidates", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--churns", type=float, nargs="+",
                        default=[0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.15])
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", help="run only cells whose key starts with these")
    parser.add_argument("--jobs", type=int, default=1, help="cells run in parallel processes")
    parser.add_argument("--shortest-first", action="store_true",
                        help="run the cheapest cells first (another machine may take the "
                             "longest first into a copy of the same file; the cells merge)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    done = json.loads(out.read_text()) if out.exists() else {}
    results = {r["key"]: r for r in done.get("cells", [])}
    start = time.perf_counter() - done.get("seconds", 0.0)
    rates = {m: calibrate_rate(m, MARGINS[m]) for m in ("bias_s_dis", "bias_s_amb")}
    exact = done.get("exact_all_or_nothing") or exact_all_or_nothing(62, 0.05, args.alpha,
                                                                     args.bootstrap)
    one_item = done.get("one_changed_item") or one_changed_item([62, 100, 250], 5.0,
                                                                args.bootstrap)
    grid = cells(args.units, args.candidates, args.churns)
    order = {cell.key: i for i, cell in enumerate(grid)}
    todo = sorted(((i, cell) for i, cell in enumerate(grid) if cell.key not in results
                   and not (args.only and not cell.key.startswith(tuple(args.only)))),
                  key=lambda job: job[1].n_units * (job[1].n_candidates + 1)
                  * (1 if args.shortest_first else -1))
    def save() -> None:
        rows = sorted(results.values(), key=lambda r: order.get(r["key"], len(order)))
        write_json(out, {
            "command": command_line("recommend_simulation.py", args), "alpha": args.alpha,
            "margins_pp": MARGINS, "sizes_units": list(SIZES), "bootstrap": args.bootstrap,
            "churn": CHURN, "move_rates": rates, "seconds": time.perf_counter() - start,
            "summary": summary(rows, args.alpha), "exact_all_or_nothing": exact,
            "one_changed_item": one_item, "population_units": POPULATION, "cells": rows})

    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_cell, cell, _pilots(cell, args), args.alpha, args.bootstrap,
                               args.seed + 1009 * i, rates.get(cell.metric))
                   for i, cell in todo]
        for future in as_completed(futures):
            row = future.result()
            results[row["key"]] = row
            print(row["key"], {r: (v["error"]["rate"], v.get("certified_equal", {}).get("rate"))
                               for r, v in row["rules"].items()}, flush=True)
            save()
    save()


if __name__ == "__main__":
    main()
