"""``hf-metered``: lm-eval's HF model with inference-only energy metering per task.

``lm_eval --model hf-metered`` with no ``pretrained`` runs the embedded SmolLM2-135M-Instruct
(:mod:`lm_eval_ext.backends.embedded_model`). Every ``--model hf`` model arg works; the
extra ones (:class:`HFMeteredLMArgs`) and the energy boundary are in
:mod:`lm_eval_ext.backends.hf.base` and ``docs/hf-metered.md``.

``HFMeteredLM`` is :class:`~lm_eval_ext.backends.metered_lm.MeteredLM` over lm-eval's ``HFLM``
holding its parts as objects: the chat-template policy (``self.chat``), the packed scorer
(``self.shared_prefix``, :mod:`~lm_eval_ext.backends.hf.shared_prefix`) and the generator
(``self.fast_generation``, :mod:`~lm_eval_ext.generation`). Requests reach them through one
seam, :meth:`serve`, inside each task's energy window.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from lm_eval_ext.backends.hf.base import HFMeteredBase
from lm_eval_ext.backends.hf.shared_prefix import MC_SCORING, SharedPrefixScorer, SharedPrefixStats
from lm_eval_ext.backends.model_args import HFMeteredArgs, explicit_batch_size, strict_bool
from lm_eval_ext.errors import check_choice
from lm_eval_ext.generation.generator import (
    DEFAULT_GENERATION,
    GENERATION,
    FastGenerationStats,
    FastGenerator,
    generation_tokens,
    planned_batch_size,
)


@dataclass(frozen=True)
class HFMeteredLMArgs(HFMeteredArgs):
    """hf-metered's own model args: the HF metered ones plus scoring and generation."""

    mc_scoring: str = "standard"
    generation: str = DEFAULT_GENERATION
    cuda_graphs: bool = True

    def checked(self, model: str, lm_args: Mapping[str, Any]) -> Self:  # noqa: D102
        common = super().checked(model, lm_args)
        check_choice("model arg mc_scoring", self.mc_scoring, MC_SCORING)
        check_choice("model arg generation", self.generation, GENERATION)
        return dataclasses.replace(common,
                                   cuda_graphs=strict_bool(model, "cuda_graphs", self.cuda_graphs))


@register_model("hf-metered")
class HFMeteredLM(HFMeteredBase, HFLM):
    """``hf`` plus metering, precision, an embedded default model, packed scoring, fast generation.

    ``mc_scoring=shared_prefix`` scores a multiple-choice item's options in one forward;
    ``generation=fast`` generates in length-sorted batches sized to the memory, stopped by token.
    """

    MODEL_NAME = "hf-metered"
    OWN_ARGS = HFMeteredLMArgs

    def compose(self, own: HFMeteredLMArgs, lm_args: dict[str, Any]) -> None:
        """The packed scorer and the generator, on the loaded model."""
        self.shared_prefix = SharedPrefixScorer(own.mc_scoring, self.MODEL_NAME,
                                                timed=self.metering.timed)
        self.shared_prefix.attach(self)
        # lm-eval caps its auto batch at max_batch_size (default 64): only a cap the user gave
        # bounds the generation plan, which is already sized to the memory
        self._max_batch_size_given: int | None = lm_args.get("max_batch_size")
        self.fast_generation = FastGenerator(own.generation, self.MODEL_NAME,
                                             explicit_batch_size(lm_args.get("batch_size", 1)),
                                             self._max_batch_size_given, own.cuda_graphs)
        if torch.device(self.device).type != "cuda":  # recorded only where it applies
            self.fast_generation.stats.cuda_graphs = None
        self._generation_plan: tuple[int, int] | None = None

    # the one seam: a task's requests, inside its energy window ------------------------------
    def serve(self, request_type: str, requests: list, disable_tqdm: bool) -> list:
        """Generation through the generator, log-likelihoods through the scorer."""
        if request_type == "generate_until":
            return self.fast_generation.generate_until(self, requests, disable_tqdm,
                                                       self._standard_generate)
        if request_type == "loglikelihood":
            standard = super().serve
            return self.shared_prefix.loglikelihood(
                requests, lambda: standard(request_type, requests, disable_tqdm),
                super().tok_encode)
        return super().serve(request_type, requests, disable_tqdm)

    def _standard_generate(self, requests: list, disable_tqdm: bool) -> list[str]:
        """lm-eval's loop; with ``--batch_size auto`` its batch is planned for these requests.

        lm-eval's own probe runs a batch at the model's maximum length, far longer than a
        prompt plus ``max_gen_toks``, and so picks a batch several times too small for
        generation; the plan uses the longest real prompt (:func:`planned_batch_size`).
        """
        if self.batch_size == "auto" and requests:
            self._generation_plan = (generation_tokens(self, requests), len(requests))
        try:
            return super().serve("generate_until", requests, disable_tqdm)
        finally:
            self._generation_plan = None

    def probe_batch_size(self, requests=None, pos: int = 0) -> int:
        """The generation plan while lm-eval's loop generates; else lm-eval's probe."""
        if self._generation_plan is None or requests is not None:
            return super().probe_batch_size(requests, pos)
        tokens, n_requests = self._generation_plan
        return planned_batch_size(self, tokens, n_requests, cap=self._max_batch_size_given)

    # lm-eval's scoring seams, answered by the scorer ----------------------------------------
    def tok_encode(self, string: str, add_special_tokens: bool | None = None,
                   left_truncate_len: int | None = None, **kwargs: Any) -> list[int]:
        """lm-eval's ``tok_encode``, answered from the batch encoded for this request list."""
        cached = None if kwargs else self.shared_prefix.encoded(string, add_special_tokens,
                                                                left_truncate_len)
        if cached is None:
            return super().tok_encode(string, add_special_tokens, left_truncate_len, **kwargs)
        return cached

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False,
                              override_bs: int | None = None):  # noqa: D102
        return self.shared_prefix.loglikelihood_tokens(
            requests, disable_tqdm, override_bs, super()._loglikelihood_tokens)

    # reporting ------------------------------------------------------------------------------
    def scoring_stats(self) -> SharedPrefixStats:  # noqa: D102
        return self.shared_prefix.stats

    def generation_stats(self) -> FastGenerationStats:  # noqa: D102
        return self.fast_generation.stats

    def reset_metering(self) -> None:
        """Fresh windows and fresh generation counts (several conditions on one loaded model)."""
        super().reset_metering()
        self.fast_generation.reset_counts()
