"""Real GPU validation: the embedded model on BBQ under several precision/batch conditions.

Runs each condition in this process with hf-metered (metering on), saves the lm-eval output
folder per condition (results + samples, lm-eval layout) under ``OUT/runs/<condition>/`` and
writes one summary JSON, rewritten after every condition so a time-out loses nothing.

    python benchmarks/h200_validation.py --plan A --out $OUT/h200_validation_A.json --runs $OUT/runs
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass

from _harness import Deadline, environment, task_manager, write_json


@dataclass(frozen=True)
class Condition:
    name: str
    task: str
    precision: str
    batch_size: int | str
    estimate_s: float  # rough device seconds, from ../shared/notes/h200_timing.md


PLANS = {
    "A": [  # the 2,000-item instrument, log-likelihood path
        Condition("instrument_loglik_bf16_b1", "bbq_instrument_loglik", "bf16", 1, 200),
        Condition("instrument_loglik_bf16_b32", "bbq_instrument_loglik", "bf16", 32, 30),
        Condition("instrument_loglik_int8_b32", "bbq_instrument_loglik", "int8", 32, 60),
        Condition("instrument_loglik_nf4_b32", "bbq_instrument_loglik", "nf4", 32, 30),
    ],
    "B": [  # paper-style batch-1 quantised conditions on the 25% subset, then generation
        Condition("subset25_loglik_bf16_b1", "bbq_subset_25pct_loglik", "bf16", 1, 60),
        Condition("subset25_loglik_int8_b1", "bbq_subset_25pct_loglik", "int8", 1, 180),
        Condition("subset25_loglik_nf4_b1", "bbq_subset_25pct_loglik", "nf4", 1, 80),
        Condition("subset12p5_gen_bf16_b16", "bbq_subset_12p5pct", "bf16", 16, 50),
        Condition("subset12p5_gen_int8_b16", "bbq_subset_12p5pct", "int8", 16, 100),
        Condition("subset12p5_gen_nf4_b16", "bbq_subset_12p5pct", "nf4", 16, 50),
    ],
    # 2026-11-30 re-measurement after the BBQ bias-rule fix (task 2.0) and the metering fixes:
    # the answers behind every S_DIS/S_AMB figure, and generation with --batch_size auto.
    "D": [
        Condition("instrument_loglik_bf16_b32", "bbq_instrument_loglik", "bf16", 32, 30),
        Condition("instrument_loglik_int8_b32", "bbq_instrument_loglik", "int8", 32, 50),
        Condition("instrument_loglik_nf4_b32", "bbq_instrument_loglik", "nf4", 32, 30),
        Condition("subset25_gen_bf16_auto", "bbq_subset_25pct", "bf16", "auto", 120),
        Condition("subset25_loglik_bf16_b1", "bbq_subset_25pct_loglik", "bf16", 1, 60),
        Condition("subset25_loglik_nf4_b1", "bbq_subset_25pct_loglik", "nf4", 1, 80),
        Condition("subset12p5_gen_bf16_b16", "bbq_subset_12p5pct", "bf16", 16, 60),
    ],
    "E": [
        Condition("subset25_loglik_int8_b1", "bbq_subset_25pct_loglik", "int8", 1, 270),
        Condition("subset12p5_gen_int8_b16", "bbq_subset_12p5pct", "int8", 16, 200),
    ],
    "C": [  # the generative conditions that did not fit plan B's device call
        Condition("subset12p5_gen_int8_b16", "bbq_subset_12p5pct", "int8", 16, 100),
        Condition("subset12p5_gen_nf4_b16", "bbq_subset_12p5pct", "nf4", 16, 50),
    ],
}


def _summary(condition: Condition, results: dict, wall: float) -> dict:
    task_results = results["results"][condition.task]
    metering = results["config"]["metering"]
    n_items = results["n-samples"][condition.task]["effective"]
    joules = metering["energy_joules"]

    def metric(name: str):
        for key, value in task_results.items():
            if key.split(",")[0] == name:
                return value
        return None

    return {
        **asdict(condition), "n_items": n_items, "wall_seconds": wall,
        "acc": metric("acc"), "acc_parsed": metric("acc_parsed"),
        "acc_ambig": metric("acc_ambig"), "acc_disambig": metric("acc_disambig"),
        "bias_s_dis": metric("bias_s_dis"), "bias_s_amb": metric("bias_s_amb"),
        "parse_failure_rate": metric("parse_failure_rate"),
        "inference_seconds": metering["inference_seconds"],
        "forward_seconds": metering["forward_seconds"],
        "energy_joules": joules,
        "energy_joules_idle_corrected": metering["energy_joules_idle_corrected"],
        "energy_joules_idle_corrected_se": metering.get("energy_joules_idle_corrected_se"),
        "idle_share": metering.get("idle_share"), "forward_share": metering.get("forward_share"),
        "idle_power": metering.get("idle_power"),
        "batch_sizes_detected": metering.get("batch_sizes_detected"),
        "synced_devices": metering.get("synced_devices"),
        "task_flags": {t: v["flags"] for t, v in metering["per_task"].items()},
        "joules_per_item": None if joules is None else joules / n_items,
        "items_per_second": n_items / metering["inference_seconds"],
        "energy_source": metering["energy_source"], "flags": metering["flags"],
        "gpus": metering["gpus"], "quantized_modules": metering["quantized_modules"],
        "effective_precision": metering["precision"],
    }


def run_condition(condition: Condition, runs_dir: str, device: str = "cuda",
                  limit: int | None = None) -> dict:
    import torch
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker

    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(device=device, precision=condition.precision,
                     batch_size=condition.batch_size)
    tracker = EvaluationTracker(output_path=f"{runs_dir}/{condition.name}")
    started = time.perf_counter()
    results = simple_evaluate(
        model=lm, model_args=f"precision={condition.precision},batch_size={condition.batch_size}",
        tasks=[condition.task], task_manager=task_manager(), log_samples=True, limit=limit,
        evaluation_tracker=tracker, bootstrap_iters=1000)
    wall = time.perf_counter() - started
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    tracker.save_results_samples(task_name=condition.task, samples=samples[condition.task])
    del lm
    torch.cuda.empty_cache()
    return _summary(condition, results, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plan", choices=sorted(PLANS), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", required=True, help="folder for the lm-eval output folders")
    parser.add_argument("--budget-seconds", type=float, default=540)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the plan")
    parser.add_argument("--limit", type=int, help="items per condition (smoke tests only)")
    args = parser.parse_args()
    deadline = Deadline(args.budget_seconds)
    rows, skipped = [], []
    payload = {"command": f"python benchmarks/h200_validation.py --plan {args.plan} "
                          f"--out OUT/h200_validation_{args.plan}.json --runs OUT/runs",
               "environment": environment(), "conditions": rows, "skipped": skipped}
    for condition in PLANS[args.plan]:
        if deadline.left() < condition.estimate_s:
            skipped.append({**asdict(condition), "reason": "device-call time budget"})
            continue
        try:
            rows.append(run_condition(condition, args.runs, args.device, args.limit))
        except Exception as exc:  # record and go on: one failure must not lose the rest
            skipped.append({**asdict(condition), "reason": f"{type(exc).__name__}: {exc}"})
        print(rows[-1] if rows else skipped[-1], flush=True)
        write_json(args.out, payload)
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
