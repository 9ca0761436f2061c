"""A/B of the fast path's decode on one loaded model: model.generate at the planned batch vs the
shrinking greedy loop (finished sequences leave the batch), alternating, headline task (JSON).

Both decode from the dynamic cache (the model is loaded with ``cuda_graphs=false``: this A/B
predates the CUDA-graph decode, which ``gen_throughput.py`` compares).

    python benchmarks/fast_decode_ab.py --device cuda --rounds 3 --out $OUT/fast_decode_ab.json
"""

from __future__ import annotations

import argparse
import contextlib

from _harness import (
    alternating,
    build_requests,
    command_line,
    environment,
    metered_generation,
    write_json,
)
from plain_generate import generate_as_decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(device=args.device, precision=args.precision, cuda_graphs=False)
    requests = build_requests("bbq_subset_25pct", args.limit)
    variants = {"generate": lambda: generate_as_decode(lm), "shrinking": contextlib.nullcontext}
    rows, texts = [], {}
    payload = {"command": command_line("fast_decode_ab.py", args), "environment": environment(),
               "runs": rows}
    for round_index, name in alternating(list(variants), args.rounds):
        out, figures = metered_generation(lm, requests, variants[name]())
        texts.setdefault(name, out)
        rows.append({"variant": name, "round": round_index, **figures,
                     "batch_sizes": figures["generation"]["batch_sizes"]})
        print(name, round(figures["wall_seconds"], 2), figures["j_per_item"], flush=True)
        if len(texts) == 2:
            payload["identical_texts"] = sum(a == b for a, b in zip(*texts.values(),
                                                                    strict=True))
        write_json(args.out, payload)


if __name__ == "__main__":
    main()
