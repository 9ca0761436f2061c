"""How a model generates, fixed when it loads; kept apart from what the runs counted.

:class:`GenerationSettings` holds what the user asked for (the ``generation`` and
``cuda_graphs`` model args, the batch size) and the knobs a benchmark turns instead of patching
(eager steps: ``cuda_graphs=False``; another decode: :class:`Decoders`; the CPU pool's
``admit_at``). ``config.metering.generation`` records the asked-for part beside the counts
(:meth:`GenerationSettings.recorded`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from lm_eval_ext.errors import check_choice
from lm_eval_ext.generation.graphed import (
    DecodeGraphs,
    StaticDecodeResult,
    static_decode_problem,
    static_greedy_decode,
)
from lm_eval_ext.generation.greedy import greedy_decode

GENERATION = ("standard", "fast")
#: the default path: fast (same text as lm-eval's loop in fp32; measured in docs/hf-metered.md)
DEFAULT_GENERATION = "fast"
#: batch size on the CPU (a step reads every weight; a larger batch shares the read)
CPU_BATCH = 32
#: on the CPU with a planned batch, the next batch's rows join once at most this many run
CPU_ADMIT_AT = CPU_BATCH // 2


@dataclasses.dataclass(frozen=True)
class Decoders:
    """The decode functions the generator runs (a benchmark passes its own to compare).

    ``eager`` takes :func:`~.greedy.greedy_decode`'s arguments, ``graphed``
    :func:`~.graphed.static_greedy_decode`'s, ``graph_problem``
    :func:`~.graphed.static_decode_problem`'s; ``graphs`` makes a task's shared graph store.
    """

    eager: Callable[..., list[list[int]]] = greedy_decode
    graphed: Callable[..., StaticDecodeResult] = static_greedy_decode
    graph_problem: Callable[[Any], str | None] = static_decode_problem
    graphs: Callable[[], DecodeGraphs] = DecodeGraphs


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """How the generator runs; built once per loaded model (``dataclasses.replace`` for another).

    Args:
        requested: The ``generation`` model arg, ``fast`` or ``standard``.
        batch_size_asked: A batch size the user typed (every batch's size), or None: planned.
        max_batch_size: A cap the user gave with ``--batch_size auto``, or None.
        cuda_graphs: On a GPU, decode by CUDA-graph replays where the model allows it (False:
            eager steps); None on a model off the GPU (it does not apply).
        admit_at: On the CPU with a planned batch, the next batch's rows join once at most this
            many rows run (0: each batch is decoded to its end first).
        decoders: The decode functions.
    """

    requested: str = "standard"
    batch_size_asked: int | None = None
    max_batch_size: int | None = None
    cuda_graphs: bool | None = True
    admit_at: int = CPU_ADMIT_AT
    decoders: Decoders = Decoders()

    def __post_init__(self) -> None:
        check_choice("model arg generation", self.requested, GENERATION)

    def recorded(self) -> dict[str, Any]:
        """What ``config.metering.generation`` records of the settings (beside the counts)."""
        return {"requested": self.requested, "batch_size_asked": self.batch_size_asked,
                "cuda_graphs": self.cuda_graphs}

    def policy(self) -> str:
        """A phrase for the start-up header."""
        if self.requested == "standard":
            return "generation requests through lm-eval's own loop"
        return ("greedy generation requests in length-sorted batches sized to the memory, "
                "stopped by token (generation=fast; other requests: lm-eval's loop)")
