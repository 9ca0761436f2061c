"""P3: energy of bf16 / int8 / nf4 at realistic model sizes (random weights: speed and energy only).

The embedded 135M model leaves an H200 idle most of the time, so it cannot show the
compute-bound regime. Here randomly initialised models are built from the configurations of
real architectures, with the embedded tokenizer's vocabulary (49,152), saved as ordinary
checkpoints, and loaded by ``hf-metered`` like any checkpoint (bitsandbytes quantises them at
load). Each (size, precision) is loaded once and runs, on the same BBQ instrument items:

* log-likelihood (3 options per item, lm-eval's standard path) at batch 1 and a large batch;
* generation of exactly ``--new-tokens`` tokens (``min_new_tokens`` = ``max_gen_toks``) at
  batch 1 and a large batch.

Per run: items/s, J/item (raw and idle-corrected), idle share and forward share, from
hf-metered's own ``config.metering``; per size, the int8/bf16 and nf4/bf16 J/item ratios.
The answers of random weights mean nothing: every figure is labelled "random weights: speed
and energy only".

    python benchmarks/energy_sizes.py --sizes smollm2-1.7b llama-8b --out $OUT/energy_sizes.json
"""

from __future__ import annotations

import argparse
import gc
import shutil
import time
from pathlib import Path

from _harness import (
    Deadline,
    command_line,
    environment,
    task_manager,
    use_generation,
    write_json,
)

LABEL = "random weights: speed and energy only"
#: architecture fields of real models' configs (vocabulary: the embedded tokenizer's)
SIZES = {
    "smollm2-135m": {},  # the embedded model's own config
    "smollm2-1.7b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
                     "num_attention_heads": 32, "num_key_value_heads": 32,
                     "rope_theta": 130000.0, "tie_word_embeddings": True},
    "llama-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
                 "tie_word_embeddings": False},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2},  # CPU check of the script
}


def build_checkpoint(size: str, folder: Path, device: str, seed: int = 0) -> dict:
    """A randomly initialised model of ``size`` saved (bf16) with the embedded tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from lm_eval_ext.backends.embedded_model import ensure_checkpoint

    embedded = ensure_checkpoint()
    config = AutoConfig.from_pretrained(embedded)
    for key, value in SIZES[size].items():
        setattr(config, key, value)
    config.head_dim = config.hidden_size // config.num_attention_heads
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(embedded).save_pretrained(folder)
    del model
    gc.collect()
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return {"parameters": n_params, "config": {k: getattr(config, k) for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "vocab_size", "tie_word_embeddings")}}


def random_init_checkpoint(size: str, workdir: str | Path, device: str) -> tuple[str, dict]:
    """A random-init checkpoint of ``energy_sizes.py``'s ``size`` under ``workdir``.

    Built in a child process, so this process has not touched CUDA yet (an engine that forks
    its workers can still start). Returns its folder and the model's description for the JSON.
    """
    import multiprocessing

    folder = Path(workdir) / size
    started = time.perf_counter()
    child = multiprocessing.get_context("spawn").Process(target=build_checkpoint,
                                                         args=(size, folder, device))
    child.start()
    child.join()
    if child.exitcode:
        raise SystemExit(f"building the {size} checkpoint failed ({child.exitcode})")
    return str(folder), {"model": f"random-init {size}", "label": LABEL,
                         "build_seconds": time.perf_counter() - started}


def measure(lm, task: str, limit: int, batch: int, gen_kwargs: str | None,
            generation: str = "standard") -> dict:
    """One condition on an already loaded model: hf-metered's own figures for it.

    One batch of the condition runs first, untimed (kernels, allocator, autotuning), so the
    first precision loaded does not carry the process's cold start. Generation runs on
    ``generation``'s path at exactly ``batch`` sequences per batch.
    """
    from lm_eval import simple_evaluate

    lm.batch_size_per_gpu = batch
    use_generation(lm, requested=generation, batch_size_asked=batch, max_batch_size=None)
    simple_evaluate(model=lm, tasks=[task], task_manager=task_manager(),  # warm-up, untimed
                    limit=max(2, min(limit, batch)), gen_kwargs=gen_kwargs, bootstrap_iters=0)
    lm.reset_metering()
    out = simple_evaluate(model=lm, tasks=[task], task_manager=task_manager(), limit=limit,
                          gen_kwargs=gen_kwargs, bootstrap_iters=0)
    metering = out["config"]["metering"]
    window = metering["per_task"][task]
    seconds, joules = window["inference_seconds"], window["energy_joules"]
    corrected = window["energy_joules_idle_corrected"]
    return {"task": task, "items": limit, "batch_size": batch, "gen_kwargs": gen_kwargs,
            "inference_seconds": seconds, "items_per_s": limit / seconds,
            "energy_joules": joules, "j_per_item": joules / limit if joules else None,
            "j_per_item_idle_corrected": corrected / limit if corrected is not None else None,
            "idle_share": window["idle_share"], "forward_share": window["forward_share"],
            "flags": window["flags"], "precision": metering["precision"],
            "quantized_modules": metering["quantized_modules"], "gpus": metering["gpus"],
            "idle_watts": (metering["idle_power"] or {}).get("watts"), "label": LABEL,
            "generation": metering["generation"] if gen_kwargs else None}


def conditions(args) -> list[tuple[str, str, int, int, str | None]]:
    """(name, task, items, batch, gen_kwargs) in the order they run."""
    fixed = (f"max_gen_toks={args.new_tokens},min_new_tokens={args.new_tokens},"
             "until=NO_STOP_SEQUENCE_7f3a")  # only the token count ends a generation
    return [("loglik_b1", "bbq_instrument_loglik", args.loglik_items_b1, 1, None),
            (f"loglik_b{args.large_batch}", "bbq_instrument_loglik", args.loglik_items_large,
             args.large_batch, None),
            ("gen_b1", "bbq_instrument", args.gen_items_b1, 1, fixed),
            (f"gen_b{args.gen_batch}", "bbq_instrument", args.gen_items_large, args.gen_batch,
             fixed)]


def ratios(rows: list[dict]) -> dict:
    """Per size and condition: J/item (raw and idle-corrected) of int8 and nf4 over bf16."""
    out: dict = {}
    for row in rows:
        if row["precision_requested"] == "bf16":
            continue
        base = next((r for r in rows if r["size"] == row["size"]
                     and r["condition"] == row["condition"]
                     and r["precision_requested"] == "bf16"), None)
        if base is None:
            continue
        key = f"{row['size']}/{row['condition']}/{row['precision_requested']}_over_bf16"
        out[key] = {metric: (row[metric] / base[metric] if row[metric] and base[metric]
                             else None)
                    for metric in ("j_per_item", "j_per_item_idle_corrected", "items_per_s")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["smollm2-1.7b", "llama-8b"],
                        choices=list(SIZES))
    parser.add_argument("--precisions", nargs="+", default=["bf16", "int8", "nf4"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--loglik-items-b1", type=int, default=40)
    parser.add_argument("--loglik-items-large", type=int, default=256)
    parser.add_argument("--large-batch", type=int, default=64)
    parser.add_argument("--gen-items-b1", type=int, default=8)
    parser.add_argument("--gen-items-large", type=int, default=64)
    parser.add_argument("--gen-batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--generation", choices=["standard", "fast"], default="standard",
                        help="hf-metered's generation path (the committed P3 figures: standard;"
                             " fast falls back to it for min_new_tokens, recorded per row)")
    parser.add_argument("--workdir", default="/tmp/energy_sizes")
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    deadline = Deadline(args.budget_s)

    import torch

    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    rows, built = [], {}
    payload = {"benchmark": "P3 energy at realistic sizes", "label": LABEL,
               "command": command_line("energy_sizes.py", args),
               "environment": environment(), "models": built, "runs": rows}
    for size in args.sizes:
        folder = Path(args.workdir) / size
        built[size] = build_checkpoint(size, folder, args.device)
        for precision in args.precisions:
            if deadline.left() < 60:
                payload["stopped"] = f"budget: {size} {precision} not run"
                break
            lm = HFMeteredLM(pretrained=str(folder), precision=precision, device=args.device,
                             batch_size=1, idle_seconds=3)
            for name, task, items, batch, gen_kwargs in conditions(args):
                if deadline.left() < 30:
                    break
                row = {"size": size, "condition": name, "precision_requested": precision,
                       **measure(lm, task, items, batch, gen_kwargs, args.generation)}
                rows.append(row)
                print({k: row[k] for k in ("size", "condition", "precision", "items_per_s",
                                           "j_per_item", "idle_share")}, flush=True)
                payload["ratios"] = ratios(rows)
                write_json(args.out, payload)
            del lm
            gc.collect()
            torch.cuda.empty_cache() if torch.cuda.is_available() else None
        shutil.rmtree(folder, ignore_errors=True)
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
