"""Generation throughput: hf-metered's standard loop vs its fast path, side by side (JSON).

Paths: lm-eval's loop (``standard``), the fast path with CUDA-graph decode where it holds
(``fast``) or with the dynamic cache (``fast_eager``), and transformers' own ``generate`` in
the fast path's batches with its dynamic or (compiled) static cache (``generate``,
``generate_static``). One loaded model (the embedded one, or a random-init ``--size``); every
(path, batch size) condition runs once per round, the order rotating
between rounds; each run is the headline task through ``lm_eval.simple_evaluate`` with its own
metering windows. Per run: inference seconds, joules (and J/item, J/new token), idle and forward
share, new tokens/s and items/s; per condition the medians, and the share of items whose text
equals the first condition's (in bf16, set beside the standard loop's own batch-size
differences). The JSON is rewritten after every run, so a time-out loses nothing.

    python benchmarks/gen_throughput.py --device cuda --out OUT/gen_throughput.json
    python benchmarks/gen_throughput.py --device cpu --precision fp32 --limit 8 --rounds 1 \\
        --conditions standard@1,standard@8,fast@auto --out /tmp/gen_throughput_cpu.json  # smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import time

from _harness import (
    Deadline,
    command_line,
    environment,
    save_run,
    task_manager,
    use_generation,
    write_json,
)
from energy_sizes import random_init_checkpoint
from plain_generate import generate_as_decode

TASK = "bbq_subset_25pct"
#: paths that decode with transformers' own ``generate`` in the fast path's batches (its
#: planning, encoding and cut stay; only the decode differs): the dynamic cache, and the
#: static cache that ``generate`` compiles on a GPU (the issue's "plain transformers" modes)
PLAIN_GENERATE = {"generate": None, "generate_static": "static"}
#: a later round starts only if each condition's last evaluate time, times this, fits the budget
ROUND_MARGIN = 1.3


def run_once(lm, path: str, batch_size: int | str, limit: int | None,
             save_to: str | None = None) -> tuple[dict, list[str]]:
    """One metered run of the headline task; returns its row and its generated texts.

    ``save_to``: also write lm-eval's output folder (results + samples) there, for
    ``lm-eval-ext analyze`` (the samples hold benchmark text: never commit them).
    """
    from lm_eval import simple_evaluate

    from lm_eval_ext.backends.model_args import explicit_batch_size

    plain = path == "fast_eager" or path in PLAIN_GENERATE
    mode, graphs = ("fast", False) if plain else (path, True)
    use_generation(lm, requested=mode, batch_size_asked=explicit_batch_size(str(batch_size)),
                   max_batch_size=None, cuda_graphs=graphs)
    lm.batch_size_per_gpu = batch_size
    lm.reset_metering()
    started = time.perf_counter()
    swap = (generate_as_decode(lm, PLAIN_GENERATE[path]) if path in PLAIN_GENERATE
            else contextlib.nullcontext())
    with swap:
        results = simple_evaluate(model=lm, tasks=[TASK], task_manager=task_manager(),
                                  log_samples=True, limit=limit, bootstrap_iters=0)
    wall = time.perf_counter() - started
    texts = [s["resps"][0][0] for s in results["samples"][TASK]]
    if save_to:
        save_run(results, save_to, f"{path}_b{batch_size}")
    new_tokens = sum(len(lm.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    m = results["config"]["metering"]
    seconds, joules = m["inference_seconds"], m["energy_joules"]
    row = {"path": path, "batch_size": batch_size, "items": len(texts), "new_tokens": new_tokens,
           "inference_seconds": seconds, "evaluate_wall_seconds": wall,
           "items_per_s": len(texts) / seconds, "new_tokens_per_s": new_tokens / seconds,
           "energy_joules": joules, "j_per_item": None if joules is None else joules / len(texts),
           "j_per_new_token": None if joules is None else joules / new_tokens,
           "energy_joules_idle_corrected": m["energy_joules_idle_corrected"],
           "idle_share": m["idle_share"], "forward_share": m["forward_share"],
           "flags": m["flags"], "gpus": m["gpus"], "generation": m["generation"],
           "batch_sizes_detected": m["batch_sizes_detected"]}
    return row, texts


def condition_key(path: str, batch: int | str) -> str:
    """A condition's name in the summary, the texts and the JSON: ``PATH@BATCH``."""
    return f"{path}@{batch}"


def summarise(runs: list[dict], texts: dict[str, list[str]], reference: str) -> dict:
    """Medians per condition and the identical-text share against ``reference``.

    Conditions with fewer items than the reference are compared on their items, and one with
    more on the reference's (``compared_items``): a ``--limit`` keeps the task's first items.
    """
    summary = {}
    for key in dict.fromkeys(condition_key(r["path"], r["batch_size"]) for r in runs):
        rows = [r for r in runs if condition_key(r["path"], r["batch_size"]) == key]
        medians = {f: statistics.median(r[f] for r in rows if r[f] is not None)
                   for f in ("inference_seconds", "items_per_s", "new_tokens_per_s", "j_per_item",
                             "j_per_new_token", "idle_share", "forward_share")
                   if any(r[f] is not None for r in rows)}
        compared = min(len(texts[key]), len(texts[reference]))  # the first items: --limit's
        same = sum(a == b for a, b in zip(texts[key][:compared], texts[reference][:compared],
                                          strict=True))
        summary[key] = {**medians, "rounds": len(rows), "identical_to_" + reference: same,
                        "items": len(texts[key])}
        if compared < len(texts[key]):
            summary[key]["compared_items"] = compared
    return summary


def whole_round_fits(last_seconds: dict[str, float], keys: list[str], seconds_left: float) -> bool:
    """Whether every condition of a round fits the time left, ``ROUND_MARGIN`` times its last run.

    A condition that has not run yet (a round 0 cut short) has no estimate: the round does not
    fit. So rounds after the first are whole and every condition keeps the same count.
    """
    if any(key not in last_seconds for key in keys):
        return False
    return ROUND_MARGIN * sum(last_seconds[key] for key in keys) < seconds_left


def parse_conditions(text: str, limit: int | None) -> list[tuple[str, int | str, int | None]]:
    """``PATH@BATCH[:ITEMS],...`` as (path, batch, items); items default to ``limit``."""
    conditions = []
    for condition in text.split(","):
        path, _, rest = condition.partition("@")
        batch, colon, items = rest.partition(":")
        if not (path and batch) or not (batch == "auto" or batch.isdigit()) or (
                colon and not (items.isdigit() and int(items) > 0)):
            raise SystemExit(f"gen_throughput: bad condition {condition!r}; "
                             "write PATH@BATCH or PATH@BATCH:ITEMS (e.g. fast@32, standard@1:30)")
        conditions.append((path, batch if batch == "auto" else int(batch),
                           int(items) if items else limit))
    keys = [condition_key(p, b) for p, b, _ in conditions]
    if len(set(keys)) < len(keys):
        raise SystemExit(f"gen_throughput: a condition is named twice in {text!r}")
    return conditions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--conditions", default="standard@32,standard@512,fast@auto",
                        help="PATH@BATCH, comma separated; PATH: standard, fast, fast_eager "
                             "(fast with cuda_graphs=false), generate or generate_static "
                             "(transformers' generate in the fast path's batches); BATCH: a "
                             "typed size or auto (the fast path plans its batches; lm-eval's "
                             "loop its probe; before 2026-12-01 evening, fast@1 meant "
                             "fast@auto); :ITEMS after the batch runs that condition on the task's "
                             "first ITEMS items instead of --limit (e.g. standard@1:30); the "
                             "first is the reference of the identical-text share")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", action="store_true",
                        help="one untimed run of every condition first (kernels, autotuning, "
                             "compilation), so no round carries the process's warm-up")
    parser.add_argument("--warmup-items", type=int,
                        help="the warm-up runs each condition on at most this many items "
                             "(default: its own; a compiled mode that meets a new shape later "
                             "compiles in a round)")
    parser.add_argument("--limit", type=int, help="items (default: all 500)")
    parser.add_argument("--budget-seconds", type=float, default=540,
                        help="wall seconds from the start: round 0's runs start while a minute is "
                             "left, a later round only if all of it fits (whole rounds)")
    parser.add_argument("--runs", help="save round 0's lm-eval output folders here (PATH_bN/)")
    parser.add_argument("--size", help="a random-init shape of energy_sizes.py (e.g. llama-8b) "
                                       "instead of the embedded model: speed and energy only")
    parser.add_argument("--workdir", default="/tmp/gen_throughput",
                        help="where --size's checkpoint is saved (removed at the end)")
    args = parser.parse_args()
    deadline = Deadline(args.budget_seconds)
    conditions = parse_conditions(args.conditions, args.limit)
    pretrained, model = None, {"model": "embedded SmolLM2-135M-Instruct"}
    if args.size:
        pretrained, model = random_init_checkpoint(args.size, args.workdir, args.device)
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(pretrained=pretrained, device=args.device, precision=args.precision,
                     batch_size=1)
    keys = [condition_key(path, batch) for path, batch, _ in conditions]
    reference = keys[0]
    runs, texts = [], {}
    payload = {"command": command_line("gen_throughput.py", args),
               "environment": environment(), "task": TASK, **model, "reference": reference,
               "runs": runs}
    if args.warmup:
        cap = args.warmup_items
        for path, batch, items in conditions:
            run_once(lm, path, batch, cap if items is None else min(items, cap or items))
        payload["warmup"] = "one untimed run per condition before the rounds"
    last_seconds: dict[str, float] = {}
    for round_index in range(args.rounds):
        shift = round_index % len(conditions)
        order = conditions[shift:] + conditions[:shift]
        if round_index and not whole_round_fits(last_seconds, keys, deadline.left()):
            payload["stopped"] = f"device-call time budget: round {round_index} would not fit"
            break
        for path, batch, items in order:
            if deadline.left() < 60:  # round 0 (no estimates yet), or a round that ran long
                payload["stopped"] = "device-call time budget"
                break
            save = f"{args.runs}/{path}_b{batch}" if args.runs and round_index == 0 else None
            row, generated = run_once(lm, path, batch, items, save)
            runs.append({**row, "round": round_index})
            key = condition_key(path, batch)
            last_seconds[key] = row["evaluate_wall_seconds"]
            texts.setdefault(key, generated)
            print({k: row[k] for k in ("path", "batch_size", "inference_seconds", "j_per_item",
                                       "new_tokens_per_s")}, flush=True)
            if reference in texts:
                payload["summary"] = summarise(runs, texts, reference)
            write_json(args.out, payload)
    write_json(args.out, payload)
    if args.size:
        shutil.rmtree(pretrained, ignore_errors=True)


if __name__ == "__main__":
    main()
