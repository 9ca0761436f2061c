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

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from lm_eval_ext.backends.derived_answers import DerivedAnswers
from lm_eval_ext.backends.hf.base import HFMeteredBase
from lm_eval_ext.backends.hf.context_room import check_room_for_scoring
from lm_eval_ext.backends.hf.scoring_graphs import ScoringGraphs, scoring_graph_problem
from lm_eval_ext.backends.hf.shared_prefix import MC_SCORING, SharedPrefixScorer, SharedPrefixStats
from lm_eval_ext.backends.model_args import (
    HFMeteredArgs,
    explicit_batch_size,
    recheck_fraction,
    strict_bool,
)
from lm_eval_ext.backends.parent_run import load_parent
from lm_eval_ext.errors import ConfigError, check_choice
from lm_eval_ext.generation.generator import (
    FastGenerationStats,
    FastGenerator,
    check_room_for_prompts,
)
from lm_eval_ext.generation.settings import DEFAULT_GENERATION, GENERATION, GenerationSettings


@dataclass(frozen=True)
class HFMeteredLMArgs(HFMeteredArgs):
    """hf-metered's own model args: the HF metered ones plus scoring and generation."""

    mc_scoring: str = "standard"
    generation: str = DEFAULT_GENERATION
    cuda_graphs: bool = True
    #: a parent run's results file to take batch-1 log-likelihood answers from
    answers_from: str | None = None
    #: the share of each derived task's items re-run (at least 10 items; None: 0.05)
    recheck: float | None = None
    #: seeds the re-check's draw (None: 0)
    recheck_seed: str | int | None = None

    def checked(self, model: str, lm_args: Mapping[str, Any]) -> Self:  # noqa: D102
        common = super().checked(model, lm_args)
        check_choice("model arg mc_scoring", self.mc_scoring, MC_SCORING)
        check_choice("model arg generation", self.generation, GENERATION)
        given = [name for name in ("recheck", "recheck_seed") if getattr(self, name) is not None]
        if given and self.answers_from is None:
            raise ConfigError(f"{model}: model arg {given[0]} applies to a run that takes its "
                              "answers from a parent (answers_from), which is not given: leave "
                              f"{given[0]} out, or add answers_from=<the parent's results file>")
        return dataclasses.replace(
            common, cuda_graphs=strict_bool(model, "cuda_graphs", self.cuda_graphs),
            recheck=recheck_fraction(model, 0.05 if self.recheck is None else self.recheck),
            recheck_seed=0 if self.recheck_seed is None else self.recheck_seed)

    def generation_settings(self, lm_args: Mapping[str, Any], on_cuda: bool) -> GenerationSettings:
        """The generator's settings: these args, lm-eval's batch args, where the model runs.

        lm-eval caps its auto batch at ``max_batch_size`` (default 64): only a cap the user gave
        bounds the generation plan, which is already sized to the memory.
        """
        return GenerationSettings(
            requested=self.generation,
            batch_size_asked=explicit_batch_size(lm_args.get("batch_size", 1)),
            max_batch_size=lm_args.get("max_batch_size"),
            cuda_graphs=self.cuda_graphs if on_cuda else None)  # recorded only where it applies


@register_model("hf-metered")
class HFMeteredLM(HFMeteredBase, HFLM):
    """``hf`` plus metering, precision, an embedded default model, packed scoring, fast generation.

    ``mc_scoring=shared_prefix`` scores a multiple-choice item's options in one forward;
    ``generation=fast`` generates in length-sorted batches sized to the memory, stopped by token.
    """

    MODEL_NAME = "hf-metered"
    OWN_ARGS = HFMeteredLMArgs

    def derivation(self, own: HFMeteredLMArgs, model_args: dict[str, Any],
                   lm_args: dict[str, Any]) -> DerivedAnswers | None:
        """``answers_from``: the parent's answers (checked: :func:`load_parent`), else None."""
        if own.answers_from is None:
            return None
        return DerivedAnswers(load_parent(own.answers_from, self.MODEL_NAME, model_args, lm_args),
                              own.recheck, own.recheck_seed)

    def compose(self, own: HFMeteredLMArgs, lm_args: dict[str, Any]) -> None:
        """The packed scorer and the generator, on the loaded model."""
        self.shared_prefix = SharedPrefixScorer(own.mc_scoring, self.MODEL_NAME,
                                                timed=self.metering.timed)
        self.shared_prefix.attach(self)
        on_cuda = torch.device(self.device).type == "cuda"
        self.fast_generation = FastGenerator(own.generation_settings(lm_args, on_cuda))
        self._loop_batch_size: int | None = None  # the generator's plan, while lm-eval's loop runs
        self.use_scoring_graphs(own.cuda_graphs)

    def check_requests(self, request_type: str, requests: Sequence[Any]) -> None:
        """Every generation prompt fits the model's length (all tasks' at once)."""
        if request_type == "generate_until":
            check_room_for_prompts(self, requests)

    # the one seam: a task's requests, inside its energy window ------------------------------
    def serve(self, request_type: str, requests: list, disable_tqdm: bool) -> list:
        """Generation through the generator, log-likelihoods through the scorer."""
        if request_type == "generate_until":
            with finite_first_logits(self.model, self.MODEL_NAME):
                return self.fast_generation.generate_until(self, requests, disable_tqdm,
                                                           self._standard_generate)
        if request_type == "loglikelihood":
            standard = super().serve
            return self.shared_prefix.loglikelihood(
                requests, lambda: standard(request_type, requests, disable_tqdm),
                super().tok_encode)
        return super().serve(request_type, requests, disable_tqdm)

    def _standard_generate(self, requests: list, disable_tqdm: bool,
                           batch_size: int | None) -> list[str]:
        """lm-eval's loop; ``batch_size``: the generator's plan for it (``--batch_size auto``)."""
        self._loop_batch_size = batch_size
        try:
            return super().serve("generate_until", requests, disable_tqdm)
        finally:
            self._loop_batch_size = None

    def _detect_batch_size(self, requests=None, pos: int = 0):
        """lm-eval's generation loop asks for its batch: the generator's plan, where it made one."""
        if requests is not None or self._loop_batch_size is None:
            return super()._detect_batch_size(requests, pos)
        self._probed_batch_sizes.append(self._loop_batch_size)
        return self._loop_batch_size

    # lm-eval's scoring seams, answered by the scorer ----------------------------------------
    def tok_encode(self, string: str, add_special_tokens: bool | None = None,
                   left_truncate_len: int | None = None, **kwargs: Any) -> list[int]:
        """lm-eval's ``tok_encode``, answered from the batch encoded for this request list."""
        cached = None if kwargs else self.shared_prefix.encoded(string, add_special_tokens,
                                                                left_truncate_len)
        if cached is None:
            return super().tok_encode(string, add_special_tokens, left_truncate_len, **kwargs)
        return cached

    def _model_call(self, inps, attn_mask=None, labels=None):
        """lm-eval's scoring forward, replayed as a CUDA graph where it fits (small batches)."""
        replay = self.scoring_graphs.replay_for(inps) if attn_mask is None and labels is None \
            else None
        if replay is not None:
            return self.metering.timed(replay)
        self.scoring_graphs.stats.not_replayed += 1
        return super()._model_call(inps, attn_mask=attn_mask, labels=labels)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False,
                              override_bs: int | None = None):  # noqa: D102
        check_room_for_scoring(self.max_length_asked, self.max_length, requests)
        return self.shared_prefix.loglikelihood_tokens(
            requests, disable_tqdm, override_bs, super()._loglikelihood_tokens)

    # reporting ------------------------------------------------------------------------------
    def scoring_stats(self) -> SharedPrefixStats:  # noqa: D102
        return self.shared_prefix.stats

    def generation_settings(self) -> GenerationSettings:  # noqa: D102
        return self.fast_generation.settings

    def execution_modes(self) -> dict[str, str]:
        """Scoring: packed, replayed or lm-eval's forward; generation: fast path or lm-eval's."""
        graphs, packed = self.scoring_graphs.stats, self.shared_prefix.stats
        scoring = ("shared_prefix" if packed.requests_packed else
                   "graph_replay" if graphs.replays else "lm_eval_forward")
        gen = self.fast_generation.stats
        generation = "+".join(
            ([("fast_generation_graphs" if gen.graph_batches else "fast_generation")]
             if gen.fast_requests else []) + (["lm_eval_generate"] if gen.standard_requests
                                              or not gen.fast_requests else []))
        return {**super().execution_modes(), "loglikelihood": scoring,
                "loglikelihood_rolling": "graph_replay" if graphs.replays else "lm_eval_forward",
                "generate_until": generation}

    def generation_stats(self) -> FastGenerationStats:  # noqa: D102
        return self.fast_generation.stats

    def metering_extras(self) -> dict[str, Any]:
        """The base fields plus how the scoring forwards ran (``scoring_graphs``)."""
        return {**super().metering_extras(),
                "scoring_graphs": dataclasses.asdict(self.scoring_graphs.stats)}

    def use_generation(self, settings: GenerationSettings) -> FastGenerator:
        """Generate under ``settings`` from now on, counting afresh; returns the generator before.

        For benchmarks and tests comparing generation paths on one loaded model, e.g.
        ``lm.use_generation(dataclasses.replace(lm.generation_settings(), cuda_graphs=False))``.
        """
        before, self.fast_generation = self.fast_generation, FastGenerator(settings)
        return before

    def use_scoring_graphs(self, enabled: bool) -> None:
        """Replay small scoring forwards as CUDA graphs where the model allows (or never).

        Set at load from ``cuda_graphs``; benchmarks compare both on one loaded model. Counts
        start afresh and recorded shapes are dropped.
        """
        self.scoring_graphs = ScoringGraphs(self.model, scoring_graph_problem(
            self.model, self.device, cuda_graphs=enabled,
            autocast=self.mixed_precision_dtype is not None, causal=self.backend == "causal"))

    def reset_metering(self) -> None:
        """Fresh windows and fresh generation counts (several conditions on one loaded model)."""
        super().reset_metering()
        self.fast_generation.reset_counts()
        self.scoring_graphs.reset_counts()


@contextlib.contextmanager
def finite_first_logits(model: torch.nn.Module, name: str) -> Iterator[None]:
    """A task's first forward (the prompts' prefill) must give finite logits.

    NaN logits (activations that overflowed, e.g. fp16) make every generation empty: lm-eval
    would score them as parse failures of the model. One check per task, through torch's
    public forward hook, on either generation path.
    """
    def check(module, args, output) -> None:
        handle.remove()
        logits = getattr(output, "logits", None)
        if isinstance(logits, torch.Tensor) and not bool(torch.isfinite(logits).all()):
            raise ConfigError(f"{name}: the model's logits are NaN or infinite (its numbers "
                              "overflowed, e.g. at precision=fp16), so every generation would "
                              "be empty; nothing was saved: run at precision=bf16 or fp32")

    handle = model.register_forward_hook(check)
    try:
        yield
    finally:
        handle.remove()
