"""transformers' own ``generate`` as the fast path's decode, for the benchmarks' comparisons.

The fast path's planning, encoding and stop-sequence cut stay; only the decode of each batch is
one ``model.generate`` call (the fast path's earlier design, and the issue's "plain
transformers" modes). It replaces the eager decode (dynamic cache, and the CPU's pooled one)
through the generator's ``decoders`` setting, with the CUDA-graph decode turned off
(``cuda_graphs=False``) so that it is the one that runs on a GPU too.
"""

from __future__ import annotations

import functools

from _harness import generating


def generate_decode(model, batches, max_new_tokens, eos_ids, stop=None, *, tokenizer,
                    cache_implementation=None, **pool):
    """Each left-padded batch through one ``model.generate``: the new tokens of every row.

    The arguments are ``greedy_decode``'s (its pooling options, ``pool``, do not apply);
    ``cache_implementation="static"``: transformers' static cache (``generate`` compiles the
    forward for it on a GPU).
    """
    from transformers import StoppingCriteriaList

    extra = {"stopping_criteria": StoppingCriteriaList([stop])} if stop is not None else {}
    if cache_implementation:
        extra["cache_implementation"] = cache_implementation
    rows = []
    for input_ids, attention_mask in batches:
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                             max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id, use_cache=True, **extra)
        rows += out[:, input_ids.shape[1]:].tolist()
    return rows


def generate_as_decode(lm, cache_implementation: str | None = None):
    """While the block runs, ``lm``'s fast path decodes every batch with ``generate_decode``."""
    from lm_eval_ext.generation.settings import Decoders

    eager = functools.partial(generate_decode, tokenizer=lm.tokenizer,
                              cache_implementation=cache_implementation)
    return generating(lm, cuda_graphs=False, decoders=Decoders(eager=eager))
