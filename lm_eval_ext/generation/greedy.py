"""Greedy decoding in which a finished sequence leaves the batch (transformers' public cache API).

Each step is ``generate``'s greedy step (position ids from the left-padded mask, the last
position's scores in fp32, their argmax). A row ends on an end-of-sequence token, a stop string
(``StopStringCriteria`` on its new tokens) or ``max_new_tokens``; once at most half the rows run,
the ended ones leave the batch and the cache (``Cache.batch_select_indices``). Caches of a new
shape are built by ``DynamicCache``'s constructor; nothing is written into a cache layer.
Reference: docs/hf-metered.md (fast generation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from lm_eval_ext.generation.attention import (
    COMPACT_SHARE,
    DecodeForward,
    layer_tensors,
    prompt_positions,
)

#: with ``share_prefix``, the rows' common prefix is computed once when at least this long
MIN_SHARED_PREFIX = 16
#: a token id no vocabulary has: fills the new tokens of rows that joined a decode later
#: (``StopStringCriteria`` clamps it to its never-matching entry)
FILLER = 2**31 - 1


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Tokens every (left-padded) row starts with, leaving each row at least one of its own."""
    if input_ids.shape[0] < 2:
        return 0
    lengths = attention_mask.sum(-1).long()
    width = input_ids.shape[1]
    first = input_ids[0, width - int(lengths[0]):][: int(lengths.min()) - 1]
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


def _left_pad(tensor: torch.Tensor, width: int, dim: int, value: float = 0) -> torch.Tensor:
    """``tensor`` padded on the left along ``dim`` to ``width`` (itself when as wide)."""
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - dim) + [missing, 0]
    return torch.nn.functional.pad(tensor, pad, value=value)


@dataclasses.dataclass
class _Running:
    """The rows of a decode in progress (a row's ``present`` is its number in the call)."""

    cache: Any
    attention_mask: torch.Tensor  # [rows, cache length]
    generated: torch.Tensor  # [rows, steps]; FILLER left of rows that joined later
    counts: torch.Tensor
    ended: torch.Tensor
    present: torch.Tensor
    logits: torch.Tensor  # the next token's scores, [rows, vocab]

    ROWS = ("attention_mask", "generated", "counts", "ended", "present", "logits")

    def unattended(self) -> int:
        """Leading cache columns no row attends to any more."""
        return int(self.attention_mask.any(0).long().argmax())

    def keep(self, forward: DecodeForward, keep: torch.Tensor, cut: bool = True) -> None:
        """Only the rows ``keep``; with ``cut`` (plain layers), unattended columns leave too."""
        self.cache.batch_select_indices(keep)
        for name in self.ROWS:
            setattr(self, name, getattr(self, name)[keep])
        first = self.unattended()
        if cut and first and forward.plain:
            self.cache = _cache(forward, [(k[:, :, first:], v[:, :, first:])
                                          for k, v in layer_tensors(self.cache)])
            self.attention_mask = self.attention_mask[:, first:]

    def join(self, forward: DecodeForward, new: _Running) -> None:
        """``new``'s rows join these (caches, masks and tokens aligned on the right)."""
        first = self.unattended()
        mask = self.attention_mask[:, first:]
        length = max(mask.shape[1], new.attention_mask.shape[1])
        self.cache = _cache(forward, [
            tuple(torch.cat([_left_pad(a[:, :, first:], length, 2), _left_pad(b, length, 2)])
                  for a, b in zip(mine, theirs, strict=True))
            for mine, theirs in zip(layer_tensors(self.cache), layer_tensors(new.cache),
                                    strict=True)])
        self.attention_mask = torch.cat([_left_pad(mask, length, 1),
                                         _left_pad(new.attention_mask, length, 1)])
        steps = max(self.generated.shape[1], new.generated.shape[1])
        self.generated = torch.cat([_left_pad(self.generated, steps, 1, FILLER),
                                    _left_pad(new.generated, steps, 1, FILLER)])
        for name in ("counts", "ended", "present", "logits"):
            setattr(self, name, torch.cat([getattr(self, name), getattr(new, name)]))


def _cache(forward: DecodeForward, tensors: list | None = None) -> Any:
    """A new ``DynamicCache`` (holding each layer's ``(keys, values)``: its constructor)."""
    from transformers import DynamicCache

    if tensors is None:
        return DynamicCache(config=forward.model.config)
    return DynamicCache(ddp_cache_data=tensors, config=forward.model.config)


def _prefill(forward: DecodeForward, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             first_row: int, share_prefix: bool) -> _Running:
    """The prompts' pass (their common prefix once where ``share_prefix``): rows ready to step."""
    cache = _cache(forward)
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


def _step(forward: DecodeForward, state: _Running, max_new_tokens: int, eos: torch.Tensor,
          stop: Any, out: dict[int, list[int]], progress: Callable[[int], Any] | None) -> None:
    """One greedy token per row; ended rows recorded in ``out`` and counted, the batch compacted."""
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
    if finished and progress is not None:
        progress(len(finished))
    state.ended |= done
    running = int((~state.ended).sum())
    if running == 0:
        return
    if finished and running <= COMPACT_SHARE * len(state.present):
        keep = (~state.ended).nonzero().flatten()
        token = token[keep]
        state.keep(forward, keep)
    state.attention_mask = torch.cat(
        [state.attention_mask, state.attention_mask.new_ones((len(state.present), 1))], dim=1)
    positions = state.attention_mask.long().sum(-1, keepdim=True) - 1
    state.logits = forward(state.cache, token[:, None], attention_mask=state.attention_mask,
                           position_ids=positions)


@torch.inference_mode()
def greedy_decode(model: Any, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                  max_new_tokens: int, eos_ids: Sequence[int], stop: Any = None,
                  share_prefix: bool = False, admit_at: int = 0,
                  progress: Callable[[int], Any] | None = None) -> list[list[int]]:
    """The new tokens of every row of ``batches`` (numbered in order), the stopping token included.

    Args:
        model: A decoder-only transformers model.
        batches: Left-padded prompts and their masks (0 on padding), one pair per batch.
        max_new_tokens: Most new tokens per row.
        eos_ids: Token ids that end a row.
        stop: A ``StopStringCriteria`` (or None), called on the new tokens: True ends a row.
        share_prefix: Run a batch's common prefix once and copy its cache to every row (each
            row still sees what it would see alone; it saves prompt compute on a CPU).
        admit_at: Once at most this many rows run, the next batch's rows join them (plain
            layers only); 0: each batch is decoded to its end first.
        progress: Called with the number of rows that just ended (a progress bar's update).
    """
    forward = DecodeForward(model)
    eos = torch.tensor(list(eos_ids), device=batches[0][0].device, dtype=torch.long)
    out: dict[int, list[int]] = {}
    queue = list(batches)
    first_row, state = 0, None
    while queue or state is not None:
        if state is None or (queue and int((~state.ended).sum()) <= admit_at and forward.plain):
            input_ids, attention_mask = queue.pop(0)
            new = _prefill(forward, input_ids, attention_mask, first_row, share_prefix)
            first_row += len(input_ids)
            if state is None:
                state = new
            else:
                state.keep(forward, (~state.ended).nonzero().flatten(), cut=False)
                state.join(forward, new)
        _step(forward, state, max_new_tokens, eos, stop, out, progress)
        if bool(state.ended.all()):
            state = None
    return [out[i] for i in range(first_row)]
