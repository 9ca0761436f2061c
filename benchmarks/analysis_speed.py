"""Analysis speed at paper scale: 7 runs x 2,000 items, 10k cluster-bootstrap resamples,
1,000 Monte Carlo draws per subset size, all figures (goal: <= 10 s on 2 cores).

Runs are written in lm-eval's format with simulated answers (lm_eval_ext.analysis.synthetic)
on the real 2,000-item instrument. Side by side, the same overall accuracy CI is computed by a
naive per-resample loop (the baseline), timed on 200 resamples and scaled to 10k.

    LM_EVAL_EXT_DATA=../shared/data python benchmarks/analysis_speed.py \
        --out benchmarks/results/analysis_speed.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from _harness import environment, write_json


def naive_bootstrap_seconds(items, n_resamples: int, rng) -> float:
    """Baseline: resample natural units in a Python loop, recompute accuracy each time."""
    units = items["unit_id"].unique()
    by_unit = {u: g["correct"].to_numpy() for u, g in items.groupby("unit_id")}
    started = time.perf_counter()
    for _ in range(n_resamples):
        pick = rng.choice(units, size=len(units), replace=True)
        np.concatenate([by_unit[u] for u in pick]).mean()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--bootstrap", type=int, default=10_000)
    parser.add_argument("--mc-draws", type=int, default=1_000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from lm_eval_ext.analysis import analyze, load_runs, write_outputs
    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.data.instrument import load_membership

    rng = np.random.default_rng(0)
    rows = load_membership("instrument").rows
    work = Path(tempfile.mkdtemp(prefix="analysis_speed_"))
    base = simulate_predictions(rows, 0.6, rng)
    paths = []
    for index in range(args.runs):
        preds = base if index == 0 else simulate_predictions(rows, 0.6 - 0.02 * index, rng,
                                                              base=base, flip_rate=0.15)
        write_run(work / f"run{index}", "bbq_instrument_loglik", rows, preds,
                  precision="bf16" if index == 0 else f"cfg{index}",
                  energy_joules=20000.0 / (index + 1), inference_seconds=170.0 / (index + 1))
        paths.append(work / f"run{index}")

    started = time.perf_counter()
    result = analyze(paths[0], paths[1:], n_resamples=args.bootstrap, mc_draws=args.mc_draws,
                     seed=0, progress=False)
    analysed = time.perf_counter()
    outputs = write_outputs(result, work / "report")
    finished = time.perf_counter()
    total = finished - started

    reference_items = load_runs([paths[0]])[0].items
    naive_200 = naive_bootstrap_seconds(reference_items, 200, rng)
    naive_per_ci = naive_200 * args.bootstrap / 200
    n_cis = len(result.deltas)
    write_json(args.out, {
        "benchmark": "analysis speed at paper scale",
        "command": "LM_EVAL_EXT_DATA=../shared/data python benchmarks/analysis_speed.py "
                   f"--runs {args.runs} --bootstrap {args.bootstrap} --mc-draws {args.mc_draws} "
                   f"--out {args.out}",
        "runs": args.runs, "items_per_run": len(rows), "bootstrap_resamples": args.bootstrap,
        "mc_draws_per_size": args.mc_draws, "delta_rows": n_cis,
        "figures": sorted(p.name for k, p in outputs.items() if p.suffix == ".png"),
        "seconds_total": total, "seconds_analyze": analysed - started,
        "seconds_write_outputs_and_figures": finished - analysed,
        "goal_seconds": 10.0, "meets_goal": total <= 10.0,
        "baseline_naive_loop_seconds_per_ci_10k": naive_per_ci,
        "baseline_naive_loop_seconds_all_cis": naive_per_ci * n_cis,
        "speedup_vs_naive_loop": naive_per_ci * n_cis / (analysed - started),
        "environment": environment(),
    })
    print(f"total {total:.2f} s for {n_cis} CIs (naive loop would take "
          f"{naive_per_ci * n_cis:.0f} s)")


if __name__ == "__main__":
    main()
