"""P2: log-likelihood throughput and energy: raw transformers loop vs lm-eval vs hf-metered.

One process, one model copy per path (same checkpoint, same precision), the same prebuilt
lm-eval requests of the frozen BBQ instrument (2,000 items x 3 options). Per round and batch
size, each path runs once, the order rotating between rounds; each run is one energy window
(device-synchronised edges, NVML on a GPU). Paths:

* ``raw``: a plain transformers loop, 3 right-padded sequences per item (context + option);
* ``hf``: ``lm_eval --model hf`` (lm-eval's HFLM) ``loglikelihood``;
* ``metered``: ``hf-metered`` with the standard path;
* ``shared_prefix``: ``hf-metered mc_scoring=shared_prefix`` (one packed row per item;
  ``batch_size`` counts items there, sequences elsewhere).

Per run: items/s, J/item (raw and idle-corrected), and the forward share (seconds inside the
decoder's forward, synchronised, over the window). Ratios use the medians over rounds.
Exactness: per request, shared prefix vs the standard path's log-likelihood (max |diff|) and
the items whose argmax (acc, and acc_norm by option length in bytes) changes.

    python benchmarks/p2_throughput.py --device cuda --out $OUT/p2_throughput.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from _harness import Deadline, build_requests, command_line, environment, write_json

PATHS = ("raw", "hf", "metered", "shared_prefix")


class ForwardClock:
    """Seconds spent inside a module's forward (synchronised at both edges)."""

    def __init__(self, module, sync):
        self.seconds, self._sync, self._started = 0.0, sync, None
        module.register_forward_pre_hook(self._pre)
        module.register_forward_hook(self._post)

    def _pre(self, *_):
        self._sync()
        self._started = time.perf_counter()

    def _post(self, *_):
        self._sync()
        self.seconds += time.perf_counter() - self._started


def raw_loop(model, tokenizer, requests, batch_size: int, device) -> list[float]:
    """Sum of option log-probabilities per request: one right-padded sequence each."""
    import torch
    import torch.nn.functional as F

    pairs = []
    for request in requests:
        context, continuation = request.args
        whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
        n_context = len(tokenizer(context, add_special_tokens=False)["input_ids"])
        pairs.append((whole, n_context))
    scores = []
    pad = tokenizer.pad_token_id or 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        width = max(len(w) for w, _ in chunk) - 1
        tokens = torch.full((len(chunk), width), pad, dtype=torch.long)
        for row, (whole, _) in enumerate(chunk):
            tokens[row, :len(whole) - 1] = torch.tensor(whole[:-1])
        with torch.no_grad():
            logprobs = F.log_softmax(model(tokens.to(device)).logits, dim=-1)
        for row, (whole, n_context) in enumerate(chunk):
            targets = torch.tensor(whole[n_context:], device=device)
            picked = logprobs[row, n_context - 1:len(whole) - 1].gather(1, targets[:, None])
            scores.append(float(picked.sum()))
    return scores


def argmax_changes(requests, reference: list, candidate: list) -> dict[str, int]:
    """Items whose chosen option (by log-likelihood, and by it per byte) differs."""
    by_doc: dict[int, list[int]] = defaultdict(list)
    for index, request in enumerate(requests):
        by_doc[request.doc_id].append(index)
    changes = {"acc": 0, "acc_norm": 0}
    for indices in by_doc.values():
        lengths = [max(len(requests[i].args[1].encode()), 1) for i in indices]
        for name, norm in (("acc", [1] * len(indices)), ("acc_norm", lengths)):
            pick = [max(range(len(indices)), key=lambda k, s=s: s[indices[k]] / norm[k])
                    for s in (reference, candidate)]
            changes[name] += pick[0] != pick[1]
    return changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--task", default="bbq_instrument_loglik")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--budget-s", type=float, default=520)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    deadline = Deadline(args.budget_s)

    import torch
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_ext.backends.embedded_model import ensure_checkpoint
    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.metering import EnergyMeter, select_source

    checkpoint = str(ensure_checkpoint())
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.precision]
    device = torch.device(args.device)
    cuda = [device.index or 0] if device.type == "cuda" else []
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    meter = EnergyMeter(select_source(cuda), sync=sync if cuda else None)
    meter.measure_idle(3.0, intervals=6)

    requests = build_requests(args.task, args.limit)
    n_items = len({r.doc_id for r in requests})
    first = args.batch_sizes[0]
    raw_model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    common = {"device": args.device, "batch_size": first}
    lms = {"hf": HFLM(pretrained=checkpoint, dtype=dtype, **common),
           "metered": HFMeteredLM(pretrained=checkpoint, precision=args.precision,
                                  idle_seconds=0, **common),
           "shared_prefix": HFMeteredLM(pretrained=checkpoint, precision=args.precision,
                                        idle_seconds=0, mc_scoring="shared_prefix", **common)}
    clocks = {"raw": ForwardClock(raw_model.model, sync),
              **{name: ForwardClock(lm.model.get_decoder(), sync) for name, lm in lms.items()}}

    def run(path: str, batch: int) -> list[float]:
        if path == "raw":
            return raw_loop(raw_model, tokenizer, requests, batch, device)
        lms[path].batch_size_per_gpu = batch
        return [a[0] for a in lms[path].loglikelihood(requests, disable_tqdm=True)]

    for path in PATHS:  # warm-up (kernels, allocator), not timed
        run(path, first)
    rows, answers = [], {}
    for round_index in range(args.rounds):
        for batch in args.batch_sizes:
            order = PATHS[round_index % len(PATHS):] + PATHS[:round_index % len(PATHS)]
            for path in order:
                if deadline.left() < 20:
                    break
                forward_before = clocks[path].seconds
                meter.begin_window(path)
                answers[(path, batch)] = run(path, batch)
                window = meter.end_window(path)
                forward = clocks[path].seconds - forward_before
                rows.append({
                    "round": round_index, "batch_size": batch, "path": path,
                    "window_s": window.seconds, "items_per_s": n_items / window.seconds,
                    "joules": window.total_joules,
                    "joules_idle_corrected": window.idle_corrected_joules,
                    "j_per_item": (window.total_joules / n_items
                                   if window.total_joules is not None else None),
                    "j_per_item_idle_corrected": (window.idle_corrected_joules / n_items
                                                  if window.idle_corrected_joules is not None
                                                  else None),
                    "forward_s": forward, "forward_share": forward / window.seconds,
                    "flags": list(window.flags)})
                print(rows[-1], flush=True)
                payload = _payload(args, rows, answers, requests, n_items, meter)
                payload["mc_scoring"] = lms["shared_prefix"].metering_info()["mc_scoring"]
                write_json(args.out, payload)


def _median(rows, batch, path, key):
    values = [r[key] for r in rows if r["batch_size"] == batch and r["path"] == path
              and r[key] is not None]
    return statistics.median(values) if values else None


def _payload(args, rows, answers, requests, n_items, meter) -> dict:
    summary = {}
    for batch in args.batch_sizes:
        medians = {path: {key: _median(rows, batch, path, key) for key in (
            "items_per_s", "j_per_item", "j_per_item_idle_corrected", "forward_share",
            "window_s")} for path in PATHS}
        ratios = {}
        for path in PATHS:
            for base in ("raw", "hf", "metered"):
                a, b = medians[path]["items_per_s"], medians[base]["items_per_s"]
                if path != base and a and b:
                    ratios[f"{path}/{base} items_per_s"] = a / b
        exact = {}
        if ("metered", batch) in answers and ("shared_prefix", batch) in answers:
            ref, new = answers[("metered", batch)], answers[("shared_prefix", batch)]
            exact = {"max_abs_diff": max(abs(a - b) for a, b in zip(ref, new, strict=True)),
                     "argmax_changes": argmax_changes(requests, ref, new),
                     "n_requests": len(ref)}
        if ("raw", batch) in answers and ("hf", batch) in answers:
            exact["raw_vs_hf_max_abs_diff"] = max(abs(a - b) for a, b in zip(
                answers[("raw", batch)], answers[("hf", batch)], strict=True))
        summary[str(batch)] = {"medians": medians, "ratios": ratios,
                               "shared_prefix_vs_standard": exact}
    return {"benchmark": "P2 log-likelihood throughput and energy",
            "command": command_line("p2_throughput.py", args),
            "task": args.task, "n_items": n_items, "n_requests": len(requests),
            "idle_watts": meter.idle_watts, "gpus": meter.source.describe()
            if hasattr(meter.source, "describe") else None,
            "environment": environment(), "runs": rows, "summary": summary}


if __name__ == "__main__":
    main()
