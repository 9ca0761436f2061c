"""hf-metered's seam for fast generation: ``generate_until`` through a :class:`FastGenerator`.

The generator (:mod:`lm_eval_ext.generation.generator`) knows nothing of lm-eval's model
classes; this mixin owns the ``generation`` and ``cuda_graphs`` model args and sits in the
MRO where the fast path runs inside the metering window and after the chat template.
"""

from __future__ import annotations

from typing import Any

import torch

from lm_eval_ext.backends.model_args import explicit_batch_size, strict_bool
from lm_eval_ext.errors import check_choice
from lm_eval_ext.generation.generator import (
    DEFAULT_GENERATION,
    GENERATION,
    FastGenerator,
    generation_tokens,
    planned_batch_size,
)


class FastGeneration:
    """Mixin over lm-eval's HF model: ``generate_until`` through :class:`FastGenerator`.

    Place it after the metering mixin (the fast path then runs inside the task's energy window)
    and before ``HFLM``.
    """

    @classmethod
    def check_own_model_args(cls, args: dict[str, Any]) -> None:
        """``generation``'s value (for a dry run; the generator checks it again at load)."""
        check_choice("model arg generation", args.get("generation", DEFAULT_GENERATION),
                     GENERATION)
        strict_bool(cls.__name__, "cuda_graphs", args.get("cuda_graphs", True))

    def __init__(self, *args: Any, generation: str = DEFAULT_GENERATION,
                 cuda_graphs: bool = True, **kwargs: Any):
        # lm-eval caps its auto batch at max_batch_size (default 64): only a cap the user gave
        # bounds the generation plan, which is already sized to the memory
        self._max_batch_size_given: int | None = kwargs.get("max_batch_size")
        self.fast_generation = FastGenerator(generation,
                                             getattr(self, "MODEL_NAME", type(self).__name__),
                                             explicit_batch_size(kwargs.get("batch_size", 1)),
                                             self._max_batch_size_given,
                                             strict_bool(type(self).__name__, "cuda_graphs",
                                                         cuda_graphs))
        self._generation_plan: tuple[int, int] | None = None
        super().__init__(*args, **kwargs)
        if torch.device(self.device).type != "cuda":  # recorded only where it applies
            self.fast_generation.stats.cuda_graphs = None

    def generate_until(self, requests, disable_tqdm: bool = False):  # noqa: D102
        return self.fast_generation.generate_until(self, requests, disable_tqdm,
                                                   self._standard_generate)

    def _standard_generate(self, requests: list, disable_tqdm: bool) -> list[str]:
        """lm-eval's loop; with ``--batch_size auto`` its batch is planned for these requests.

        lm-eval's own probe runs a batch at the model's maximum length, far longer than a
        prompt plus ``max_gen_toks``, and so picks a batch several times too small for
        generation; the plan uses the longest real prompt (:func:`planned_batch_size`).
        """
        if self.batch_size == "auto" and requests:
            self._generation_plan = (generation_tokens(self, requests), len(requests))
        try:
            return super().generate_until(requests, disable_tqdm)
        finally:
            self._generation_plan = None

    def _detect_batch_size(self, requests=None, pos: int = 0):  # noqa: D102
        if self._generation_plan is None or requests is not None:
            return super()._detect_batch_size(requests, pos)
        tokens, n_requests = self._generation_plan
        return planned_batch_size(self, tokens, n_requests, cap=self._max_batch_size_given)
