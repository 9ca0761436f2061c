"""The metered HF models' shared wiring: metering, precision and the chat-template policy.

Used by ``hf-metered`` and ``hf-multimodal-metered`` (lm-eval's HF model classes).

Every ``--model_args`` key of the underlying lm-eval class works unchanged; the added keys are
this class's ``__init__`` keywords (and ``mc_scoring`` on ``hf-metered``), documented in
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
import inspect
import sys
import time
from typing import Any

from lm_eval.utils import simple_parse_args_string

from lm_eval_ext.backends import embedded_model, packaged_models
from lm_eval_ext.backends.chat_template import ChatTemplated, ChatTemplatePolicy
from lm_eval_ext.backends.hf.shared_prefix import SharedPrefixStats
from lm_eval_ext.backends.model_args import (
    MergedModelArgs,
    OwnArgs,
    check_unknown_args,
    validate_own_args,
)
from lm_eval_ext.backends.model_info import wrapper_info
from lm_eval_ext.backends.precision import PrecisionPlan, plan_precision, verify_precision
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.generation.generator import FastGenerationStats
from lm_eval_ext.metering import MeteredLM, Metering
from lm_eval_ext.metering.codecarbon_check import CodeCarbonCheck

#: constructor keywords that only configure reporting (nothing to check before a load)
_NOT_CHECKED = ("self", "kwargs", "codecarbon_country", "codecarbon_region")


def parameter_cuda_devices(model: Any) -> list[int]:
    """Every CUDA device holding parameters (several with ``parallelize=True``/``device_map``)."""
    return sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})


class HFMeteredBase(MergedModelArgs, ChatTemplated, MeteredLM):
    """Metering, precision switches and the chat-template policy on an lm-eval HF model class."""

    MODEL_NAME = "hf-metered"
    EMBEDDED_DEFAULT = True  # no ``pretrained``: use the embedded SmolLM2

    def __init__(self, pretrained: Any = None, chat_template: str = "auto",
                 precision: str | None = None, energy: str = "auto", idle_seconds: float = 3.0,
                 sync: bool = True, codecarbon: bool = False, codecarbon_country: str = "CAN",
                 codecarbon_region: str | None = "ontario",
                 carbon_intensity: float | None = None, **kwargs: Any):
        self._chat, own, self._plan = self._checked_args(
            pretrained, chat_template, precision, energy, idle_seconds, sync, codecarbon,
            carbon_intensity, kwargs)
        self._check_mixin_args(kwargs)  # before the embedded model is converted or loaded
        self._probed_batch_sizes: list[int] = []  # generate_until keeps its probe result local
        self._embedded = pretrained is None
        if self._embedded:
            pretrained = str(embedded_model.ensure_checkpoint())
        pretrained, self._packaged = packaged_models.resolve(pretrained)
        started = time.perf_counter()
        super().__init__(pretrained=pretrained, dtype=self._plan.dtype, **kwargs)
        self._load_seconds = time.perf_counter() - started
        self._precision, self._quantized_modules = verify_precision(self.model, self._plan)
        cuda = parameter_cuda_devices(self.model)
        self.metering = Metering.start(
            cuda, energy=own.energy, sync=own.sync, idle_seconds=own.idle_seconds,
            codecarbon=CodeCarbonCheck(
                cuda or None, country_iso_code=codecarbon_country, region=codecarbon_region,
                carbon_intensity_g_per_kwh=own.carbon_intensity) if own.codecarbon else None)
        print(self.start_line(), file=sys.stderr, flush=True)

    @classmethod
    def _checked_args(cls, pretrained: Any, chat_template: str, precision: str | None, energy: str,
                      idle_seconds: Any, sync: Any, codecarbon: Any, carbon_intensity: Any,
                      kwargs: dict[str, Any]) -> tuple[ChatTemplatePolicy, OwnArgs, PrecisionPlan]:
        """Every check of this class's own args (pops ``dtype`` from ``kwargs``); loads nothing."""
        check_unknown_args(cls.MODEL_NAME, cls, kwargs)
        chat = ChatTemplatePolicy(chat_template, cls.MODEL_NAME)
        own = validate_own_args(
            cls.MODEL_NAME, pretrained=pretrained, energy=energy, idle_seconds=idle_seconds,
            sync=sync, codecarbon=codecarbon, carbon_intensity=carbon_intensity,
            batch_size=kwargs.get("batch_size", 1), device=kwargs.get("device"))
        packaged_models.check_available(pretrained)
        plan = plan_precision(precision, kwargs.pop("dtype", "auto"), kwargs)
        if pretrained is None and not cls.EMBEDDED_DEFAULT:
            raise ConfigError(f"{cls.MODEL_NAME}: pass --model_args pretrained=<model> "
                              "(there is no embedded default for this model type)")
        return chat, own, plan

    @classmethod
    def check_own_model_args(cls, args: dict[str, Any]) -> None:
        """This class's part of :meth:`check_model_args`."""
        bound = inspect.signature(HFMeteredBase.__init__).bind(None, **args)
        bound.apply_defaults()
        given = {k: v for k, v in bound.arguments.items() if k not in _NOT_CHECKED}
        cls._checked_args(**given, kwargs=dict(bound.arguments["kwargs"]))

    @classmethod
    def check_model_args(cls, model_args: str | dict[str, Any]) -> None:
        """Validate ``--model_args`` as the constructor would, loading nothing.

        For dry runs and for commands that start many runs (campaign, grid, sequential): each
        class along the MRO that owns args checks them (``check_own_model_args``).

        Raises:
            ConfigError: The first problem, with the fix.
        """
        if isinstance(model_args, str):
            parts = [part for part in model_args.split(",") if part.strip()]
            bad = [part for part in parts if "=" not in part]
            if bad:
                raise ConfigError(f"{cls.MODEL_NAME}: model_args part {bad[0]!r} is not "
                                  "KEY=VALUE (e.g. precision=bf16,batch_size=8)")
            model_args = simple_parse_args_string(model_args)
        HFMeteredBase.check_own_model_args.__func__(cls, dict(model_args))
        cls._check_mixin_args(model_args)

    @classmethod
    def _check_mixin_args(cls, args: dict[str, Any]) -> None:
        """The args owned by the other classes along the MRO (e.g. ``mc_scoring``)."""
        for klass in cls.__mro__:
            check = klass.__dict__.get("check_own_model_args")
            if check is not None and klass is not HFMeteredBase:
                check.__func__(cls, dict(args))

    def scoring_stats(self) -> SharedPrefixStats:
        """What log-likelihood scoring did (lm-eval's own path unless a subclass packs)."""
        return SharedPrefixStats()

    def generation_stats(self) -> FastGenerationStats:
        """What generation did (lm-eval's own loop unless a subclass runs the fast path)."""
        return FastGenerationStats()

    def header(self) -> str:
        """One line printed at start: what this model adds to the lm-eval model it wraps."""
        synced = ", ".join(self.metering.synced_devices) or "none"
        source = self.metering.meter.source
        why = f": {source.reason}" if getattr(source, "reason", None) else ""
        return (f"[{self.MODEL_NAME}] precision={self._precision}; "
                f"energy={source.name}{why} (inference windows only, synced: "
                f"{synced}); {self._chat.describe(self.tokenizer)}; {self.generation_stats().policy()}; "
                f"{self.scoring_stats().policy()}.")

    def start_line(self) -> str:
        """The one short line printed at start.

        :meth:`header` (recorded as ``config.hf_metered.adds``) has the whole description.
        """
        source = self.metering.meter.source
        reason = str(getattr(source, "reason", "") or "").split(" (")[0]
        energy = f"{source.name} ({reason})" if reason else source.name
        return (f"[{self.MODEL_NAME}] precision={self._precision}, energy={energy}, "
                f"generation={self.generation_stats().requested}; the full description is "
                "config.hf_metered.adds in the results file")

    def reset_metering(self) -> None:  # noqa: D102
        super().reset_metering()
        self._probed_batch_sizes = []

    # precision: HFLM passes the checkpoint's own quantization_config explicitly
    def _create_model(self, *args: Any, quantization_config: Any = None, **kwargs: Any) -> None:
        bnb = self._plan.bnb_config()
        super()._create_model(*args, quantization_config=bnb or quantization_config, **kwargs)

    # metering seams -------------------------------------------------------------------------
    def _detect_batch_size(self, requests=None, pos: int = 0):  # noqa: D102
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
            "batch_size": self.batch_size_per_gpu,
            "batch_sizes_detected": list(getattr(self, "batch_sizes", {}).values())
            or list(self._probed_batch_sizes),
            "load_seconds": self._load_seconds,
            "quantized_modules": self._quantized_modules,
            "mc_scoring": dataclasses.asdict(self.scoring_stats()),
            "generation": dataclasses.asdict(self.generation_stats()),
        }

    def get_model_info(self) -> dict:  # noqa: D102
        info = super().get_model_info()
        info["hf_metered"] = wrapper_info(self, self.MODEL_NAME)
        return info
