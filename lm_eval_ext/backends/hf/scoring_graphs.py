"""lm-eval's scoring forward replayed as CUDA graphs, one per batch shape.

HFLM scores log-likelihoods with ``model(ids).logits`` over right-padded rows (no mask). At
batch 1 that forward is launch-bound on a GPU (SmolLM2-135M: 16.9 ms eager against 3.7 ms
replayed; the whole instrument on one H200: docs/campaigns.md, the stress test). lm-eval sorts
its requests by length, so the same ``[rows, length]`` shape comes many times in a row: its
first forward runs as lm-eval runs it (the warm-up), its second is recorded with
``torch.cuda.graph`` and every later one copies the ids into the recorded input and replays.
Shapes are never padded: a replay runs the kernels lm-eval's own forward runs on the same shape,
so the logits are the same (checked on the GPU: tests/test_gpu_decode.py).

Not replayed (lm-eval's own forward runs): more than :data:`MAX_ROWS` rows, a model off CUDA,
``cuda_graphs=false``, lm-eval's autocast (``mixed_precision_dtype``) and bitsandbytes int8,
whose outlier split reads its input on the host in every linear layer. A capture that fails is
named and the run goes on with lm-eval's forward.

The graphs share one memory pool: they never run concurrently and each output is read (lm-eval
takes ``log_softmax`` of it) before the next replay. At most :data:`MAX_KEPT` shapes are kept,
the least recently used dropped first.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

#: larger batches run lm-eval's own forward (they are not launch-bound)
MAX_ROWS = 8
#: recorded shapes kept at once (lm-eval's length-sorted order needs one at a time)
MAX_KEPT = 16


@dataclasses.dataclass
class ScoringGraphStats:
    """How scoring forwards ran: replayed graphs, captures, lm-eval's own forward."""

    problem: str | None = None  # why no forward is replayed (None: they are, where they fit)
    captures: int = 0
    replays: int = 0
    not_replayed: int = 0  # scoring forwards lm-eval's own code ran
    shapes_seen: int = 0  # distinct [rows, length] shapes of the forwards served here


def int8_quantized(model: Any) -> bool:
    """Whether ``model`` was loaded with bitsandbytes int8 (its ``quantization_config``)."""
    config = getattr(getattr(model, "config", None), "quantization_config", None)
    if isinstance(config, dict):
        return bool(config.get("load_in_8bit"))
    return bool(getattr(config, "load_in_8bit", False))


def scoring_graph_problem(model: Any, device: torch.device, *, cuda_graphs: bool,
                          autocast: bool = False, causal: bool = True) -> str | None:
    """Why this model's scoring forward is not replayed as a CUDA graph (None: it is)."""
    if not cuda_graphs:
        return "cuda_graphs=false"
    if torch.device(device).type != "cuda":
        return "the model is not on a CUDA device"
    if not causal:
        return "not a decoder-only model (lm-eval passes an encoder mask)"
    if autocast:
        return "lm-eval's mixed_precision_dtype autocast"
    if int8_quantized(model):
        return "bitsandbytes int8: its outlier split synchronises with the host in every layer"
    return None


@dataclasses.dataclass
class _Shape:
    """One recorded shape: its static ids and its replay (or, uncaptured, its forward)."""

    ids: torch.Tensor
    run: Callable[[], torch.Tensor]


class ScoringGraphs:
    """``model(ids).logits`` for small right-padded batches, replayed per ``[rows, length]``.

    Args:
        model: The loaded transformers model.
        problem: Why nothing is replayed (:func:`scoring_graph_problem`); None: replay.
        capture: Record CUDA graphs (False: the recorded shape runs the forward again, for
            tests of the bookkeeping without a GPU).
    """

    def __init__(self, model: Any, problem: str | None, *, capture: bool = True,
                 max_rows: int = MAX_ROWS, max_kept: int = MAX_KEPT):
        self.model = model
        self.capture = capture
        self.max_rows, self.max_kept = max_rows, max_kept
        self.stats = ScoringGraphStats(problem=problem)
        self._shapes: OrderedDict[tuple[int, int], _Shape] = OrderedDict()
        self._seen: set[tuple[int, int]] = set()
        self._pool: Any = None

    def replay_for(self, ids: torch.Tensor) -> Callable[[], torch.Tensor] | None:
        """A call giving the logits ``[rows, length, vocab]`` of ``ids`` by replay, or None.

        The logits are valid until the next replay. None: lm-eval's own forward is to run (the
        shape's first forward, a batch larger than ``max_rows``, a problem, or a capture that
        just failed: :attr:`stats` names it).
        """
        key = (int(ids.shape[0]), int(ids.shape[1]))
        if self.stats.problem is not None or key[0] > self.max_rows:
            return None
        shape = self._shapes.get(key)
        if shape is None:
            if key not in self._seen:  # the warm-up: lm-eval's forward at this shape
                self._seen.add(key)
                self.stats.shapes_seen += 1
                return None
            try:
                shape = self._recorded(ids)
            except RuntimeError as error:  # a host synchronisation inside the forward
                self.stats.problem = f"CUDA graph capture failed: {str(error).splitlines()[0]}"
                self.forget()
                return None
            self._shapes[key] = shape
            while len(self._shapes) > self.max_kept:
                self._shapes.popitem(last=False)
        self._shapes.move_to_end(key)
        self.stats.replays += 1

        def replay() -> torch.Tensor:
            shape.ids.copy_(ids)
            return shape.run()

        return replay

    def reset_counts(self) -> None:
        """Count afresh (the recorded shapes and any problem stay)."""
        self.stats = ScoringGraphStats(problem=self.stats.problem)

    def forget(self) -> None:
        """Drop every recorded shape (its buffers and graph memory)."""
        self._shapes.clear()
        self._pool = None

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.model(ids).logits

    def _recorded(self, example: torch.Tensor) -> _Shape:
        ids = example.clone()
        if not self.capture:
            return _Shape(ids, lambda: self._forward(ids))
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self._forward(ids)
        self.stats.captures += 1

        def replay() -> torch.Tensor:
            graph.replay()
            return logits

        return _Shape(ids, replay)
