"""P2 (CPU side): the request loop's host work with and without shared-prefix's changes.

Measured without the model's forward (the embedded model is loaded for its tokenizer and
config only), on the 2,000 frozen BBQ items (6,000 requests), median of ``--rounds``:

* tokenisation: lm-eval's per-request ``_encode_pair`` (two tokenizer calls per request) vs
  the batched call of :func:`~lm_eval_ext.backends.hf.shared_prefix.SharedPrefixScorer.batch_tokens`
  (asserted to give the same token ids);
* grouping and packing every item into rows (numpy, batch 64);
* the model's ``max_length`` property (it reads the config each time): seconds per read times
  the reads the old per-option check made.

    python benchmarks/p2_cpu_side.py --out benchmarks/results/p2_cpu_side.json
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

from _harness import build_requests, environment, write_json


def timed(call, rounds: int) -> float:
    """Median seconds of ``call()`` over ``rounds``."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="bbq_instrument_loglik")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from lm_eval.api.model import TemplateLM
    from lm_eval.models.huggingface import HFLM

    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.backends.hf.packing import group_by_context, pack, split_to_fit

    lm = HFMeteredLM(device="cpu", idle_seconds=0, mc_scoring="shared_prefix")
    requests = build_requests(args.task, None)
    captured: list = []
    lm._loglikelihood_tokens = lambda reqs, disable_tqdm=False: captured.extend(reqs)

    def per_request() -> None:
        captured.clear()
        TemplateLM.loglikelihood(lm, requests, True)

    def batched() -> None:
        captured.clear()
        with lm.shared_prefix.batch_tokens(requests, functools.partial(HFLM.tok_encode, lm)):
            TemplateLM.loglikelihood(lm, requests, True)

    per_request_s = timed(per_request, args.rounds)
    own = list(captured)
    batched_s = timed(batched, args.rounds)
    assert captured == own, "batched tokenisation changed a request's tokens"

    def packing() -> None:
        rows = [row for item in group_by_context(own) for row in split_to_fit(item)]
        for start in range(0, len(rows), args.batch_size):
            pack(rows[start:start + args.batch_size], 0, "cpu")

    packing_s = timed(packing, args.rounds)
    reads = sum(len(item.options) for item in group_by_context(own))
    max_length_s = timed(lambda: [lm.max_length for _ in range(1000)], args.rounds) / 1000
    write_json(args.out, {
        "benchmark": "P2 CPU side of the request loop",
        "command": f"python benchmarks/p2_cpu_side.py --rounds {args.rounds} --out {args.out}",
        "task": args.task, "n_requests": len(requests),
        "tokenisation_per_request_s": per_request_s, "tokenisation_batched_s": batched_s,
        "tokenisation_speedup": per_request_s / batched_s,
        "group_split_pack_s": packing_s,
        "max_length_read_s": max_length_s, "max_length_reads_per_option_check": reads,
        "max_length_per_option_check_s": max_length_s * reads,
        "environment": environment()})


if __name__ == "__main__":
    main()
