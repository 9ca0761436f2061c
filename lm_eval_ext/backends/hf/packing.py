"""Packed rows for shared-prefix scoring: the context once, every option after it.

    tokens     c0 c1 c2 c3 | a0 a1 | b0 | d0 d1 d2      (options a, b, d; last token dropped)
    positions   0  1  2  3 |  4  5 |  4 |  4  5  6
    a's logits come from c3, a0, a1 (they predict a0, a1, a2); b's from c3, b0; ...

Pure functions over token ids (numpy, one copy per tensor to the device); the scorer in
:mod:`~lm_eval_ext.backends.hf.shared_prefix` runs the model on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

#: a packed row holds options up to this many tokens (more options: more rows); tasks whose
#: items share a trivial context (CrowS-Pairs: the BOS token) would otherwise pack everything
PACKED_ROW_TOKENS = 1024

Request = tuple[Any, Sequence[int], Sequence[int]]  # ((context, continuation), ctx, cont)


@dataclasses.dataclass(frozen=True)
class PackedItem:
    """Requests sharing one context: the context's tokens and each option's tokens."""

    context: tuple[int, ...]
    options: tuple[tuple[int, ...], ...]
    request_indices: tuple[int, ...]
    #: tokens in the packed row (every option's last token is never an input)
    length: int = dataclasses.field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "length",
                           len(self.context) + sum(len(o) - 1 for o in self.options))


def group_by_context(requests: Sequence[Request]) -> list[PackedItem]:
    """One item per distinct context token sequence, in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, (_, context, _) in enumerate(requests):
        groups.setdefault(tuple(context), []).append(index)
    return [PackedItem(context, tuple(tuple(requests[i][2]) for i in indices), tuple(indices))
            for context, indices in groups.items()]


def split_to_fit(item: PackedItem, row_tokens: int = PACKED_ROW_TOKENS) -> list[PackedItem]:
    """``item`` as rows of at most ``row_tokens`` tokens (a row always takes one option)."""
    rows: list[PackedItem] = []
    options: list[tuple[int, ...]] = []
    indices: list[int] = []
    for option, index in zip(item.options, item.request_indices, strict=True):
        grown = len(item.context) + sum(len(o) - 1 for o in options) + len(option) - 1
        if options and grown > row_tokens:
            rows.append(PackedItem(item.context, tuple(options), tuple(indices)))
            options, indices = [], []
        options.append(option)
        indices.append(index)
    rows.append(PackedItem(item.context, tuple(options), tuple(indices)))
    return rows


@dataclasses.dataclass(frozen=True)
class PackedBatch:
    """Model inputs for a batch of packed items and where each option's scores come from."""

    tokens: torch.Tensor  # (B, T) long
    positions: torch.Tensor  # (B, T) long
    segments: torch.Tensor  # (B, T) long: 0 context, k option k, -1 padding
    rows: torch.Tensor  # (N,) row of every scored position (all options, concatenated)
    columns: torch.Tensor  # (N,) packed index of every scored position
    targets: torch.Tensor  # (N,) the token each scored position should predict
    option_lengths: list[int]  # per option (batch order): how many of the N positions


def pack(items: Sequence[PackedItem], pad_id: int, device: torch.device | str) -> PackedBatch:
    """Right-padded packed rows for ``items`` (built in numpy, one copy each to ``device``)."""
    width = max(item.length for item in items)
    tokens = np.full((len(items), width), pad_id, dtype=np.int64)
    positions = np.zeros((len(items), width), dtype=np.int64)
    segments = np.full((len(items), width), -1, dtype=np.int64)
    rows, columns, targets, lengths = [], [], [], []
    for row, item in enumerate(items):
        n = len(item.context)
        tokens[row, :n] = item.context
        positions[row, :n] = np.arange(n)
        segments[row, :n] = 0
        start = n
        for k, option in enumerate(item.options, start=1):
            end = start + len(option) - 1
            tokens[row, start:end] = option[:-1]
            positions[row, start:end] = np.arange(n, n + end - start)
            segments[row, start:end] = k
            rows += [row] * len(option)
            columns.append(n - 1)
            columns += range(start, end)
            targets += option
            lengths.append(len(option))
            start = end

    def put(array) -> torch.Tensor:
        return torch.from_numpy(np.asarray(array, dtype=np.int64)).to(device)

    return PackedBatch(put(tokens), put(positions), put(segments), put(rows), put(columns),
                       put(targets), lengths)


def attention_mask(segments: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, T, T) additive mask: causal, options see the context and themselves only."""
    t = segments.shape[1]
    index = torch.arange(t, device=segments.device)
    causal = index[None, :] <= index[:, None]  # (q, k)
    seg_q, seg_k = segments[:, :, None], segments[:, None, :]
    allowed = causal & ((seg_k == 0) | (seg_k == seg_q)) & (seg_k >= 0)
    allowed |= torch.eye(t, dtype=torch.bool, device=segments.device)  # padding sees itself
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segments.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]
