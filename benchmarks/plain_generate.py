"""transformers' own ``generate`` as the fast path's decode, for the benchmarks' comparisons.

The fast path's planning, encoding and stop-sequence cut stay; only the decode of each batch is
one ``model.generate`` call (the fast path's earlier design, and the issue's "plain
transformers" modes). Run with ``cuda_graphs=false``: the swap replaces the dynamic-cache decode
(and the CPU's pooled one), not the CUDA-graph decode.
"""

from __future__ import annotations

import contextlib
import functools


def generate_decode(lm, rows, max_gen_toks, stop_strings, cache_implementation=None):
    """One model.generate for the batch ``rows`` (left-padded), timed by the metering.

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


@contextlib.contextmanager
def generate_as_decode(cache_implementation: str | None = None):
    """While the block runs, the fast path decodes every batch with ``generate_decode``."""
    from lm_eval_ext.generation import generator as fast_generation

    saved = fast_generation.generate
    one = functools.partial(generate_decode, cache_implementation=cache_implementation)
    fast_generation.generate = lambda lm, batches, tokens, stop, **pool: [
        row for rows in batches for row in one(lm, rows, tokens, stop)]
    try:
        yield
    finally:
        fast_generation.generate = saved
