"""The metered HF models' shared wiring: metering, precision and the chat-template policy.

Used by ``hf-metered`` and ``hf-multimodal-metered`` (lm-eval's HF model classes).

Every ``--model_args`` key of the underlying lm-eval class works unchanged; the added keys are
declared once per model class (``OWN_ARGS``: :class:`~lm_eval_ext.backends.model_args.HFMeteredArgs`
here, hf-metered's adds ``mc_scoring``, ``generation``, ``cuda_graphs``), documented in
``docs/hf-metered.md``. Each job lives in its own module; this class only wires them to
lm-eval's seams:

* metering (:mod:`~lm_eval_ext.metering`): per-task windows around the request
  methods, forward time of ``_model_call``/``_model_generate``, batch-size probes cut out;
* precision (:mod:`~lm_eval_ext.backends.precision`): dtype or bitsandbytes, verified;
* chat-template policy (:mod:`~lm_eval_ext.backends.chat_template`);
* argument checks (:mod:`~lm_eval_ext.backends.model_args`), before any model load.

Energy boundary: for each (task, request type) the meter brackets the model's request loop
(tokenisation, batching, forward passes / generation) between CUDA-synchronised edges.
Model load, data preparation, prompt building, metrics, judging and file writing are outside;
automatic batch-size probes are cut out; ``--use_cache`` hits never reach the model.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lm_eval.utils import simple_parse_args_string

from lm_eval_ext.backends.chat_template import ChatTemplatePolicy
from lm_eval_ext.backends.engine_key import load_key
from lm_eval_ext.backends.metered_lm import MeteredLM
from lm_eval_ext.backends.model_args import HFMeteredArgs, check_unknown_args
from lm_eval_ext.backends.precision import (
    PrecisionPlan,
    plan_precision,
    say_quantisation_notes_once,
    verify_precision,
)
from lm_eval_ext.backends.warm import WarmModel
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.generation.generator import generation_record
from lm_eval_ext.metering.codecarbon_check import CodeCarbonCheck

if TYPE_CHECKING:
    from lm_eval_ext.backends.derived_answers import DerivedAnswers
    from lm_eval_ext.backends.hf.shared_prefix import SharedPrefixStats
    from lm_eval_ext.generation.generator import FastGenerationStats
    from lm_eval_ext.generation.settings import GenerationSettings


def parameter_cuda_devices(model: Any) -> list[int]:
    """Every CUDA device holding parameters (several with ``parallelize=True``/``device_map``)."""
    return sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})


class HFMeteredBase(MeteredLM):
    """Metering, precision switches and the chat-template policy on an lm-eval HF model class.

    The one ``__init__`` of the HF metered models: it takes the class's declared own args
    (``OWN_ARGS``) out of the model args, checks them, loads the model through lm-eval's class,
    starts metering and calls :meth:`compose` for what a subclass adds (hf-metered: the
    scorer and the generator).
    """

    MODEL_NAME = "hf-metered"
    INFO_KEY = "hf_metered"
    OWN_ARGS: type[HFMeteredArgs] = HFMeteredArgs

    def __init__(self, **model_args: Any):
        own, self._plan, lm_args = self.checked_args(model_args)
        self.derived = self.derivation(own, model_args, lm_args)  # before the load: no load lost
        self.chat = ChatTemplatePolicy(own.chat_template, self.MODEL_NAME)
        self._probed_batch_sizes: list[int] = []  # generate_until keeps its probe result local
        #: a max_length the user gave (None: the model's own): it must hold every prompt
        self.max_length_asked = lm_args.get("max_length")
        self.start_metered(
            own.pretrained, functools.partial(self._load, lm_args),
            lambda: parameter_cuda_devices(self.model),
            load_key=load_key(self.MODEL_NAME, model_args), energy=own.energy,
            idle_seconds=own.idle_seconds, sync=own.sync, power_check=own.power_check,
            codecarbon=self._codecarbon(own))
        self.compose(own, lm_args)
        self.check_derived_weights()
        self.announce()

    def _load(self, lm_args: dict[str, Any], pretrained: str, kept: WarmModel | None) -> None:
        """lm-eval's HF class on the weights or on a kept model; then the precision, verified.

        A kept model goes in by lm-eval's documented path: HFLM takes a PreTrainedModel and
        its tokenizer.
        """
        if kept is not None:
            pretrained, lm_args = kept.model, {**lm_args, "tokenizer": kept.tokenizer}
        super().__init__(pretrained=pretrained, dtype=self._plan.dtype, **lm_args)
        self._precision, self._quantized_modules = verify_precision(self.model, self._plan)
        if self._plan.quantization:
            say_quantisation_notes_once()

    @staticmethod
    def _codecarbon(own: HFMeteredArgs) -> Callable[[list[int]], Any] | None:
        """CodeCarbon's cross-check on the model's GPUs, when asked for."""
        if not own.codecarbon:
            return None
        country, region = own.codecarbon_location()
        return lambda cuda: CodeCarbonCheck(
            cuda or None, country_iso_code=country, region=region,
            carbon_intensity_g_per_kwh=own.carbon_intensity)

    @classmethod
    def checked_args(cls, model_args: dict[str, Any]
                     ) -> tuple[HFMeteredArgs, PrecisionPlan, dict[str, Any]]:
        """This class's own args checked, the precision plan, and lm-eval's args (no ``dtype``).

        Loads nothing; raises ConfigError with the fix.
        """
        own, lm_args = cls.OWN_ARGS.split(model_args)
        check_unknown_args(cls.MODEL_NAME, cls, lm_args, own=cls.OWN_ARGS.names())
        own = own.checked(cls.MODEL_NAME, lm_args)
        plan = plan_precision(own.precision, lm_args.pop("dtype", "auto"), lm_args)
        return own, plan, lm_args

    @classmethod
    def check_model_args(cls, model_args: str | dict[str, Any]) -> None:
        """Validate ``--model_args`` as the constructor would, loading nothing.

        For dry runs and for commands that start many runs (campaign, grid, sequential).

        Raises:
            ConfigError: The first problem, with the fix.
        """
        if isinstance(model_args, str):
            parts = [part for part in model_args.split(",") if part.strip()]
            bad = [part for part in parts if "=" not in part]
            if bad:
                raise ConfigError(f"{cls.MODEL_NAME}: model_args part {bad[0]!r} is not "
                                  "KEY=VALUE (e.g. precision=bf16,batch_size=8)")
            keys = [part.partition("=")[0].strip() for part in parts]
            twice = next((key for key in keys if keys.count(key) > 1), None)
            if twice is not None:
                raise ConfigError(f"{cls.MODEL_NAME}: model arg {twice} is given twice (the "
                                  f"second would win without a word); give {twice} once")
            model_args = simple_parse_args_string(model_args)
        cls.checked_args(dict(model_args))

    def derivation(self, own: HFMeteredArgs, model_args: dict[str, Any],
                   lm_args: dict[str, Any]) -> DerivedAnswers | None:
        """Answers a subclass takes from a parent run, checked before the load (none here)."""
        return None

    def compose(self, own: HFMeteredArgs, lm_args: dict[str, Any]) -> None:
        """What a subclass adds once the model is loaded and metered (nothing here)."""

    # each subclass says how it scores and generates (header and config.metering)
    def scoring_stats(self) -> SharedPrefixStats:
        """What log-likelihood scoring did."""
        raise NotImplementedError

    def generation_settings(self) -> GenerationSettings:
        """How generation runs."""
        raise NotImplementedError

    def generation_stats(self) -> FastGenerationStats:
        """What generation did."""
        raise NotImplementedError

    def header(self) -> str:
        """One line printed at start: what this model adds to the lm-eval model it wraps."""
        synced = ", ".join(self.metering.synced_devices) or "none"
        source = self.metering.meter.source
        why = f": {source.reason}" if getattr(source, "reason", None) else ""
        return (f"[{self.MODEL_NAME}] precision={self._precision}; "
                f"energy={source.name}{why} (inference windows only, synced: "
                f"{synced}); {self.chat.describe(self.tokenizer)}; {self.generation_settings().policy()}; "
                f"{self.scoring_stats().policy()}.")

    def start_line(self) -> str:
        """The one short line printed at start.

        :meth:`header` (recorded as ``config.hf_metered.adds``) has the whole description.
        """
        source = self.metering.meter.source
        reason = str(getattr(source, "reason", "") or "").split(" (")[0]
        energy = f"{source.name} ({reason})" if reason else source.name
        return (f"[{self.MODEL_NAME}] precision={self._precision}, energy={energy}, "
                f"generation={self.generation_settings().requested}; the full description is "
                "config.hf_metered.adds in the results file")

    def reset_metering(self) -> None:  # noqa: D102
        super().reset_metering()
        self._probed_batch_sizes = []

    # precision: HFLM passes the checkpoint's own quantization_config explicitly
    def _create_model(self, *args: Any, quantization_config: Any = None, **kwargs: Any) -> None:
        bnb = self._plan.bnb_config()
        super()._create_model(*args, quantization_config=bnb or quantization_config, **kwargs)

    # metering seams -------------------------------------------------------------------------
    def _detect_batch_size(self, requests=None, pos: int = 0):
        """lm-eval's automatic batch-size probe, run outside the energy window."""
        with self.metering.excluded():
            found = super()._detect_batch_size(requests, pos)
        self._probed_batch_sizes.append(found)
        return found

    def _model_call(self, *args: Any, **kwargs: Any):  # noqa: D102
        return self.metering.timed(super()._model_call, *args, **kwargs)

    def _model_generate(self, *args: Any, **kwargs: Any):  # noqa: D102
        return self.metering.timed(super()._model_generate, *args, **kwargs)

    # reporting ------------------------------------------------------------------------------
    def metering_extras(self) -> dict[str, Any]:
        """Precision, batch sizes, load time and scoring added to ``config.metering``."""
        return {
            "precision": self._precision,
            "model_device": str(self.device),  # lm-eval's config.device is its CLI default
            "batch_size": self.batch_size_per_gpu,
            "batch_sizes_detected": list(getattr(self, "batch_sizes", {}).values())
            or list(self._probed_batch_sizes),
            "load_seconds": self._load_seconds,
            "quantized_modules": self._quantized_modules,
            "mc_scoring": dataclasses.asdict(self.scoring_stats()),
            "generation": generation_record(self.generation_settings(), self.generation_stats()),
        }
