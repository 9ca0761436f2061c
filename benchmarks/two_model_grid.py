"""Two real models x three precisions on the 2,000-item BBQ instrument (log-likelihood), one GPU.

SmolLM2-135M-Instruct (embedded) and Gemma-3-270M (``pretrained=gemma3-270m``), each in bf16,
int8 and nf4 at one batch size, every run saved in lm-eval's layout for ``lm-eval-ext analyze
--grid`` (rank flips between the models across precisions). Per run: accuracy, bias scores,
inference seconds, J/item, idle share, GPU UUID (JSON).

    python benchmarks/two_model_grid.py --out $OUT/two_model_grid.json --runs /tmp/grid
"""

from __future__ import annotations

import argparse
import gc

from _harness import Deadline, command_line, environment, save_run, task_manager, write_json

TASK = "bbq_instrument_loglik"
MODELS = {"smollm2-135m-instruct": None, "gemma3-270m": "gemma3-270m"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", required=True, help="lm-eval output folders go here")
    parser.add_argument("--precisions", nargs="+", default=["bf16", "int8", "nf4"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--budget-seconds", type=float, default=480)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run")
    args = parser.parse_args()
    deadline = Deadline(args.budget_seconds)
    import torch
    from lm_eval import simple_evaluate

    from lm_eval_ext.model_wrappers.hf_metered import HFMeteredLM

    rows: list[dict] = []
    payload = {"command": command_line("two_model_grid.py", args), "environment": environment(),
               "task": TASK, "runs": rows}
    for label, pretrained in MODELS.items():
        for precision in args.precisions:
            if deadline.left() < 60:
                payload["stopped"] = f"budget: {label} {precision} not run"
                break
            lm = HFMeteredLM(pretrained=pretrained, precision=precision, device=args.device,
                             batch_size=args.batch)
            results = simple_evaluate(model=lm, tasks=[TASK], task_manager=task_manager(),
                                      limit=args.limit, log_samples=True, bootstrap_iters=0)
            samples = save_run(results, f"{args.runs}/{label}_{precision}",
                               f"{label}_{precision}")
            metrics, m = results["results"][TASK], results["config"]["metering"]
            items = len(samples[TASK])
            rows.append({"model": label, "precision": precision, "batch_size": args.batch,
                         "items": items, "accuracy": metrics.get("acc,none"),
                         "bias_s_dis": metrics.get("bias_s_dis,none"),
                         "bias_s_amb": metrics.get("bias_s_amb,none"),
                         "inference_seconds": m["inference_seconds"],
                         "energy_joules": m["energy_joules"],
                         "j_per_item": None if m["energy_joules"] is None
                         else m["energy_joules"] / items,
                         "idle_share": m["idle_share"], "flags": m["flags"],
                         "gpus": m["gpus"], "quantized_modules": m["quantized_modules"],
                         "load_seconds": m["load_seconds"]})
            print({k: rows[-1][k] for k in ("model", "precision", "accuracy", "j_per_item")},
                  flush=True)
            write_json(args.out, payload)
            del lm
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
