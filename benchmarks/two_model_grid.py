"""Two real models x precisions x batch sizes on BBQ, CrowS-Pairs and TruthfulQA, one GPU.

SmolLM2-135M-Instruct (embedded) and Gemma-3-270M (``pretrained=gemma3-270m``), each in every
``--precisions`` x ``--batches`` condition, over ``--tasks`` (default: the 2,000-item BBQ
instrument by log-likelihood). Every (model, condition, task) is saved in lm-eval's layout as
``RUNS/TASK/MODEL_PRECISION_bBATCH`` (one task per folder, as ``lm-eval-ext analyze`` takes
them; ``--grid RUNS/*/*`` gives rank flips between the models across conditions). Per run:
the task's metrics, inference seconds, J/item, idle share, GPU UUID (JSON). The model is
loaded once per (model, precision); conditions a ``--budget-seconds`` does not reach are
listed under ``stopped``.

    python benchmarks/two_model_grid.py --out $OUT/two_model_grid.json --runs /tmp/grid
"""

from __future__ import annotations

import argparse
import gc

from _harness import (
    Deadline,
    command_line,
    environment,
    save_run,
    task_manager,
    use_generation,
    write_json,
)

TASKS = ["bbq_instrument_loglik"]
MODELS = {"smollm2-135m-instruct": None, "gemma3-270m": "gemma3-270m"}


def batch_size(text: str) -> int | str:
    """A ``--batches`` value: a positive integer or ``auto``."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive integer or auto")
    return int(text)


def run_task(lm, task: str, limit: int | None, folder: str) -> dict:
    """One task through a loaded model, saved in ``folder``; the row of its figures."""
    from lm_eval import simple_evaluate

    lm.reset_metering()
    results = simple_evaluate(model=lm, tasks=[task], task_manager=task_manager(), limit=limit,
                              log_samples=True, bootstrap_iters=0)
    samples = save_run(results, folder, folder.rsplit("/", 1)[-1])
    metrics, m = results["results"][task], results["config"]["metering"]
    items = len(samples[task])
    return {"task": task, "items": items,
            "metrics": {k.split(",")[0]: v for k, v in metrics.items()  # one filter per task
                        if "," in k and "_stderr," not in k and isinstance(v, int | float)},
            "inference_seconds": m["inference_seconds"], "energy_joules": m["energy_joules"],
            "j_per_item": None if m["energy_joules"] is None else m["energy_joules"] / items,
            "idle_share": m["idle_share"], "forward_share": m["forward_share"],
            "flags": m["flags"], "gpus": m["gpus"], "quantized_modules": m["quantized_modules"],
            "generation": m.get("generation")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", required=True, help="lm-eval output folders go here")
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--precisions", nargs="+", default=["bf16", "int8", "nf4"])
    parser.add_argument("--batches", nargs="+", type=batch_size, default=[64],
                        help="typed batch sizes (as `--batch_size N`) or auto (lm-eval's probe "
                             "for log-likelihood, the memory plan for generation), each a "
                             "condition")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--skip", nargs="*", default=[], metavar="PRECISION_bBATCH",
                        help="conditions left out, e.g. int8_b1")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--budget-seconds", type=float, default=480)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run")
    args = parser.parse_args()
    deadline = Deadline(args.budget_seconds)
    import torch

    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    rows: list[dict] = []
    stopped: list[str] = []
    payload = {"command": command_line("two_model_grid.py", args), "environment": environment(),
               "tasks": args.tasks, "runs": rows, "stopped": stopped}
    for label in args.models:
        for precision in args.precisions:
            lm = None
            for batch in args.batches:
                condition = f"{precision}_b{batch}"
                for task in args.tasks:
                    if condition in args.skip or deadline.left() < 45:
                        stopped.append(f"{label} {condition} {task}"
                                       + ("" if condition in args.skip else " (budget)"))
                        continue
                    if lm is None:
                        lm = HFMeteredLM(pretrained=MODELS[label], precision=precision,
                                         device=args.device, batch_size=str(batch))
                    lm.batch_size_per_gpu = batch  # typed or auto, for both request types
                    use_generation(lm, requested="fast", max_batch_size=None,
                                   batch_size_asked=None if batch == "auto" else batch)
                    row = {"model": label, "precision": precision, "batch_size": batch,
                           **run_task(lm, task, args.limit,
                                      f"{args.runs}/{task}/{label}_{condition}")}
                    rows.append(row)
                    print({k: row[k] for k in ("model", "precision", "batch_size", "task",
                                               "inference_seconds", "j_per_item")},
                          row["metrics"].get("acc"), flush=True)
                    write_json(args.out, payload)
            del lm
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
