"""Generation paths side by side in one process on one loaded model (JSON).

Variants, each run through hf-metered's ``generate_until`` in its own metering window, so
batching, stop sequences and lm-eval's post-processing are the same for all:

* ``public``: the default fast path (transformers' public cache API, torch's CUDA graphs);
* ``previous``: the same path with the decode modules of an earlier commit (``--previous DIR``,
  written by ``--export-previous COMMIT DIR`` from git: the path that wrote into transformers'
  cache layers, fused its norms and registered its own attention kernel);
* ``generate``: transformers' ``model.generate`` (dynamic cache, stop strings, greedy) on the
  same length-sorted batches (``plain_generate.py``);
* ``generate_static``: ``model.generate(cache_implementation="static")`` on those batches
  (transformers compiles its decode step; the first run pays the compilation);
* ``eager``: the fast path without its CUDA-graph decode (the dynamic cache, one eager forward
  per step, finished rows leaving: the path of ``cuda_graphs=false``).

Each variant is a setting of the generator (``GenerationSettings``: ``cuda_graphs``,
``decoders``), changed on the one loaded model, not a patch of the package.

Variants alternate over ``--rounds``; each run records inference seconds, the texts' tokens
per inference second, J/item, idle and forward share, and the texts identical to the first
variant's; ``after_first_run`` sets each variant's first run (its compile or capture) apart
from the median of the later ones. The JSON is rewritten after every run.

    python benchmarks/generation_side_by_side.py --export-previous add6719 /tmp/previous
    python benchmarks/generation_side_by_side.py --previous /tmp/previous --rounds 3 \\
        --out $OUT/side_by_side_headline.json
    python benchmarks/generation_side_by_side.py --previous /tmp/previous --size llama-8b \\
        --limit 64 --batch-size 64 --variants public,previous,generate --out $OUT/8b_64.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _harness import (
    alternating,
    build_requests,
    command_line,
    environment,
    generating,
    metered_generation,
    write_json,
)
from energy_sizes import random_init_checkpoint
from plain_generate import generate_as_decode

#: the decode modules of the previous path, as they were at the exported commit
PREVIOUS = {"greedy_decode": "lm_eval_ext/model_wrappers/greedy_decode.py",
            "static_decode": "lm_eval_ext/model_wrappers/static_decode.py"}


def export_previous(commit: str, folder: Path) -> None:
    """The decode modules at ``commit`` under ``folder``, importing each other by file."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in PREVIOUS.items():
        text = subprocess.run(["git", "show", f"{commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout
        text = re.sub(r"lm_eval_ext\.model_wrappers\.greedy_decode", "previous_greedy_decode",
                      text)
        (folder / f"previous_{name}.py").write_text(text)
    (folder / "COMMIT").write_text(commit + "\n")


def load_previous(folder: Path) -> Any:
    """The previous ``static_decode`` module (its ``greedy_decode`` importable beside it)."""
    sys.path.insert(0, str(folder))
    return importlib.import_module("previous_static_decode")


def previous_decoders(static: Any):
    """The previous path's decode functions (``static``: its ``static_decode`` module)."""
    from lm_eval_ext.generation.settings import Decoders

    greedy = sys.modules["previous_greedy_decode"]
    return Decoders(eager=greedy.pooled_greedy_decode, graphed=static.static_greedy_decode,
                    graph_problem=static.static_decode_problem, graphs=static.DecodeGraphs)


def after_first_run(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant: its first run apart (a compile, a capture), the median of the later ones.

    ``public_share_of_fastest``: the default path's tokens/s after the first run over the
    fastest variant's (1.0: it is the fastest).
    """
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(row["variant"] for row in rows):
        runs = [row for row in rows if row["variant"] == name]
        later = runs[1:]
        out[name] = {"first_run_seconds": runs[0]["inference_seconds"],
                     "later_runs": len(later),
                     "later_seconds_median": statistics.median(
                         r["inference_seconds"] for r in later) if later else None,
                     "later_tokens_per_second_median": statistics.median(
                         r["tokens_per_second"] for r in later) if later else None}
    rates = {n: v["later_tokens_per_second_median"] for n, v in out.items()
             if v["later_tokens_per_second_median"]}
    if "public" in rates:
        out["public"]["public_share_of_fastest"] = rates["public"] / max(rates.values())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--export-previous", nargs=2, metavar=("COMMIT", "DIR"))
    parser.add_argument("--previous", type=Path, help="a folder from --export-previous")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--variants", default="public,previous,generate,generate_static")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, help="items (default: all 500)")
    parser.add_argument("--batch-size", default="auto", help="a typed size, or auto (planned)")
    parser.add_argument("--size", help="a random-init shape of energy_sizes.py (e.g. llama-8b)")
    parser.add_argument("--workdir", default="/tmp/side_by_side")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script")
    args = parser.parse_args()
    if args.export_previous:
        export_previous(args.export_previous[0], Path(args.export_previous[1]))
        return
    names = args.variants.split(",")
    if "previous" in names and args.previous is None:
        parser.error("the previous variant needs --previous DIR (from --export-previous)")
    pretrained, model = None, {"model": "embedded SmolLM2-135M-Instruct"}
    if args.size:
        pretrained, model = random_init_checkpoint(args.size, args.workdir, args.device)
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(pretrained=pretrained, device=args.device, precision=args.precision,
                     batch_size=args.batch_size)
    variants = {"public": contextlib.nullcontext, "generate": lambda: generate_as_decode(lm),
                "generate_static": lambda: generate_as_decode(lm, "static"),
                "eager": lambda: generating(lm, cuda_graphs=False)}
    if args.previous:
        static = load_previous(args.previous)
        variants["previous"] = lambda: generating(lm, decoders=previous_decoders(static))
    requests = build_requests("bbq_subset_25pct", args.limit)
    rows, texts = [], {}
    payload = {"command": command_line("generation_side_by_side.py", args),
               "environment": environment(), **model, "runs": rows,
               "previous_commit": (args.previous / "COMMIT").read_text().strip()
               if args.previous else None}
    for round_index, name in alternating(names, args.rounds):
        out, figures = metered_generation(lm, requests, variants[name]())
        texts.setdefault(name, out)
        rows.append({"variant": name, "round": round_index, **figures})
        print(name, round(figures["inference_seconds"], 2), figures["j_per_item"], flush=True)
        payload["after_first_run"] = after_first_run(rows)
        payload["identical_to_" + names[0]] = {
            n: sum(a == b for a, b in zip(t, texts[names[0]], strict=True))
            for n, t in texts.items() if names[0] in texts}
        write_json(args.out, payload)


if __name__ == "__main__":
    main()
