"""Greedy decoding in which a finished sequence leaves the batch.

``model.generate`` keeps every sequence of a batch in every decode step until the last one
stops: in a batch whose answers run 5 to 128 tokens, most of the work is on sequences that
are already done. Here a sequence that emits an end-of-sequence token, completes a stop string
or reaches ``max_new_tokens`` is done; once at most half of the batch's rows are still running,
the done rows are taken out of the batch and the KV cache (transformers'
``DynamicCache.batch_select_indices``), so each step costs at most twice what the unfinished
sequences cost, and the batch changes shape only a few times.

Each step is the one ``generate`` takes for greedy search: position ids from the left-padded
attention mask, the last position's scores in fp32, their argmax. Stop strings are checked by
transformers' ``StopStringCriteria`` on the generated tokens only (lm-eval's own loop also
looks at the generated part only).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

#: the batch is compacted once the running sequences are at most this share of its rows: a new
#: batch shape costs kernel selection on a GPU, so rows leave in a few large steps, not one by one
COMPACT_SHARE = 0.5
#: with ``share_prefix``, the rows' common prefix is computed once when at least this long
MIN_SHARED_PREFIX = 16


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Tokens every (left-padded) row starts with, leaving each row at least one of its own."""
    if input_ids.shape[0] < 2:
        return 0
    lengths = attention_mask.sum(-1).long()
    shortest = int(lengths.min())
    width = input_ids.shape[1]
    first = input_ids[0, width - int(lengths[0]):][: shortest - 1]
    same = torch.ones(len(first), dtype=torch.bool, device=input_ids.device)
    for row, length in zip(input_ids, lengths.tolist(), strict=True):
        same &= row[width - length:][: len(first)] == first
    return int(same.long().cumprod(0).sum())


def _suffixes(input_ids: torch.Tensor, attention_mask: torch.Tensor, shared: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row without its first ``shared`` tokens, left-padded again to the longest rest."""
    lengths = attention_mask.sum(-1).long() - shared
    width = int(lengths.max())
    ids = input_ids.new_zeros((len(input_ids), width))
    mask = attention_mask.new_zeros((len(input_ids), width))
    for i, length in enumerate(lengths.tolist()):
        ids[i, width - length:] = input_ids[i, input_ids.shape[1] - length:]
        mask[i, width - length:] = 1
    return ids, mask


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end a sequence: the generation config's, else the tokenizer's."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if ids is None:
        ids = tokenizer.eos_token_id
    return [ids] if isinstance(ids, int) else list(ids or [])


@torch.inference_mode()
def greedy_decode(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  max_new_tokens: int, eos_ids: Sequence[int],
                  stop: Any = None, share_prefix: bool = False) -> list[list[int]]:
    """The new tokens of each (left-padded) row, the stopping token included.

    Args:
        model: A decoder-only transformers model.
        input_ids: Left-padded prompts, ``[batch, length]``.
        attention_mask: Their mask (0 on padding).
        max_new_tokens: Most new tokens per row.
        eos_ids: Token ids that end a row.
        stop: A ``StopStringCriteria`` (or None): called on the generated tokens, True ends a row.
        share_prefix: Run the tokens every row starts with once, at batch 1, and give each row
            a copy of their cache; the rows' own tokens then follow, left-padded after the
            prefix (masked, so each row sees what it would see alone). Where the prompt pass is
            compute-bound (a CPU) this saves the prefix's share of it: the chat template and
            the instructions are about half of the headline task's prompt tokens.
    """
    from transformers import DynamicCache

    device = input_ids.device
    cache = DynamicCache(config=model.config)
    accepted = inspect.signature(model.forward).parameters
    # transformers 5.2x renames the forward's past_key_values to cache
    cache_arg = {("cache" if "cache" in accepted else "past_key_values"): cache}
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in accepted else {}

    def forward(ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The last position's scores of one step; the cache grows by ``ids``."""
        return model(input_ids=ids, use_cache=True, **cache_arg, **last_only,
                     **kwargs).logits[:, -1]

    shared = shared_prefix_length(input_ids, attention_mask) if share_prefix else 0
    if shared >= MIN_SHARED_PREFIX:  # the common prefix once, its cache copied to every row
        forward(input_ids[:1, -int(attention_mask[0].sum()):][:, :shared])
        cache.batch_repeat_interleave(input_ids.shape[0])
        input_ids, attention_mask = _suffixes(input_ids, attention_mask, shared)
        attention_mask = torch.cat([attention_mask.new_ones((len(input_ids), shared)),
                                    attention_mask], dim=1)
    positions = (attention_mask.long().cumsum(-1) - 1)[:, -input_ids.shape[1]:].clamp(min=0)
    logits = forward(input_ids, attention_mask=attention_mask, position_ids=positions)
    eos = torch.tensor(list(eos_ids), device=device, dtype=torch.long)
    present = torch.arange(input_ids.shape[0], device=device)  # original row of each batch row
    ended = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=device)
    generated = input_ids.new_empty((input_ids.shape[0], 0))
    out: list[list[int]] = [[] for _ in range(input_ids.shape[0])]
    running = input_ids.shape[0]
    for step in range(max_new_tokens):
        token = logits.float().argmax(-1)
        generated = torch.cat([generated, token[:, None]], dim=1)
        done = torch.isin(token, eos)
        if stop is not None:
            done |= stop(generated, None).to(device)
        if step == max_new_tokens - 1:
            done[:] = True
        done &= ~ended
        finished = done.nonzero().flatten().tolist()
        if finished:
            rows = present.tolist()
            for j in finished:
                out[rows[j]] = generated[j].tolist()
            ended |= done
            running -= len(finished)
            if running == 0:
                break
            if running <= COMPACT_SHARE * len(rows):
                keep = (~ended).nonzero().flatten()
                cache.batch_select_indices(keep)
                present, token, ended = present[keep], token[keep], ended[keep]
                generated, attention_mask = generated[keep], attention_mask[keep]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(present), 1))],
                                   dim=1)
        positions = attention_mask.long().sum(-1, keepdim=True) - 1
        logits = forward(token[:, None], attention_mask=attention_mask, position_ids=positions)
    return out
