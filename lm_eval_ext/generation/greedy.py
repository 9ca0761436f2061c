"""Greedy decoding in which a finished sequence leaves the batch (transformers' public cache API).

``model.generate`` keeps every row of a batch in every decode step until the last one stops.
Here a row that emits an end-of-sequence token, completes a stop string or reaches
``max_new_tokens`` is done; once at most half of the rows still run, the done rows leave the
batch and the cache (``Cache.batch_select_indices``), so a step costs at most twice what the
unfinished rows cost and the batch changes shape only a few times.

:func:`pooled_greedy_decode` runs several batches as one pool: once at most ``admit_at`` rows
of the running batch are left, the next batch's prompts run and its rows join them (keys,
values, masks and tokens aligned on the right; columns no row attends to any more cut from the
left). A cache of a new shape is built by ``DynamicCache``'s constructor from tensors read from
``cache.layers``; nothing is written into a cache layer. On a CPU, where a step on a few rows
costs far more per row than one on many, a batch's last long answers then run with the next
batch instead of alone.

Each step is the one ``generate`` takes for greedy search: position ids from the left-padded
attention mask, the last position's scores in fp32, their argmax. Stop strings are checked by
transformers' ``StopStringCriteria`` on the generated tokens only (as lm-eval's loop does).
"""

from __future__ import annotations

import dataclasses
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


def prompt_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each token's position id in its left-padded row, as ``generate`` sets them (0 on padding)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end a sequence: the generation config's, else the tokenizer's."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if ids is None:
        ids = tokenizer.eos_token_id
    return [ids] if isinstance(ids, int) else list(ids or [])


#: a token id no vocabulary has: fills the generated tokens of rows merged into a running decode
#: on the left (``StopStringCriteria`` clamps it to its never-matching entry)
FILLER = 2**31 - 1


@dataclasses.dataclass
class _Running:
    """The rows of a decode in progress: cache, mask, new tokens and the next token's scores."""

    cache: Any
    attention_mask: torch.Tensor  # [rows, cache length]
    generated: torch.Tensor  # [rows, steps]; FILLER left of rows that joined later
    counts: torch.Tensor  # new tokens per row
    ended: torch.Tensor  # bool per row
    present: torch.Tensor  # each row's number among all rows of the call
    logits: torch.Tensor  # the next token's scores, [rows, vocab]


class DecodeForward:
    """One model's decoding forward: the last position's scores, the cache grown by the ids.

    The forward's keywords are read once: transformers 5.2x renames ``past_key_values`` to
    ``cache``, and ``logits_to_keep`` is passed where the model takes it.
    """

    def __init__(self, model: Any):
        accepted = inspect.signature(model.forward).parameters
        self.cache_key = "cache" if "cache" in accepted else "past_key_values"
        self.last_only = {"logits_to_keep": 1} if "logits_to_keep" in accepted else {}
        self.model = model

    def __call__(self, cache: Any, ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The last position's scores; the cache grows by ``ids``."""
        return self.model(input_ids=ids, use_cache=True, **{self.cache_key: cache},
                          **self.last_only, **kwargs).logits[:, -1]


def _prefill(forward: DecodeForward, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             first_row: int, share_prefix: bool) -> _Running:
    """The prompts' pass (their common prefix once where ``share_prefix``): rows ready to step."""
    from transformers import DynamicCache

    cache = DynamicCache(config=forward.model.config)
    shared = shared_prefix_length(input_ids, attention_mask) if share_prefix else 0
    if shared >= MIN_SHARED_PREFIX:  # the common prefix once, its cache copied to every row
        forward(cache, input_ids[:1, -int(attention_mask[0].sum()):][:, :shared])
        cache.batch_repeat_interleave(input_ids.shape[0])
        input_ids, attention_mask = _suffixes(input_ids, attention_mask, shared)
        attention_mask = torch.cat([attention_mask.new_ones((len(input_ids), shared)),
                                    attention_mask], dim=1)
    positions = prompt_positions(attention_mask)[:, -input_ids.shape[1]:]
    logits = forward(cache, input_ids, attention_mask=attention_mask, position_ids=positions)
    rows, device = input_ids.shape[0], input_ids.device
    return _Running(cache, attention_mask, input_ids.new_empty((rows, 0)),
                    torch.zeros(rows, dtype=torch.long, device=device),
                    torch.zeros(rows, dtype=torch.bool, device=device),
                    torch.arange(first_row, first_row + rows, device=device), logits)


def rebuilt_cache(model: Any, tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A new ``DynamicCache`` holding each layer's ``(keys, values)`` (its public constructor)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=tensors, config=model.config)


def layer_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values, ``[rows, heads, columns, dim]`` (read, never written)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def _unattended(state: _Running) -> int:
    """Leading cache columns no row attends to any more."""
    return int(state.attention_mask.any(0).long().argmax())


def _keep(model: Any, state: _Running, keep: torch.Tensor, cut: bool = True) -> None:
    """Only the rows ``keep``; with ``cut``, columns no row attends to are cut from the left.

    The cut is for plain growing layers only (a sliding-window layer keeps its own count); it
    builds the cache anew, one copy of it (:func:`_merge` cuts as it builds, so it asks none).
    """
    state.cache.batch_select_indices(keep)
    for name in ("attention_mask", "generated", "counts", "ended", "present", "logits"):
        setattr(state, name, getattr(state, name)[keep])
    first = _unattended(state)
    if cut and first and plain_layers(model):
        state.cache = rebuilt_cache(model, [(k[:, :, first:], v[:, :, first:])
                                            for k, v in layer_tensors(state.cache)])
        state.attention_mask = state.attention_mask[:, first:]


def _left_pad(tensor: torch.Tensor, width: int, dim: int, value: float = 0) -> torch.Tensor:
    """``tensor`` padded on the left along ``dim`` to ``width``."""
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - dim) + [missing, 0]
    return torch.nn.functional.pad(tensor, pad, value=value)


def _merge(model: Any, state: _Running, new: _Running) -> None:
    """``new``'s rows join ``state`` (caches, masks and tokens aligned on the right).

    ``state``'s columns no row attends to are left out as the joint cache is built.
    """
    first = _unattended(state)
    state.attention_mask = state.attention_mask[:, first:]
    length = max(state.attention_mask.shape[1], new.attention_mask.shape[1])
    state.cache = rebuilt_cache(model, [
        tuple(torch.cat([_left_pad(mine[:, :, first:], length, 2), _left_pad(theirs, length, 2)])
              for mine, theirs in zip(old, joining, strict=True))
        for old, joining in zip(layer_tensors(state.cache), layer_tensors(new.cache), strict=True)])
    state.attention_mask = torch.cat([_left_pad(state.attention_mask, length, 1),
                                      _left_pad(new.attention_mask, length, 1)])
    steps = max(state.generated.shape[1], new.generated.shape[1])
    state.generated = torch.cat([_left_pad(state.generated, steps, 1, FILLER),
                                 _left_pad(new.generated, steps, 1, FILLER)])
    for name in ("counts", "ended", "present", "logits"):
        setattr(state, name, torch.cat([getattr(state, name), getattr(new, name)]))


def plain_layers(model: Any) -> bool:
    """Whether every layer keeps all earlier tokens (no sliding window, no recurrent state)."""
    config = model.config.get_text_config(decoder=True)
    kinds = getattr(config, "layer_types", None)
    if kinds is not None:
        return set(kinds) == {"full_attention"}
    return not getattr(config, "sliding_window", None)


def _step(forward: DecodeForward, state: _Running, max_new_tokens: int, eos: torch.Tensor, stop: Any,
          out: dict[int, list[int]]) -> None:
    """One greedy token per row; ended rows recorded in ``out``, and the batch compacted."""
    token = state.logits.float().argmax(-1)
    state.generated = torch.cat([state.generated, token[:, None]], dim=1)
    state.counts += 1
    done = torch.isin(token, eos) | (state.counts >= max_new_tokens)
    if stop is not None:
        done |= stop(state.generated, None).to(done.device)
    done &= ~state.ended
    finished = done.nonzero().flatten().tolist()
    for j in finished:
        out[int(state.present[j])] = state.generated[j, -int(state.counts[j]):].tolist()
    state.ended |= done
    running = int((~state.ended).sum())
    if running == 0:
        return
    if finished and running <= COMPACT_SHARE * len(state.present):
        keep = (~state.ended).nonzero().flatten()
        token = token[keep]
        _keep(forward.model, state, keep)
    state.attention_mask = torch.cat(
        [state.attention_mask, state.attention_mask.new_ones((len(state.present), 1))], dim=1)
    positions = state.attention_mask.long().sum(-1, keepdim=True) - 1
    state.logits = forward(state.cache, token[:, None], attention_mask=state.attention_mask,
                           position_ids=positions)


@torch.inference_mode()
def pooled_greedy_decode(model: Any, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                         max_new_tokens: int, eos_ids: Sequence[int], stop: Any = None,
                         share_prefix: bool = False, admit_at: int = 0) -> list[list[int]]:
    """The new tokens of every row of ``batches`` (numbered in order), the stopping token included.

    Args:
        model: A decoder-only transformers model.
        batches: Left-padded prompts and their masks (0 on padding), one pair per batch.
        max_new_tokens: Most new tokens per row.
        eos_ids: Token ids that end a row.
        stop: A ``StopStringCriteria`` (or None): called on the generated tokens, True ends a row.
        share_prefix: Run the tokens every row of a batch starts with once, at batch 1, and
            give each row a copy of their cache; the rows' own tokens then follow, left-padded
            after the prefix (masked, so each row sees what it would see alone). Where the
            prompt pass is compute-bound (a CPU) this saves the prefix's share of it.
        admit_at: Once at most this many rows are still running, the next batch's prompts are
            run and its rows join them (caches aligned on the right), so the last long answers
            of a batch are decoded together with the next batch's instead of alone; 0: each
            batch is decoded to its end first.
    """
    forward = DecodeForward(model)
    eos = torch.tensor(list(eos_ids), device=batches[0][0].device, dtype=torch.long)
    out: dict[int, list[int]] = {}
    queue = list(batches)
    first_row, state = 0, None
    while queue or state is not None:
        if state is None or (queue and int((~state.ended).sum()) <= admit_at
                             and plain_layers(model)):
            input_ids, attention_mask = queue.pop(0)
            new = _prefill(forward, input_ids, attention_mask, first_row, share_prefix)
            first_row += len(input_ids)
            if state is None:
                state = new
            else:
                _keep(forward.model, state, (~state.ended).nonzero().flatten(), cut=False)
                _merge(forward.model, state, new)
        _step(forward, state, max_new_tokens, eos, stop, out)
        if bool(state.ended.all()):
            state = None
    return [out[i] for i in range(first_row)]


def greedy_decode(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  max_new_tokens: int, eos_ids: Sequence[int],
                  stop: Any = None, share_prefix: bool = False) -> list[list[int]]:
    """The new tokens of each (left-padded) row of one batch, the stopping token included.

    :func:`pooled_greedy_decode` of the one batch (its arguments).
    """
    return pooled_greedy_decode(model, [(input_ids, attention_mask)], max_new_tokens, eos_ids,
                                stop, share_prefix)
