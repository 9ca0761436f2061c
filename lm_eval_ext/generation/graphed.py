"""Greedy decoding from a ``StaticCache``, the decode step replayed as one CUDA graph.

A small model's decode step is launch-bound. With a static cache every step has the same shapes
and addresses: the first runs eagerly, the second is recorded (``torch.cuda.graph``), later ones
replay it. The model gets a 4-D mask over the whole cache (a documented input). The host checks
for ended rows every :data:`CHECK_EVERY` steps and, once most have ended, moves the running rows
into a new ``StaticCache`` (``update``) and records again. Reference: docs/hf-metered.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from lm_eval_ext.generation.attention import (
    COMPACT_SHARE,
    MASKABLE_ATTENTION,
    DecodeForward,
    attention_kernel,
    layer_tensors,
    plain_layers,
    prompt_positions,
)

#: steps between the host's checks whether rows have ended (each check waits for the device)
CHECK_EVERY = 8
#: a check compacts the batch only when at least this many rows have ended
MIN_ENDED_TO_COMPACT = 8
#: a kept step serves a batch whose prompt plus new tokens fills at least this share of its cache
REUSE_SHARE = 0.8


@dataclasses.dataclass(frozen=True)
class StaticDecodeResult:
    """The new tokens of each row, and how the later steps ran."""

    tokens: list[list[int]]
    graph_problem: str | None  # why capture failed (the steps then ran eagerly), or None
    compactions: int = 0  # times the batch was cut to its running rows
    reused: bool = False  # the cache and step (replayed if captured) of an earlier batch
    captures: int = 0  # steps recorded as a CUDA graph (the batch's shape, then each compaction)


def static_decode_problem(model: Any) -> str | None:
    """Why this model cannot decode from a static cache in a CUDA graph (None: it can)."""
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
        return "quantized weights (their kernels synchronise with the host)"
    if not plain_layers(model):
        return "sliding-window attention layers"
    attention = attention_kernel(model)
    if attention not in MASKABLE_ATTENTION:
        return f"attention implementation {attention!r}"
    return None


def _captured(step: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """``step`` recorded once as a CUDA graph; calling the result replays it."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = step()

    def replay() -> torch.Tensor:
        graph.replay()
        return logits

    return replay


def compacted_cache(model: Any, cache: Any, keep: torch.Tensor, filled: int) -> Any:
    """A new ``StaticCache`` of ``cache``'s size holding rows ``keep``' first ``filled`` columns."""
    from transformers import StaticCache

    new = StaticCache(config=model.config, max_cache_len=cache.get_max_length())
    for index, (keys, values) in enumerate(layer_tensors(cache)):
        new.update(keys[keep, :, :filled], values[keep, :, :filled], index)
    return new


@dataclasses.dataclass
class _Rows:
    """The rows still in the batch: the step's inputs (read by address) and their tokens."""

    ids: torch.Tensor  # [rows, 1], the token the next step feeds
    positions: torch.Tensor  # [rows, 1]
    mask: torch.Tensor  # [rows, 1, 1, cache length]
    generated: torch.Tensor  # [rows, max_new_tokens]
    last: torch.Tensor  # each row's end step (max_new_tokens - 1 until it ends)
    ended: torch.Tensor
    number: torch.Tensor  # each row's place in the call

    def keep(self, keep: torch.Tensor) -> _Rows:
        """Only the rows ``keep``, in tensors of their own."""
        return _Rows(*(getattr(self, f.name)[keep].clone() for f in dataclasses.fields(self)))

    def finished(self, rows: torch.Tensor, out: dict[int, list[int]]) -> None:
        """Each of ``rows``' tokens up to its end, into ``out`` by its number."""
        for number, tokens, end in zip(self.number[rows].tolist(), self.generated[rows].tolist(),
                                       self.last[rows].tolist(), strict=True):
            out[number] = tokens[:end + 1]


@dataclasses.dataclass
class _KeptStep:
    """One batch shape's static cache, its step's inputs and their replay (if captured)."""

    cache: Any
    ids: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor  # [rows, 1, 1, cache length]
    replay: Callable[[], torch.Tensor] | None = None

    def fits(self, rows: int, length: int) -> bool:
        """Whether a batch of ``rows`` needing ``length`` cache columns can run on this step."""
        columns = self.mask.shape[-1]
        return rows == self.mask.shape[0] and REUSE_SHARE * columns <= length <= columns


class DecodeGraphs:
    """The last batch shape's cache and step, kept for the next batch that fits (one per task)."""

    def __init__(self) -> None:
        self.kept: _KeptStep | None = None

    def take(self, rows: int, length: int) -> _KeptStep | None:
        """The kept step, emptied, if a batch of ``rows`` needing ``length`` columns fits it."""
        if self.kept is not None and not self.kept.fits(rows, length):
            self.kept = None  # dropped before the batch allocates its own
        if self.kept is not None:
            self.kept.cache.reset()
        return self.kept

    def clear(self) -> None:
        """Drop the kept step (its cache and graph memory)."""
        self.kept = None


@torch.inference_mode()
def static_greedy_decode(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         max_new_tokens: int, eos_ids: Sequence[int], stop: Any = None,
                         cuda_graph: bool = True, compact: bool = True,
                         graphs: DecodeGraphs | None = None) -> StaticDecodeResult:
    """The new tokens of each (left-padded) row, the stopping token included.

    Args:
        model: A decoder-only transformers model without :func:`static_decode_problem`.
        input_ids: Left-padded prompts, ``[batch, width]``.
        attention_mask: Their mask (0 on padding).
        max_new_tokens: Most new tokens per row.
        eos_ids: Token ids that end a row.
        stop: A ``StopStringCriteria`` (or None), called on the new tokens: True ends a row.
        cuda_graph: Replay the step as a CUDA graph (from each batch shape's second step on).
        compact: At a check, cut the batch to its running rows once most have ended.
        graphs: Where a batch shape's cache and step are kept for (and taken from) a batch
            that fits; None: this call's own.
    """
    from transformers import StaticCache

    device = input_ids.device
    batch, width = input_ids.shape
    kept = graphs.take(batch, width + max_new_tokens) if graphs is not None else None
    reused = kept is not None
    cache = kept.cache if reused else StaticCache(config=model.config,
                                                  max_cache_len=width + max_new_tokens)
    forward = DecodeForward(model)
    positions = prompt_positions(attention_mask)
    logits = forward(cache, input_ids, attention_mask=attention_mask, position_ids=positions)
    sdpa = attention_kernel(model) == "sdpa"
    hidden = False if sdpa else torch.finfo(model.dtype).min
    if not reused:  # this batch's own step inputs (kept below if the step can be replayed)
        kept = _KeptStep(cache, input_ids.new_zeros((batch, 1)), positions[:, -1:].clone(),
                         torch.empty((batch, 1, 1, width + max_new_tokens),
                                     dtype=torch.bool if sdpa else model.dtype, device=device))
        if graphs is not None and not cuda_graph:
            graphs.kept = kept  # eager steps: the cache and the inputs are kept
    else:
        kept.positions.copy_(positions[:, -1:])
    kept.mask.fill_(hidden)
    kept.mask[:, 0, 0, :width].masked_fill_(attention_mask.bool(), not hidden if sdpa else 0.0)
    rows = _Rows(kept.ids, kept.positions, kept.mask, input_ids.new_zeros((batch, max_new_tokens)),
                 torch.full((batch,), max_new_tokens - 1, dtype=torch.long, device=device),
                 torch.zeros(batch, dtype=torch.bool, device=device),
                 torch.arange(batch, device=device))

    def step_of(r: _Rows, on: Any) -> Callable[[], torch.Tensor]:
        return lambda: forward(on, r.ids, attention_mask=r.mask, position_ids=r.positions)

    step = step_of(rows, cache)
    run = kept.replay or step  # a kept graph replays from the first step on
    capture_at = None if run is not step or not cuda_graph else 1
    compactions, captures, problem = 0, 0, None
    eos = torch.tensor(list(eos_ids), device=device, dtype=torch.long)
    out: dict[int, list[int]] = {}
    for index in range(max_new_tokens):  # the host waits only at every CHECK_EVERY-th step
        token = logits.float().argmax(-1)
        rows.generated[:, index] = token
        done = torch.isin(token, eos)
        if stop is not None:
            done |= stop(rows.generated[:, :index + 1], None).to(device)
        rows.last.masked_fill_(done & ~rows.ended, index)
        rows.ended |= done
        if index == max_new_tokens - 1:
            break
        if index % CHECK_EVERY == CHECK_EVERY - 1:
            running = int((~rows.ended).sum())
            if running == 0:
                break
            if (compact and running <= COMPACT_SHARE * len(rows.ended)
                    and len(rows.ended) - running >= MIN_ENDED_TO_COMPACT):
                rows.finished(rows.ended.nonzero().flatten(), out)
                keep = (~rows.ended).nonzero().flatten()
                token, rows = token[keep], rows.keep(keep)
                cache = compacted_cache(model, cache, keep, width + index)
                step = run = step_of(rows, cache)  # this step eagerly, the next one captured
                capture_at = index + 1 if cuda_graph else None
                compactions += 1
        rows.ids.copy_(token[:, None])
        rows.positions.add_(1)
        rows.mask[:, 0, 0, width + index] = True if sdpa else 0.0
        if index == capture_at and problem is None:
            try:  # the step before ran eagerly at this shape (the warm-up); record this one
                run, captures = _captured(step), captures + 1
            except RuntimeError as error:  # a host synchronisation inside the forward
                problem = f"CUDA graph capture failed: {str(error).splitlines()[0]}"
                run = step
            if graphs is not None and run is not step and compactions == 0:  # the batch's shape
                kept.replay, graphs.kept = run, kept
        logits = run()
    rows.finished(torch.arange(len(rows.ended), device=device), out)
    return StaticDecodeResult([out[i] for i in range(len(input_ids))], problem,
                              compactions, reused, captures)
