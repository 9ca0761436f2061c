"""The most any valid certificate could certify: a linear-programming ceiling on power.

A truly equal protocol churns ``c`` of a pilot's items either way (half the items right under
the reference, as ``recommend_simulation.py``'s units average). A null protocol breaks ``h``
of the instrument's 500 units outright (right on 4 items -> wrong on 4) and moves the rest the
same way by the rest of the margin, ``r = (margin - 100 h / 500) / (1 - h / 500)`` points,
with its own churn ``c'``: a right item turns wrong with chance ``c' + 2 r / 100``, a wrong one
right with ``c'`` (``synthetic.move_answers``), or the mirror image upwards. The pilot draws
``n`` units without replacement and catches ``K`` broken units (hypergeometric).

For these distributions the counts ``(A, B, K)``, items right -> wrong and wrong -> right in the
units not seen broken and the broken units seen, are sufficient, so the most powerful test of
level ``alpha`` against every null of the family at once is the linear program

    maximise  sum_x phi(x) P_equal(x)   subject to  sum_x phi(x) P_null(x) <= alpha  (each null),
    0 <= phi <= 1,

and no valid certificate (the package's included) certifies the equal protocol more often:
the family holds only some of the nulls a certificate must keep (``h`` = 0..25, churns
``c' in {c/2, c, 2c}``, both directions). The equal protocol never shows a broken unit, so
``phi`` lives on ``K = 0``. Counts whose chance is below 1e-15 under every distribution are
left out (``phi = 0`` there).

    python benchmarks/certificate_ceiling.py --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _harness import command_line, write_json
from scipy import optimize, stats

from lm_eval_ext.data.instrument import INSTRUMENT_UNITS

POPULATION = INSTRUMENT_UNITS


def _counts(items: int, right_to_wrong: float, wrong_to_right: float, top: int) -> np.ndarray:
    """P(A = a, B = b) for ``a, b < top``: independent binomials over half the items each."""
    a = stats.binom.pmf(np.arange(top), items // 2, right_to_wrong)
    b = stats.binom.pmf(np.arange(top), items - items // 2, wrong_to_right)
    return np.outer(a, b)


def ceiling(n_units: int, churn: float, margin_pp: float = 5.0, alpha: float = 0.05) -> dict:
    """The LP's power for the equal protocol, and the family it was held to."""
    items = 4 * n_units
    equal = _counts(items, churn, churn, items // 2 + 1)
    nulls = []
    for hidden in range(round(margin_pp / 100 * POPULATION) + 1):
        share = hidden / POPULATION
        rest = (margin_pp / 100 - share) / (1 - share)
        missed = stats.hypergeom.pmf(0, POPULATION, hidden, n_units)
        for own in (churn / 2, churn, 2 * churn):
            down = _counts(items, min(own + 2 * rest, 1.0), own, items // 2 + 1)
            nulls += [missed * down, missed * down.T]  # the mirror image: wrong -> right
    keep = np.maximum(equal, np.max(nulls, axis=0)) > 1e-15
    gain = -equal[keep]
    bounds = np.array([null[keep] for null in nulls])
    result = optimize.linprog(gain, A_ub=bounds, b_ub=np.full(len(nulls), alpha),
                              bounds=(0, 1), method="highs")
    if not result.success:
        raise RuntimeError(result.message)
    return {"pilot_units": n_units, "churn": churn, "margin_pp": margin_pp, "alpha": alpha,
            "ceiling_power": float(-result.fun), "nulls": len(nulls),
            "counts_kept": int(keep.sum()), "equal_mass_kept": float(equal[keep].sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, nargs="+", default=[62, 100, 250])
    parser.add_argument("--churns", type=float, nargs="+", default=[0.005, 0.03])
    parser.add_argument("--margin", type=float, default=5.0)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [ceiling(n, c, args.margin, args.alpha) for n in args.units for c in args.churns]
    write_json(args.out, {"command": command_line("certificate_ceiling.py", args),
                          "population_units": POPULATION, "seconds": time.perf_counter() - start,
                          "ceilings": rows})


if __name__ == "__main__":
    main()
