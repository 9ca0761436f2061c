"""Does ``recommend`` keep its error rate, the tool's own choice included? Pilots with known truth.

Each simulated pilot has ``--units`` natural units of 4 items. Per model, a unit's chance of a
correct answer is ``expit(N(0, 1))`` (so 0.5 on average, correlated within the unit); each
candidate protocol moves a wrong answer to right with chance ``b + s`` and a right one to wrong
with ``b - s`` (``b = 0.08 + |s|``), so its true accuracy shift is exactly ``s``. The per-item
frames go through the package's own estimator (``claim_estimates``: the joint natural-unit
bootstrap) and its own ``recommend`` (Holm-certified TOST, then the cheapest decidable option),
so the selection the tool makes is the one simulated. Beside it, on the same pilots:

* ``flat_prior_risk``: the rule before: admit when ``P(|shift| > margin) <= 0.2`` for a shift ~
  Normal(pilot delta, SE), per model's value (it had no between-model claims);
* ``tost_unadjusted``: per-claim equivalence tests at ``alpha``, no multiplicity;
* ``split_half``: choose the cheapest candidate passing unadjusted TOST on a random half of the
  units, then confirm it by TOST at ``alpha`` on the other half (else the reference).

Per scenario and rule: the share of pilots whose chosen protocol truly shifts some claim by the
margin or more (the error the card bounds by ``alpha``), with its binomial 95% interval, and the
share that chose a truly safe candidate cheaper than the reference (power).

    python benchmarks/recommend_simulation.py --pilots 2000 --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from _harness import command_line, write_json
from scipy import stats

from lm_eval_ext.analysis.metrics import ACCURACY
from lm_eval_ext.analysis.stats.pilot_contrasts import claim_estimates
from lm_eval_ext.analysis.stats.recommend import (
    Candidate,
    Claim,
    claim_pvalue,
    recommend,
)
from lm_eval_ext.analysis.synthetic import move_answers

MARGIN = 5.0
SIZES = (62, 125, 250, 500)


@dataclass(frozen=True)
class Scenario:
    """Candidates' true shifts (in margins) per model, their costs, and the claims' contrasts."""

    name: str
    shifts: dict[str, tuple[float, ...]]  # candidate -> true shift per model, in margins
    costs: dict[str, float]
    contrasts: tuple[tuple[str, ...], ...]  # each claim's pilots: (m,) or (a, b)


def _scenarios() -> list[Scenario]:
    one = (("m",),)
    eight = np.linspace(0.9, 1.2, 8)
    return [
        Scenario("three_unsafe_1.0-1.3x_one_equal",
                 {"c1": (1.0,), "c2": (1.15,), "c3": (1.3,), "equal": (0.0,)},
                 {"c1": 0.2, "c2": 0.3, "c3": 0.4, "equal": 0.6}, one),
        Scenario("eight_at_0.9-1.2x", {f"c{i}": (float(s),) for i, s in enumerate(eight)},
                 {f"c{i}": 0.1 + 0.05 * i for i in range(8)}, one),
        Scenario("four_at_exactly_the_margin", {f"c{i}": (1.0,) for i in range(4)},
                 {f"c{i}": 0.2 + 0.1 * i for i in range(4)}, one),
        Scenario("equivalent_0.3x_and_unsafe_1.1x", {"unsafe": (1.1,), "near": (0.3,)},
                 {"unsafe": 0.2, "near": 0.4}, one),
        Scenario("between_models_contrast_at_1.0x_and_equal",
                 {"opposed": (0.5, -0.5), "equal": (0.0, 0.0)},
                 {"opposed": 0.2, "equal": 0.4}, (("b", "a"),)),
    ]


def _models(scenario: Scenario) -> list[str]:
    return sorted({p for c in scenario.contrasts for p in c})


def _true_contrast_shift(scenario: Scenario, candidate: str, contrast: tuple[str, ...]) -> float:
    models = _models(scenario)
    shift = dict(zip(models, scenario.shifts[candidate], strict=True))
    if len(contrast) == 1:
        return MARGIN * shift[contrast[0]]
    return MARGIN * (shift[contrast[0]] - shift[contrast[1]])


def simulate_pilot(scenario: Scenario, n_units: int, rng: np.random.Generator
                   ) -> dict[str, dict[str, pd.DataFrame]]:
    """Per model and protocol, the pilot's item frame (unit_id, item_key, correct)."""
    units = np.repeat(np.arange(n_units), 4)
    frames: dict[str, dict[str, pd.DataFrame]] = {}
    for k, model in enumerate(_models(scenario)):
        p = stats.logistic.cdf(rng.normal(0.0, 1.0, n_units))[units]
        ref = rng.random(len(units)) < p
        runs = {"ref": ref}
        for name, shifts in scenario.shifts.items():
            runs[name] = move_answers(ref, MARGIN * shifts[k] / 100, 0.08, rng)
        frames[model] = {r: pd.DataFrame({"unit_id": units.astype(str), "item_key": np.arange(
            len(units)), "correct": c}) for r, c in runs.items()}
    return frames


def _claims(scenario: Scenario) -> list[Claim]:
    return [Claim("accuracy", MARGIN, c) for c in scenario.contrasts]


def _candidates(scenario: Scenario, frames, claims, rng, n_resamples: int) -> list[Candidate]:
    est = claim_estimates(frames, "ref", claims, {"accuracy": ACCURACY}, n_resamples, rng)
    costs = {"ref": 1.0, **scenario.costs}
    return [Candidate(r, costs[r], est[r]) for r in ["ref", *scenario.shifts]]


def _cheapest(candidates: list[Candidate], admitted) -> str:
    """The cheapest admitted protocol (the reference when none)."""
    ok = [c for c in candidates if c.name == "ref" or admitted(c)]
    return min(ok, key=lambda c: c.cost_per_item).name


def _flat_prior_risk(candidates, claims, max_risk=0.2) -> str:
    def risk(e):
        return (stats.norm.sf((MARGIN - e.shift_pp) / e.shift_se_pp)
                + stats.norm.cdf((-MARGIN - e.shift_pp) / e.shift_se_pp)) \
            if e.shift_se_pp > 0 else float(abs(e.shift_pp) > MARGIN)
    return _cheapest(candidates, lambda c: all(risk(e) <= max_risk
                                               for e in c.estimates.values()))


def _tost(candidates, claims, alpha) -> str:
    return _cheapest(candidates, lambda c: all(claim_pvalue(c.estimates[k.name], k) <= alpha
                                               for k in claims))


def _split_half(scenario, frames, claims, rng, alpha, n_resamples) -> str:
    units = next(iter(next(iter(frames.values())).values()))["unit_id"].unique()
    half = set(rng.permutation(units)[: len(units) // 2])

    def part(keep: bool):
        return {m: {r: f[f["unit_id"].isin(half) == keep] for r, f in runs.items()}
                for m, runs in frames.items()}

    chosen = _tost(_candidates(scenario, part(True), claims, rng, n_resamples), claims, alpha)
    if chosen == "ref":
        return chosen
    confirm = {c.name: c for c in _candidates(scenario, part(False), claims, rng, n_resamples)}
    ok = all(claim_pvalue(confirm[chosen].estimates[k.name], k) <= alpha for k in claims)
    return chosen if ok else "ref"


def run_scenario(scenario: Scenario, n_units: int, pilots: int, alpha: float, seed: int,
                 n_resamples: int) -> dict:
    rng = np.random.default_rng(seed)
    claims = _claims(scenario)
    unsafe = {c for c in scenario.shifts
              if any(abs(_true_contrast_shift(scenario, c, k.pilots)) >= MARGIN - 1e-9
                     for k in claims)}
    old_claims = [Claim("accuracy", MARGIN, (m,)) for m in _models(scenario)] \
        if any(len(c) == 2 for c in scenario.contrasts) else claims
    chosen: dict[str, list[str]] = {r: [] for r in ("recommend_holm_tost", "tost_unadjusted",
                                                    "split_half", "flat_prior_risk")}
    for _ in range(pilots):
        frames = simulate_pilot(scenario, n_units, rng)
        candidates = _candidates(scenario, frames, claims, rng, n_resamples)
        rec = recommend(candidates, claims, SIZES, 4, reference="ref", alpha=alpha)
        chosen["recommend_holm_tost"].append(rec.chosen.candidate if rec.chosen else "ref")
        chosen["tost_unadjusted"].append(_tost(candidates, claims, alpha))
        chosen["split_half"].append(_split_half(scenario, frames, claims, rng, alpha,
                                                n_resamples))
        old = candidates if old_claims is claims else _candidates(scenario, frames, old_claims,
                                                                  rng, n_resamples)
        chosen["flat_prior_risk"].append(_flat_prior_risk(old, old_claims))
    rules = {}
    for rule, names in chosen.items():
        wrong = sum(n in unsafe for n in names)
        low, high = stats.binomtest(wrong, pilots).proportion_ci(0.95)
        rules[rule] = {"error_rate": wrong / pilots, "error_ci95": [low, high],
                       "found_safe_cheaper": sum(n != "ref" and n not in unsafe
                                                 for n in names) / pilots,
                       "chosen_counts": dict(sorted(pd.Series(names).value_counts().items()))}
    return {"scenario": scenario.name, "pilot_units": n_units, "pilots": pilots,
            "true_shifts_in_margins": {c: list(s) for c, s in scenario.shifts.items()},
            "claims": [k.name for k in claims], "unsafe_candidates": sorted(unsafe),
            "rules": rules}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pilots", type=int, default=2000)
    parser.add_argument("--units", type=int, nargs="+", default=[62, 250])
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    start, results = time.perf_counter(), []
    for i, scenario in enumerate(_scenarios()):
        for n_units in args.units:
            row = run_scenario(scenario, n_units, args.pilots, args.alpha,
                               args.seed + 1000 * i + n_units, args.bootstrap)
            results.append(row)
            print(scenario.name, n_units, {r: (v["error_rate"], v["found_safe_cheaper"])
                                           for r, v in row["rules"].items()}, flush=True)
    write_json(args.out, {
        "command": command_line("recommend_simulation.py", args), "margin_pp": MARGIN,
        "alpha": args.alpha, "sizes_units": list(SIZES), "bootstrap": args.bootstrap,
        "seconds": time.perf_counter() - start, "scenarios": results})


if __name__ == "__main__":
    main()
