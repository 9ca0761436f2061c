"""Are the rank-flip and gap-varies tests calibrated? Grids with known truth.

Two models x ``--conditions`` conditions (4 and 8) on ``--units`` natural units of 4 items (250
and 62). A unit's chance of a correct answer is ``expit(N(0, 1))``, shared by both models (the
items are the same); in each condition the true gap a - b is set by a pattern
(``lm_eval_ext.analysis.synthetic.two_model_grid``):

* ``tied`` (0 everywhere) and ``constant_gap`` (``--constant-gap`` points everywhere): no flip and
  no condition x model interaction, the nulls of both tests;
* ``boundary_null`` (``--boundary-gap`` in even conditions, 0 in odd ones): no flip, but as close
  to one as a null gets; the gap varies;
* ``alternating_flip`` (``+shift, -shift, ...`` for each of ``--shifts`` above 0): a true flip;
* ``one_condition`` (``--one-gap`` in the first condition, 0 elsewhere): the gap varies in one
  condition only, the sparse case for the gap-varies test.

Conditions are either **correlated** (each moves 5% of the model's answers away from one base
draw, as precisions of one model do) or **independent** (each a fresh draw). Every grid goes
through the package's ``rank_flip_intervals``; per scenario the share of grids called
``beyond_noise`` (false without a true flip, power with one) and of grids whose gap is found to
vary (``gap_varies_p_holm <= 0.05``: false for ``tied`` and ``constant_gap``), each with its
Clopper-Pearson 95% interval, beside the rules before: ``rho_flip_ci_low > ordering_noise`` for
the flip, and for the gap the bootstrap max-|t| of commit 2c4f1d0 (:func:`gap_varies_before`).

    python benchmarks/rank_flip_simulation.py --grids 1000 --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _harness import command_line, write_json
from scipy import stats

from lm_eval_ext.analysis.stats.bootstrap import bootstrap_counts
from lm_eval_ext.analysis.stats.rank_flips import rank_flip_intervals
from lm_eval_ext.analysis.synthetic import two_model_grid

#: pattern -> the true gap in condition ``c`` given the scenario's ``gap``
PATTERNS = {"tied": lambda gap, c: 0.0,
            "constant_gap": lambda gap, c: gap,
            "boundary_null": lambda gap, c: gap if c % 2 == 0 else 0.0,
            "alternating_flip": lambda gap, c: gap if c % 2 == 0 else -gap,
            "one_condition": lambda gap, c: gap if c == 0 else 0.0}


def gap_varies_before(cells: pd.DataFrame, sums: dict, resamples: int, rng) -> float:
    """The gap-varies p before (commit 2c4f1d0), for comparison: a bootstrap max-|t|.

    The deviations ``e_c = gap_c - mean(gap)`` over their bootstrap SDs, ``max_c |e_c| / se_c``
    judged by the centred resamples' ``max_c |e*_c - e_c| / se_c`` (the SDs are not
    re-estimated per resample).
    """
    correct = np.array([sums[i]["correct"].to_numpy() for i in cells.index])
    counts = np.array([sums[i]["n"].to_numpy() for i in cells.index])
    weights = bootstrap_counts(correct.shape[1], resamples, rng)
    draws = (weights @ correct.T) / (weights @ counts.T)
    a = (cells["model"] == "a").to_numpy()  # two_model_grid: a, b per condition in order
    gap = cells["value"].to_numpy()[a] - cells["value"].to_numpy()[~a]
    resampled = draws[:, a] - draws[:, ~a]
    deviation = gap - gap.mean()
    centred = resampled - resampled.mean(axis=1, keepdims=True) - deviation
    se = centred.std(axis=0, ddof=1)
    count = (np.abs(centred / se).max(axis=1) >= np.abs(deviation / se).max()).sum()
    return float((count + 1) / (resamples + 1))


def _rate(hits: int, grids: int) -> tuple[float, list[float]]:
    """The share and its Clopper-Pearson 95% interval."""
    low, high = stats.binomtest(hits, grids).proportion_ci(0.95)
    return hits / grids, [low, high]


def run_scenario(n_units: int, n_conditions: int, pattern: str, gap_pp: float, correlated: bool,
                 grids: int, resamples: int, seed: int) -> dict:
    """One scenario's rates over ``grids`` simulated grids."""
    rng = np.random.default_rng(seed)
    gaps = [PATTERNS[pattern](gap_pp, c) for c in range(n_conditions)]
    called = varies = varies_before = before = 0
    noise = []
    for _ in range(grids):
        cells, sums = two_model_grid(gaps, rng, n_units, correlated)
        row = rank_flip_intervals(cells, sums, resamples, rng)[0].iloc[0]
        called += bool(row["beyond_noise"])
        varies += bool(row["gap_varies_p_holm"] <= 0.05)
        varies_before += gap_varies_before(cells, sums, resamples, rng) <= 0.05
        before += bool(row["rho_flip_ci_low"] > row["ordering_noise"])
        noise.append(row["ordering_noise"])
    rate, ci = _rate(called, grids)
    varies_rate, varies_ci = _rate(varies, grids)
    varies_before_rate, varies_before_ci = _rate(int(varies_before), grids)
    return {"units": n_units, "conditions": n_conditions, "gap_pp": gap_pp, "pattern": pattern,
            "conditions_correlated": correlated, "grids": grids,
            "beyond_noise_rate": rate, "beyond_noise_ci95": ci,
            "gap_varies_rate": varies_rate, "gap_varies_ci95": varies_ci,
            "gap_varies_before_rate": varies_before_rate,
            "gap_varies_before_ci95": varies_before_ci,
            "rule_before_rate": before / grids, "mean_ordering_noise": float(np.mean(noise))}


def summary(scenarios: list[dict]) -> dict:
    """Over the nulls of each test: the pooled false rate (Clopper-Pearson) and the largest.

    The gap-varies test's nulls are ``tied`` and ``constant_gap``; the flip test's are every
    scenario without a true flip.
    """
    nulls = {"gap_varies": ("tied", "constant_gap"),
             "gap_varies_before": ("tied", "constant_gap"),
             "beyond_noise": ("tied", "constant_gap", "boundary_null", "one_condition")}
    out = {}
    for test, patterns in nulls.items():
        rows = [r for r in scenarios if r["pattern"] in patterns]
        grids = sum(r["grids"] for r in rows)
        hits = round(sum(r[f"{test}_rate"] * r["grids"] for r in rows))
        rate, ci = _rate(hits, grids)
        worst = max(rows, key=lambda r: r[f"{test}_rate"])
        out[test] = {"null_scenarios": len(rows), "pooled_false_rate": rate,
                     "pooled_ci95": ci, "max_false_rate": worst[f"{test}_rate"],
                     "max_ci95": worst[f"{test}_ci95"],
                     "max_scenario": {k: worst[k] for k in ("units", "conditions", "pattern",
                                                            "gap_pp", "conditions_correlated")}}
    return out


def plan(args: argparse.Namespace) -> list[tuple[str, float]]:
    """(pattern, gap) of every scenario, nulls first."""
    flips = [("alternating_flip", shift) for shift in args.shifts if shift != 0]
    return [("tied", 0.0), ("constant_gap", args.constant_gap),
            ("boundary_null", args.boundary_gap), *flips, ("one_condition", args.one_gap)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", type=int, default=1000)
    parser.add_argument("--units", type=int, nargs="+", default=[250, 62])
    parser.add_argument("--conditions", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--shifts", type=float, nargs="+", default=[3.0, 6.0],
                        help="the alternating flips' gaps (0 is the tied null, always run)")
    parser.add_argument("--constant-gap", type=float, default=3.0)
    parser.add_argument("--boundary-gap", type=float, default=6.0,
                        help="the boundary null's gap in the even conditions")
    parser.add_argument("--one-gap", type=float, default=6.0,
                        help="the one-condition scenario's gap in its first condition")
    parser.add_argument("--resamples", type=int, default=399)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    start, results, seed = time.perf_counter(), [], args.seed
    for units in args.units:
        for conditions in args.conditions:
            for pattern, gap in plan(args):
                for correlated in (True, False):
                    row = run_scenario(units, conditions, pattern, gap, correlated, args.grids,
                                       args.resamples, seed)
                    seed += 1
                    results.append(row)
                    print({k: row[k] for k in ("units", "conditions", "pattern", "gap_pp",
                                               "conditions_correlated", "beyond_noise_rate",
                                               "gap_varies_rate", "gap_varies_before_rate")},
                          flush=True)
    write_json(args.out, {"command": command_line("rank_flip_simulation.py", args),
                          "seconds": time.perf_counter() - start, "scenarios": results,
                          "summary": summary(results)})


if __name__ == "__main__":
    main()
