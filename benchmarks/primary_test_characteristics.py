"""Operating characteristics of the paired analysis' primary test and interval, by simulation.

Paired datasets with a known truth, tested at alpha 0.05 (999 resamples each) with the cluster
permutation p (mid-p, the default, and the conventional ``(1 + #{>=}) / (B + 1)``), the
item-level exact McNemar, and the 95% percentile cluster-bootstrap interval:

* ``clustered_null``: 500 natural units x 4 items, per-run unit effects (SD 0.5 and 1.0 logit),
  no run effect: the null size of each test (McNemar ignores the clustering);
* ``clustered_power``: the same at unit SD 1.0 with a +0.25 logit run effect: the permutation
  test's power against the normal approximation from the simulated SD of the delta;
* ``independent``: 500 items at 10% discordance and 100 items at 20%: size under the null and
  power at the MDE that ``lm-eval-ext mde`` reports (target 80%);
* ``coverage``: 120 units x 4 items, probit model with a known delta: interval coverage.

    python benchmarks/primary_test_characteristics.py \\
        --out benchmarks/results/primary_test_characteristics_2026-12-01.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _harness import write_json
from scipy import stats

from lm_eval_ext.analysis import (
    ACCURACY,
    ClusterDesign,
    mcnemar_exact,
    paired_delta,
    paired_mde,
    permutation_pvalues,
)

ALPHA, RESAMPLES = 0.05, 999


def expit(x):
    return 1 / (1 + np.exp(-x))


def unit_effect_pair(rng, unit_sd: float, shift: float, n_units: int = 500, per_unit: int = 4):
    """logit P(correct) = item + unit baseline + a per-run unit effect (+ shift for the run)."""
    units = np.repeat(np.arange(n_units), per_unit)
    base = rng.normal(0, 1, n_units)[units] + rng.normal(0, 1, units.size)
    ref = rng.random(units.size) < expit(base + rng.normal(0, unit_sd, n_units)[units])
    run = rng.random(units.size) < expit(base + shift + rng.normal(0, unit_sd, n_units)[units])
    return ref, run, units


def independent_pair(rng, m: int, rho_d: float, delta: float):
    """run - reference = +1 w.p. (rho_d + delta)/2, -1 w.p. (rho_d - delta)/2, else 0."""
    u = rng.random(m)
    up, down = (rho_d + delta) / 2, (rho_d - delta) / 2
    same = rng.random(m) < 0.5
    ref = np.where(u < up, False, np.where(u < up + down, True, same))
    run = np.where(u < up, True, np.where(u < up + down, False, same))
    return ref, run, np.arange(m)


def probit_pair(rng, t_ref: float, t_run: float, n_units: int = 120, per_unit: int = 4):
    """Correct when unit + item + noise effects exceed a threshold (known delta)."""
    units = np.repeat(np.arange(n_units), per_unit)
    shared = rng.normal(size=n_units)[units] + rng.normal(size=units.size)
    return (shared + rng.normal(size=units.size) > t_ref,
            shared + rng.normal(size=units.size) > t_run, units)


def tested(rng, pair) -> dict[str, float]:
    """Every p-value, the interval and the delta of one paired dataset."""
    ref, run, units = pair
    frames = [pd.DataFrame({"correct": c, "unit_id": units}) for c in (ref, run)]
    design = ClusterDesign.build(units, RESAMPLES, rng)
    sums = [design.sums(ACCURACY.features(f)[:, None, :]) for f in frames]
    delta = paired_delta(ACCURACY, *frames, design)
    return {"mid_p": delta.pvalue,
            "conventional": float(permutation_pvalues(ACCURACY.value, design, *sums,
                                                      mid_p=False)[0]),
            "mcnemar": mcnemar_exact(ref, run).pvalue, "delta": delta.statistic,
            "ci_low": delta.ci.low, "ci_high": delta.ci.high}


def rates(rows: list[dict]) -> dict[str, float]:
    frame = pd.DataFrame(rows)
    out = {f"rejects_{name}": float((frame[name] <= ALPHA).mean())
           for name in ("mid_p", "conventional", "mcnemar")}
    return {**out, "mean_delta_pp": 100 * float(frame["delta"].mean()),
            "sd_delta_pp": 100 * float(frame["delta"].std(ddof=1)), "datasets": len(frame)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--scale", type=float, default=1.0, help="share of the datasets")
    args = parser.parse_args()
    n = lambda k: max(20, int(k * args.scale))  # noqa: E731
    rng = np.random.default_rng(20261201)
    start = time.perf_counter()
    result: dict = {"alpha": ALPHA, "resamples": RESAMPLES, "command":
                    f"python benchmarks/primary_test_characteristics.py --out {args.out}"}
    result["clustered_null"] = {
        str(sd): rates([tested(rng, unit_effect_pair(rng, sd, 0.0)) for _ in range(n(1000))])
        for sd in (0.5, 1.0)}
    power = rates([tested(rng, unit_effect_pair(rng, 1.0, 0.25)) for _ in range(n(400))])
    z = power["mean_delta_pp"] / power["sd_delta_pp"]
    power["normal_approximation_power"] = float(stats.norm.cdf(z - 1.96) + stats.norm.cdf(-z - 1.96))
    result["clustered_power"] = {"unit_sd": 1.0, "shift_logit": 0.25, **power}
    result["independent"] = {}
    for m, rho_d in ((500, 0.10), (100, 0.20)):
        mde = paired_mde(m, rho_d)
        result["independent"][f"m{m}_rho{rho_d}"] = {
            "items": m, "rho_d": rho_d, "mde_pp": 100 * mde,
            "null": rates([tested(rng, independent_pair(rng, m, rho_d, 0.0)) for _ in range(n(2000))]),
            "at_mde": rates([tested(rng, independent_pair(rng, m, rho_d, mde))
                             for _ in range(n(2000))])}
    truth = stats.norm.cdf(-0.25 / np.sqrt(3.0)) - stats.norm.cdf(0.0)
    rows = [tested(rng, probit_pair(rng, 0.0, 0.25)) for _ in range(n(600))]
    covered = [r["ci_low"] <= truth <= r["ci_high"] for r in rows]
    result["coverage"] = {"true_delta_pp": 100 * truth, "level": 0.95, "datasets": len(rows),
                          "coverage": float(np.mean(covered))}
    result["seconds"] = time.perf_counter() - start
    write_json(args.out, result)


if __name__ == "__main__":
    main()
