"""A/B of the fast path's decode on one loaded model: model.generate at the planned batch vs the
shrinking greedy loop (finished sequences leave the batch), alternating, headline task (JSON).

    python benchmarks/fast_decode_ab.py --device cuda --rounds 3 --out $OUT/fast_decode_ab.json
"""

from __future__ import annotations

import argparse
import time

from _harness import alternating, build_requests, command_line, environment, write_json


def generate_decode(lm, rows, max_gen_toks, stop_strings, cache_implementation=None):
    """The fast path's previous decode: one model.generate per batch.

    ``cache_implementation="static"``: transformers' static cache (``generate`` compiles the
    forward for it on a GPU).
    """
    batch = lm.tokenizer.pad({"input_ids": rows}, padding_side="left", return_tensors="pt")
    extra = {"stop_strings": stop_strings, "tokenizer": lm.tokenizer} if stop_strings else {}
    if cache_implementation:
        extra["cache_implementation"] = cache_implementation
    out = lm.metering.timed(lm.model.generate, input_ids=batch["input_ids"].to(lm.device),
                            attention_mask=batch["attention_mask"].to(lm.device),
                            max_new_tokens=max_gen_toks, do_sample=False,
                            pad_token_id=lm.tokenizer.pad_token_id, use_cache=True, **extra)
    return out[:, batch["input_ids"].shape[1]:].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    from lm_eval_ext.model_wrappers import fast_generation
    from lm_eval_ext.model_wrappers.hf_metered import HFMeteredLM

    lm = HFMeteredLM(device=args.device, precision=args.precision)
    requests = build_requests("bbq_subset_25pct", args.limit)
    variants = {"generate": generate_decode, "shrinking": fast_generation.generate_batch}
    rows, texts = [], {}
    payload = {"command": command_line("fast_decode_ab.py", args), "environment": environment(),
               "runs": rows}
    for round_index, name in alternating(list(variants), args.rounds):
        fast_generation.generate_batch = variants[name]
        lm.reset_metering()
        started = time.perf_counter()
        out = lm.generate_until(requests, disable_tqdm=True)
        wall = time.perf_counter() - started
        m = lm.metering_info()
        texts.setdefault(name, out)
        rows.append({"variant": name, "round": round_index, "wall_seconds": wall,
                     "inference_seconds": m["inference_seconds"],
                     "energy_joules": m["energy_joules"], "idle_share": m["idle_share"],
                     "j_per_item": None if m["energy_joules"] is None
                     else m["energy_joules"] / len(out), "gpus": m["gpus"],
                     "batch_sizes": m["generation"]["batch_sizes"]})
        print(rows[-1]["variant"], round(wall, 2), rows[-1]["j_per_item"], flush=True)
        if len(texts) == 2:
            payload["identical_texts"] = sum(a == b for a, b in zip(*texts.values(),
                                                                    strict=True))
        write_json(args.out, payload)
    fast_generation.generate_batch = variants["shrinking"]


if __name__ == "__main__":
    main()
