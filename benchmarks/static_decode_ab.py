"""A/B of the CUDA-graph decode's savings on one loaded model, headline task (JSON).

Variants of :func:`~lm_eval_ext.model_wrappers.static_decode.static_greedy_decode` inside the
fast path (``cuda_graphs=true``): ``graphs`` (the decode as measured at commit 0c65708: every
row stays to the end, keys and values copied per query head), ``grouped`` (grouped-query
decode attention only), ``compact`` (the batch cut to its running rows only), ``both`` (the
two savings: the default as measured on 2026-12-01), ``kept`` (both, and a batch replays the
previous batch's graph where it fits, ``DecodeGraphs``; the first four capture a graph per
batch and build the stop-string criterion per batch, as before) and ``fused`` (kept, and the
norms run torch's ``rms_norm``: the default since); ``no_cudnn`` is ``fused`` with the prompt
pass kept off cuDNN's attention (``prefill_kernels``: a plan per new prompt width). They run
alternating, ``--rounds`` times, each through ``generate_until`` in its own metering window:
inference seconds, J/item, idle share, texts identical to the first variant's. With
``--profile``, one more run of the first and last variants under ``torch.profiler``: the
operators with the most device time. The JSON is rewritten after every run.

    python benchmarks/static_decode_ab.py --rounds 3 --profile --out $OUT/static_decode_ab.json
    python benchmarks/static_decode_ab.py --size llama-8b --limit 64 --batch-size 64 \\
        --variants graphs,both --out $OUT/static_decode_ab_8b.json
    python benchmarks/static_decode_ab.py --size llama-8b --limit 8 --batch-size 1 \\
        --variants both,kept,fused --out $OUT/static_decode_ab_8b_b1.json
    python benchmarks/static_decode_ab.py --size llama-8b --limit 8 --batch-size 1 \\
        --variants fused,no_cudnn --out $OUT/static_decode_ab_8b_b1_cudnn.json
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
from typing import Any

from _harness import (
    alternating,
    build_requests,
    command_line,
    environment,
    metered_generation,
    write_json,
)
from energy_sizes import random_init_checkpoint

#: each batch its own graph and stop-string criterion (as measured on 2026-12-01)
PER_BATCH = {"graphs": None, "rebuild_stop": True, "fused_norm": False}
VARIANTS = {"graphs": {"compact": False, "grouped_attention": False, **PER_BATCH},
            "grouped": {"compact": False, "grouped_attention": True, **PER_BATCH},
            "compact": {"compact": True, "grouped_attention": False, **PER_BATCH},
            "both": {"compact": True, "grouped_attention": True, **PER_BATCH},
            "kept": {"compact": True, "grouped_attention": True, "fused_norm": False},
            "fused": {"compact": True, "grouped_attention": True},
            "no_cudnn": {"compact": True, "grouped_attention": True, "cudnn_prefill": False}}


@contextlib.contextmanager
def static_options(rebuild_stop: bool = False, **options: Any):
    """While the block runs, the fast path's static decode takes ``options`` (over its caller's).

    ``rebuild_stop``: the stop-string criterion is built for every batch, not once.
    """
    from lm_eval_ext.model_wrappers import fast_generation

    saved = fast_generation.static_greedy_decode, fast_generation.stop_criterion
    fast_generation.static_greedy_decode = lambda *a, **k: saved[0](*a, **{**k, **options})
    if rebuild_stop:
        fast_generation.stop_criterion = saved[1].__wrapped__
    try:
        yield
    finally:
        fast_generation.static_greedy_decode, fast_generation.stop_criterion = saved


def profiled(lm, requests: list, options: dict) -> list[dict]:
    """The 25 operators with the most device time in one run of ``options``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with static_options(**options), profile(activities=[ProfilerActivity.CPU,
                                                        ProfilerActivity.CUDA]) as prof:
        lm.generate_until(requests, disable_tqdm=True)
        torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        device = getattr(event, "self_device_time_total", None)
        rows.append({"name": event.key, "count": event.count,
                     "self_device_ms": None if device is None else device / 1e3,
                     "self_cpu_ms": event.self_cpu_time_total / 1e3})
    rows.sort(key=lambda r: -(r["self_device_ms"] or 0))
    return rows[:25]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--variants", default="graphs,grouped,compact,both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, help="items (default: all 500)")
    parser.add_argument("--batch-size", default="auto", help="a typed size, or auto (planned)")
    parser.add_argument("--size", help="a random-init shape of energy_sizes.py (e.g. llama-8b)")
    parser.add_argument("--workdir", default="/tmp/static_decode_ab")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    pretrained, model = None, {"model": "embedded SmolLM2-135M-Instruct"}
    if args.size:
        pretrained, model = random_init_checkpoint(args.size, args.workdir, "cuda")
    from lm_eval_ext.model_wrappers.hf_metered import HFMeteredLM

    lm = HFMeteredLM(pretrained=pretrained, device="cuda", precision=args.precision,
                     batch_size=args.batch_size)
    requests = build_requests("bbq_subset_25pct", args.limit)
    names = args.variants.split(",")
    rows, texts = [], {}
    payload = {"command": command_line("static_decode_ab.py", args),
               "environment": environment(), **model, "variants": VARIANTS, "runs": rows}
    for round_index, name in alternating(names, args.rounds):
        out, figures = metered_generation(lm, requests, static_options(**VARIANTS[name]))
        texts.setdefault(name, out)
        rows.append({"variant": name, "round": round_index, **figures})
        print(name, round(figures["inference_seconds"], 2), figures["j_per_item"], flush=True)
        payload["identical_to_" + names[0]] = {
            n: sum(a == b for a, b in zip(t, texts[names[0]], strict=True))
            for n, t in texts.items() if names[0] in texts}
        write_json(args.out, payload)
    if args.profile:
        payload["profile"] = {n: profiled(lm, requests, VARIANTS[n])
                              for n in dict.fromkeys([names[0], names[-1]])}
        write_json(args.out, payload)
    if args.size:
        shutil.rmtree(pretrained, ignore_errors=True)


if __name__ == "__main__":
    main()
