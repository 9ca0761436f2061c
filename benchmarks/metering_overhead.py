"""P1: throughput of hf-metered relative to plain hf (same model, requests, batch size).

Both models are loaded once in this process; the same prebuilt request list is timed
alternately (hf, metered, hf, metered, ...) after one warm-up call each, and the ratio of
median times gives metered throughput / hf throughput (goal >= 0.99).

    python benchmarks/metering_overhead.py --device cpu --out benchmarks/results/p1_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import statistics
import time

from _harness import build_requests, environment, sync, write_json
from scipy import stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--task", default="bbq_subset_12p5pct_loglik")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from lm_eval.models.huggingface import HFLM

    from lm_eval_ext.backends.embedded_model import ensure_checkpoint
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    checkpoint = str(ensure_checkpoint())
    common = {"device": args.device, "batch_size": args.batch_size, "dtype": args.dtype}
    models = {"hf": HFLM(pretrained=checkpoint, **common),
              "hf-metered": HFMeteredLM(pretrained=checkpoint, **common)}
    requests = build_requests(args.task, args.limit)
    times: dict[str, list[float]] = {name: [] for name in models}
    answers = {}
    for round_index in range(args.rounds + 1):  # round 0 is the warm-up
        for name, lm in models.items():
            sync(args.device)
            started = time.perf_counter()
            answers[name] = lm.loglikelihood(requests, disable_tqdm=True)
            sync(args.device)
            if round_index:
                times[name].append(time.perf_counter() - started)
    max_diff = max(abs(a[0] - b[0]) for a, b in zip(answers["hf"], answers["hf-metered"], strict=False))
    median = {name: statistics.median(t) for name, t in times.items()}
    ratio = median["hf"] / median["hf-metered"]
    paired = [h / m for h, m in zip(times["hf"], times["hf-metered"], strict=False)]
    half_width = (stats.t.ppf(0.975, len(paired) - 1) * statistics.stdev(paired)
                  / len(paired) ** 0.5)
    write_json(args.out, {
        "benchmark": "P1 metering overhead",
        "command": " ".join(["python benchmarks/metering_overhead.py", *[
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()]]),
        "task": args.task, "n_requests": len(requests), "batch_size": args.batch_size,
        "device": args.device, "rounds": args.rounds, "seconds": times,
        "median_seconds": median,
        "requests_per_second": {n: len(requests) / m for n, m in median.items()},
        "throughput_ratio_metered_over_hf": ratio,
        "paired_round_ratios": paired,
        "paired_ratio_mean_ci95": [statistics.mean(paired) - half_width,
                                   statistics.mean(paired) + half_width],
        "goal": ">= 0.99",
        "meets_goal": ratio >= 0.99,
        "max_abs_loglikelihood_difference": max_diff,
        "metering": models["hf-metered"].metering_info(),
        "environment": environment(),
    })
    print(f"throughput ratio metered/hf = {ratio:.4f} (paired mean "
          f"{statistics.mean(paired):.4f} +- {half_width:.4f})")


if __name__ == "__main__":
    main()
