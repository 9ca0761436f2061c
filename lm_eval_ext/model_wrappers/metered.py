"""Metering, precision and chat-template defaults shared by the metered lm-eval models.

A mixin placed before the lm-eval HF model class (``hf-metered``, ``hf-multimodal-metered``).

Every ``--model_args`` key of the underlying lm-eval class works unchanged; the mixin adds the
keys in :data:`OWN_ARGS` (documented in the README).

Energy boundary: for each (task, request type) the meter brackets the model's request loop
(tokenisation, batching, forward passes / generation) between CUDA-synchronised edges.
Model load, data preparation, prompt building, metrics, judging and file writing are outside;
automatic batch-size probes are cut out; ``--use_cache`` hits never reach the model. Results
land in ``results_*.json -> config.metering`` through :meth:`get_model_info`.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from lm_eval_ext.errors import ConfigError
from lm_eval_ext.model_wrappers import embedded_model
from lm_eval_ext.model_wrappers.metering import EnergyMeter, InferenceLedger, select_source
from lm_eval_ext.model_wrappers.metering.contention import cpu_contention_probe
from lm_eval_ext.model_wrappers.metering.ranks import (
    gather_rank_metering,
    merge_rank_metering,
    run_without_padding,
)
from lm_eval_ext.model_wrappers.model_args import validate_own_args
from lm_eval_ext.model_wrappers.precision import plan_precision, verify_precision
from lm_eval_ext.model_wrappers.request_groups import run_by_task
from lm_eval_ext.model_wrappers.shared_prefix import SharedPrefixMixin, SharedPrefixStats

#: hf-metered's own model args and their defaults.
OWN_ARGS = {"pretrained": None, "chat_template": "auto", "precision": None, "energy": "auto",
            "idle_seconds": 3.0, "sync": True, "codecarbon": False, "codecarbon_country": "CAN",
            "codecarbon_region": "ontario", "carbon_intensity": None, "mc_scoring": "standard"}
#: extra ``from_pretrained`` keys passed through unchanged.
PASSTHROUGH_ARGS = ("attn_implementation", "low_cpu_mem_usage", "use_safetensors", "cache_dir",
                    "local_files_only", "token", "variant", "device_map")
#: idle power is sampled in sub-intervals of this length (their spread is its uncertainty)
IDLE_INTERVAL_S = 0.5


def _init_params(cls: type) -> set[str]:
    """Keyword parameters of every ``__init__`` along the MRO of an lm-eval model class."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names |= {p for p in inspect.signature(init).parameters
                      if p not in ("self", "kwargs", "args", "pretrained")}
    return names


BOUNDARY = ("per (task, request type): the model's request loop between device-synchronised "
            "edges; excludes model load, data preparation, metrics, file writing and auto "
            "batch-size probes")


def parameter_cuda_devices(model) -> list[int]:
    """Every CUDA device holding parameters (several with ``parallelize=True``/``device_map``)."""
    return sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})


def _synchronize_all(cuda_indices: list[int]):
    """A sync callable that waits for every CUDA device holding parameters."""
    def sync() -> None:
        for index in cuda_indices:
            torch.cuda.synchronize(index)

    return sync


class MeteredMixin:
    """Adds metering, precision switches and defaults to an lm-eval HF model class."""

    MODEL_NAME = "hf-metered"
    EMBEDDED_DEFAULT = True  # no ``pretrained``: use the embedded SmolLM2

    def _check_unknown(self, kwargs: dict[str, Any]) -> None:
        base = _init_params(type(self)) - set(OWN_ARGS)
        unknown = sorted(set(kwargs) - base - set(PASSTHROUGH_ARGS))
        if unknown:
            valid = sorted({*OWN_ARGS, *base, *PASSTHROUGH_ARGS})
            raise ConfigError(f"{self.MODEL_NAME}: unknown model arg(s) {', '.join(unknown)}; "
                              f"valid: {', '.join(valid)}")

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        """lm-eval's constructor, with ``--model_args`` keys that clash with CLI flags explained.

        The stock path fails with "got multiple values for keyword argument" when a key such
        as ``batch_size`` is in both ``--model_args`` and lm-eval's own flags (``--batch_size``
        always has a value).
        """
        from lm_eval.utils import simple_parse_args_string

        args = simple_parse_args_string(arg_string or "")
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        for key in sorted(set(args) & set(extra)):
            if str(args[key]) != str(extra[key]):
                flag = f"--{key}"
                raise ConfigError(
                    f"{cls.MODEL_NAME}: {key}={args[key]!r} in --model_args conflicts with lm-eval's "
                    f"{flag} ({extra[key]!r}); pass it once, as {flag} {args[key]}")
            del args[key]
        return cls(**args, **extra)

    def __init__(self, pretrained: Any = None, chat_template: str = "auto",
                 precision: str | None = None, energy: str = "auto", idle_seconds: float = 3.0,
                 sync: bool = True, codecarbon: bool = False, codecarbon_country: str = "CAN",
                 codecarbon_region: str | None = "ontario",
                 carbon_intensity: float | None = None, mc_scoring: str = "standard",
                 **kwargs: Any):
        self._check_unknown(kwargs)
        own = validate_own_args(
            self.MODEL_NAME, pretrained=pretrained, chat_template=chat_template, energy=energy,
            idle_seconds=idle_seconds, sync=sync, codecarbon=codecarbon,
            carbon_intensity=carbon_intensity, mc_scoring=mc_scoring,
            batch_size=kwargs.get("batch_size", 1),
            device=kwargs.get("device"))
        if mc_scoring != "standard" and not isinstance(self, SharedPrefixMixin):
            raise ConfigError(f"{self.MODEL_NAME}: mc_scoring={mc_scoring} is only built for "
                              "hf-metered (text models); use mc_scoring=standard")
        self._chat_template_mode = own.chat_template
        self._plan = plan_precision(precision, kwargs.pop("dtype", "auto"), kwargs)
        self._run_applies_chat_template = False
        self._probed_batch_sizes: list[int] = []  # generate_until keeps its probe result local
        self._embedded = pretrained is None
        if self._embedded and not self.EMBEDDED_DEFAULT:
            raise ConfigError(f"{self.MODEL_NAME}: pass --model_args pretrained=<model> "
                              "(there is no embedded default for this model type)")
        if self._embedded:
            pretrained = str(embedded_model.ensure_checkpoint())
        started = time.perf_counter()
        super().__init__(pretrained=pretrained, dtype=self._plan.dtype, **kwargs)
        self._load_seconds = time.perf_counter() - started
        self._precision, self._quantized_modules = verify_precision(self.model, self._plan)
        if isinstance(self, SharedPrefixMixin):
            self._init_shared_prefix(mc_scoring)

        cuda = parameter_cuda_devices(self.model)
        self._synced_devices = [f"cuda:{i}" for i in cuda] if own.sync else []
        source = select_source(cuda, prefer=own.energy)
        self._meter = EnergyMeter(source, sync=_synchronize_all(cuda) if cuda and own.sync
                                  else None,
                                  contention=None if cuda else cpu_contention_probe())
        self._meter.measure_idle(own.idle_seconds,
                                 intervals=max(1, round(own.idle_seconds / IDLE_INTERVAL_S)))
        self._ledger = InferenceLedger(self._meter)
        self._padding_requests = 0  # data-parallel padding answered without the model
        self._rank_metering: list[dict[str, Any]] | None = None  # every rank's block (DP)
        self._codecarbon = None
        if own.codecarbon:
            from lm_eval_ext.model_wrappers.metering.codecarbon_check import CodeCarbonCheck

            self._codecarbon = CodeCarbonCheck(
                cuda or None, country_iso_code=codecarbon_country, region=codecarbon_region,
                carbon_intensity_g_per_kwh=own.carbon_intensity)
            self._codecarbon.start()
        print(self.header(), file=sys.stderr, flush=True)

    def header(self) -> str:
        """One line printed at start: what hf-metered adds to the lm-eval model it wraps."""
        template = ("generation requests go through the tokenizer's chat template as one user "
                    "turn unless the run passes --apply_chat_template (chat_template=off: exactly "
                    "what --model hf sends)" if self._chat_template_mode == "auto"
                    else "prompts sent exactly as --model hf sends them (chat_template=off)")
        return (f"[{self.MODEL_NAME}] precision={self._precision}; energy={self._meter.source.name}"
                f" (inference windows only, synced: {', '.join(self._synced_devices) or 'none'});"
                f" {template}; {self._mc_scoring().policy()}.")

    def _mc_scoring(self) -> SharedPrefixStats:
        """Shared-prefix bookkeeping (the standard path's defaults for models without it)."""
        return getattr(self, "_mc_stats", None) or SharedPrefixStats()

    def reset_metering(self) -> None:
        """Start a fresh ledger: later windows only (several conditions on one loaded model)."""
        self._ledger = InferenceLedger(self._meter)
        self._padding_requests = 0
        self._probed_batch_sizes = []

    # quantisation: HFLM passes the checkpoint's own quantization_config explicitly
    def _create_model(self, *args: Any, quantization_config: Any = None, **kwargs: Any) -> None:
        bnb = self._plan.bnb_config()
        super()._create_model(*args, quantization_config=bnb or quantization_config, **kwargs)

    # metering seams ---------------------------------------------------------------------
    def _detect_batch_size(self, requests=None, pos: int = 0):  # noqa: D102
        with self._ledger.excluded():
            found = super()._detect_batch_size(requests, pos)
        self._probed_batch_sizes.append(found)
        return found

    def _timed_forward(self, call, *args: Any, **kwargs: Any):
        sync = self._meter.sync
        if sync is not None:
            sync()
        started = time.perf_counter()
        out = call(*args, **kwargs)
        if sync is not None:
            sync()
        self._ledger.add_forward_seconds(time.perf_counter() - started)
        return out

    def _model_call(self, *args: Any, **kwargs: Any):  # noqa: D102
        return self._timed_forward(super()._model_call, *args, **kwargs)

    def _model_generate(self, *args: Any, **kwargs: Any):  # noqa: D102
        return self._timed_forward(super()._model_generate, *args, **kwargs)

    def _metered(self, request_type: str, requests: list, disable_tqdm: bool,
                 prepare: Callable[[list], list] | None = None) -> list:
        method = getattr(super(), request_type)

        def run(task: str, group: list) -> list:
            with self._ledger.measure(task, request_type, len(group)):
                return method(group, disable_tqdm=disable_tqdm)

        # padding is found on lm-eval's own objects, before any templated copy is made
        answers, padding = run_without_padding(
            requests, lambda real: run_by_task(prepare(real) if prepare else real, run),
            self.world_size)
        self._padding_requests += padding
        if self.world_size > 1:  # every rank calls this; only rank 0 reports (get_model_info)
            self._rank_metering = gather_rank_metering(self._local_metering())
        return answers

    def loglikelihood(self, requests, disable_tqdm: bool = False):  # noqa: D102
        return self._metered("loglikelihood", requests, disable_tqdm)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):  # noqa: D102
        return self._metered("loglikelihood_rolling", requests, disable_tqdm)

    def generate_until(self, requests, disable_tqdm: bool = False):  # noqa: D102
        prepare = self._templated_copies if self._should_template_generation() else None
        return self._metered("generate_until", requests, disable_tqdm, prepare)

    # chat template default ---------------------------------------------------------------
    # lm-eval calls chat_template() (simple_evaluate) and apply_chat_template() (request
    # building) only when the run itself applies a chat template.
    def chat_template(self, chat_template: bool | str = False) -> str | None:  # noqa: D102
        self._run_applies_chat_template = True
        return super().chat_template(chat_template)

    def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:  # noqa: D102
        self._run_applies_chat_template = True
        return super().apply_chat_template(chat_history, add_generation_prompt)

    def _should_template_generation(self) -> bool:
        return (self._chat_template_mode == "auto" and not self._run_applies_chat_template
                and getattr(self.tokenizer, "chat_template", None) is not None)

    def _templated_copies(self, requests: list) -> list:
        """Copies of the requests with the context chat-templated; the originals stay intact.

        lm-eval's CachingLM hashes each request's arguments before and after the call, and
        the samples log shows them: neither may see a change made behind the user's back.
        """
        copies = []
        for request in requests:
            context, gen_kwargs = request.arguments[:2]
            # the base class's method (not ours, which marks the run as chat-templated)
            templated = super().apply_chat_template(
                [{"role": "user", "content": context}], add_generation_prompt=True)
            copies.append(dataclasses.replace(
                request, arguments=(templated, gen_kwargs, *request.arguments[2:])))
        return copies

    # reporting ---------------------------------------------------------------------------
    def metering_info(self) -> dict[str, Any]:
        """The ``config.metering`` block (see the README for every field).

        In a data-parallel run (several ranks), rank 0's block merges every rank's
        (:func:`~lm_eval_ext.model_wrappers.metering.ranks.merge_rank_metering`).
        """
        if self._rank_metering:
            info = merge_rank_metering(self._rank_metering)
        else:
            info = self._local_metering()
        if self._codecarbon is not None:
            total = info["energy_joules"]
            cc = self._codecarbon.stop()
            nvml_kwh = (total or 0) / 3.6e6
            cc["gpu_vs_nvml_pct"] = 100 * (cc["gpu_kwh"] - nvml_kwh) / nvml_kwh if total else None
            info["codecarbon"] = cc
        return info

    def _local_metering(self) -> dict[str, Any]:
        """This process's own metering block (its GPUs, its windows)."""
        summary = self._ledger.summary()
        total = summary["total"]
        idle = self._meter.idle_watts or {}
        gpus = [{**d, "idle_watts": idle.get(d["index"])} for d in self._meter.source.describe()]
        idle_info = self._meter.idle
        return {
            "precision": self._precision,
            "batch_size": self.batch_size_per_gpu,
            "batch_sizes_detected": list(getattr(self, "batch_sizes", {}).values())
            or list(self._probed_batch_sizes),
            "inference_seconds": total["inference_seconds"],
            "forward_seconds": total["forward_seconds"],
            "forward_share": total["forward_share"],
            "load_seconds": self._load_seconds,
            "energy_joules": total["energy_joules"],
            "energy_joules_idle_corrected": total["energy_joules_idle_corrected"],
            "energy_joules_idle_corrected_se": total["energy_joules_idle_corrected_se"],
            "idle_joules": total["idle_joules"],
            "idle_share": total["idle_share"],
            "idle_power": None if idle_info is None else {
                "watts": idle_info.total_watts, "se_watts": idle_info.se_watts(),
                "sd_watts_by_device": dict(idle_info.sd_watts_by_device or {}),
                "seconds": idle_info.seconds, "intervals": idle_info.intervals},
            "energy_source": self._meter.source.name,
            "energy_unavailable_reason": getattr(self._meter.source, "reason", None),
            "flags": total["flags"] + (["idle_not_measured"] if not idle else []),
            "gpus": gpus if self._meter.source.name == "nvml" else [],
            "devices": gpus,
            "synced_devices": self._synced_devices,
            "counter_period_s": self._meter.source.counter_period_s,
            "per_task": summary["per_task"],
            "quantized_modules": self._quantized_modules,
            "boundary": BOUNDARY,
            "padding_requests": self._padding_requests,
            "mc_scoring": dataclasses.asdict(self._mc_scoring()),
        }

    def get_model_info(self) -> dict:  # noqa: D102
        info = super().get_model_info()
        info["metering"] = self.metering_info()
        info["hf_metered"] = {
            "model_class": self.MODEL_NAME,
            "adds": self.header(),
            "embedded_model": embedded_model.provenance() if self._embedded else None,
            "chat_template_mode": self._chat_template_mode,
            "generation_chat_template_applied_by": (
                "lm_eval" if self._run_applies_chat_template
                else self.MODEL_NAME if self._should_template_generation() else None),
        }
        return info
