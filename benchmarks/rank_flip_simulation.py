"""Is a rank flip "beyond noise" a calibrated test? Grids with known truth.

Two models x ``--conditions`` conditions on ``--units`` natural units of 4 items. A unit's chance
of a correct answer is ``expit(N(0, 1))``, shared by both models (the items are the same). In a
condition each model's true accuracy is moved by ``+-shift / 2`` (model a up, b down, or the
reverse in alternating conditions), so the true gap a - b alternates ``+shift, -shift``
(``shift`` 0: tied models, no true flip). The **boundary** null has the gap ``+shift`` in even
conditions and 0 in odd ones: no true flip, but one side of the test as close to rejecting as
it gets. Conditions are either **correlated** (each condition
moves 5% of the model's answers away from one base draw, as precisions of one model do) or
**independent** (each condition a fresh draw). Every grid goes through the package's
``rank_flip_intervals`` (the same bootstrap, the flip test and Holm over the pair); per scenario
the share of grids called ``beyond_noise`` (false when ``shift`` is 0, power otherwise), with
its binomial 95% interval, and of grids whose gap is found to vary between conditions
(``gap_varies_p_holm <= 0.05``: false only for tied models), beside the rule before
(``rho_flip_ci_low > ordering_noise``) and the mean ``ordering_noise``.

    python benchmarks/rank_flip_simulation.py --grids 1000 --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _harness import command_line, write_json
from scipy import stats

from lm_eval_ext.analysis.stats.rank_flips import rank_flip_intervals
from lm_eval_ext.analysis.synthetic import two_model_grid


def run_scenario(n_units: int, n_conditions: int, shift_pp: float, correlated: bool,
                 grids: int, resamples: int, seed: int, boundary: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    called, varies, before, noise = 0, 0, 0, []
    for _ in range(grids):
        gaps = [shift_pp if c % 2 == 0 else (0.0 if boundary else -shift_pp)
                for c in range(n_conditions)]
        cells, sums = two_model_grid(gaps, rng, n_units, correlated)
        row = rank_flip_intervals(cells, sums, resamples, rng)[0].iloc[0]
        called += bool(row["beyond_noise"])
        varies += bool(row["gap_varies_p_holm"] <= 0.05)
        before += bool(row["rho_flip_ci_low"] > row["ordering_noise"])
        noise.append(row["ordering_noise"])
    low, high = stats.binomtest(called, grids).proportion_ci(0.95)
    return {"units": n_units, "conditions": n_conditions, "gap_pp": shift_pp,
            "pattern": "boundary_null" if boundary else ("tied" if shift_pp == 0 else
                                                         "alternating_flip"),
            "conditions_correlated": correlated, "grids": grids,
            "beyond_noise_rate": called / grids, "beyond_noise_ci95": [low, high],
            "gap_varies_rate": varies / grids, "rule_before_rate": before / grids,
            "mean_ordering_noise": float(np.mean(noise))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", type=int, default=1000)
    parser.add_argument("--units", type=int, default=250)
    parser.add_argument("--conditions", type=int, default=4)
    parser.add_argument("--shifts", type=float, nargs="+", default=[0.0, 3.0, 6.0])
    parser.add_argument("--boundary-gap", type=float, default=6.0,
                        help="the boundary null's gap in the even conditions")
    parser.add_argument("--resamples", type=int, default=399)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    start, results = time.perf_counter(), []
    plan = [(shift, False) for shift in args.shifts] + [(args.boundary_gap, True)]
    for i, (shift, boundary) in enumerate(plan):
        for correlated in (True, False):
            row = run_scenario(args.units, args.conditions, shift, correlated, args.grids,
                               args.resamples, args.seed + 10 * i + correlated, boundary)
            results.append(row)
            print({k: row[k] for k in ("pattern", "gap_pp", "conditions_correlated",
                                       "beyond_noise_rate", "gap_varies_rate",
                                       "rule_before_rate")}, flush=True)
    write_json(args.out, {"command": command_line("rank_flip_simulation.py", args),
                          "seconds": time.perf_counter() - start, "scenarios": results})


if __name__ == "__main__":
    main()
