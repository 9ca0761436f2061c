"""CPU A/B of the fast path's decode: each batch decoded to its end vs batches pooled (JSON).

One loaded model (embedded, fp32, CPU), the headline task through ``lm_eval.simple_evaluate``,
alternating per round between ``sequential`` (a batch's last long answers are decoded alone
before the next batch starts: the generator's ``admit_at=0``) and ``pooled`` (the next batch's
rows join once at most ``CPU_ADMIT_AT`` rows still run: the default). Per run: inference and evaluation
seconds; per pair: identical texts.

    python benchmarks/cpu_pooled_ab.py --rounds 1 --out benchmarks/results/cpu_pooled_ab.json
"""

from __future__ import annotations

import argparse
import time

from _harness import (
    alternating,
    command_line,
    environment,
    task_manager,
    use_generation,
    write_json,
)

TASK = "bbq_subset_25pct"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--limit", type=int, help="items (default: all 500)")
    args = parser.parse_args()
    from lm_eval import simple_evaluate

    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.generation.settings import CPU_ADMIT_AT, CPU_BATCH

    pooled_at = CPU_ADMIT_AT
    variants = {"sequential": 0, "pooled": pooled_at}
    lm = HFMeteredLM(device="cpu", precision="fp32")
    runs, texts = [], {}
    payload = {"command": command_line("cpu_pooled_ab.py", args), "environment": environment(),
               "task": TASK, "cpu_batch": CPU_BATCH, "admit_at": pooled_at,
               "runs": runs}
    for round_index, name in alternating(list(variants), args.rounds):
        use_generation(lm, admit_at=variants[name])
        lm.reset_metering()
        started = time.perf_counter()
        results = simple_evaluate(model=lm, tasks=[TASK], task_manager=task_manager(),
                                  log_samples=True, limit=args.limit, bootstrap_iters=0)
        wall = time.perf_counter() - started
        out = [s["resps"][0][0] for s in results["samples"][TASK]]
        texts.setdefault(name, out)
        m = results["config"]["metering"]
        runs.append({"variant": name, "round": round_index, "items": len(out),
                     "inference_seconds": m["inference_seconds"],
                     "evaluate_wall_seconds": wall,
                     "metrics": {k: v for k, v in results["results"][TASK].items()
                                 if isinstance(v, float) and "stderr" not in k}})
        print(name, round(m["inference_seconds"], 1), flush=True)
        if len(texts) == 2:
            payload["identical_texts"] = sum(a == b for a, b in zip(*texts.values(),
                                                                    strict=True))
        write_json(args.out, payload)


if __name__ == "__main__":
    main()
