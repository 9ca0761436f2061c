"""``vllm-metered``: lm-eval's ``vllm`` model with the same per-task energy metering.

``lm_eval --model vllm-metered`` runs lm-eval's own :class:`~lm_eval.models.vllm_causallms.VLLM`
(paged attention, continuous batching, tensor and data parallelism) inside the metering seam:
one energy window per task and request type around the request loop, summed over every GPU
the engine uses. The engine runs in its own process, so forward time cannot be observed:
``forward_seconds`` is null with the flag ``forward_time_not_observable``, never a guess. The
window edges need no device synchronisation: vLLM's ``generate`` returns only once every
output is back. Without ``pretrained`` the embedded SmolLM2-135M-Instruct runs. Precision and
batch switches: :mod:`~lm_eval_ext.backends.vllm.engine_args`; the chat-template policy
is hf-metered's (:mod:`~lm_eval_ext.backends.chat_template`).

Install with ``pip install "lm-eval-ext[vllm]"``; without vLLM the run stops with that line.
"""

from __future__ import annotations

import atexit
import functools
from importlib.metadata import version
from typing import Any

from lm_eval_ext.backends.vllm.engine_args import missing_vllm_message
from lm_eval_ext.errors import ConfigError

if missing_vllm_message():  # before lm-eval's module, whose first line imports vllm
    raise ConfigError(missing_vllm_message())

from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.models.vllm_causallms import VLLM  # noqa: E402

from lm_eval_ext.backends.chat_template import ChatTemplatePolicy  # noqa: E402
from lm_eval_ext.backends.engine_key import load_key  # noqa: E402
from lm_eval_ext.backends.metered_lm import MeteredLM  # noqa: E402
from lm_eval_ext.backends.model_args import MeteredArgs  # noqa: E402
from lm_eval_ext.backends.vllm.engine_args import (  # noqa: E402
    MODEL_NAME,
    EnginePlan,
    plan_engine,
    progress_bars_disabled,
)
from lm_eval_ext.backends.warm import WARM, WarmModel, offering  # noqa: E402


def engine_config(llm: Any) -> dict[str, Any]:
    """What the running engine reports for dtype, quantisation and sequences at once."""
    engine = getattr(llm, "llm_engine", None)
    model_config = getattr(engine, "model_config", None)
    scheduler = getattr(getattr(engine, "vllm_config", None), "scheduler_config", None)
    dtype = getattr(model_config, "dtype", None)
    return {"dtype": None if dtype is None else str(dtype).removeprefix("torch."),
            "quantization": getattr(model_config, "quantization", None),
            "max_num_seqs": getattr(scheduler, "max_num_seqs", None)}


def _without_progress_bar(generate: Any, *args: Any, **kwargs: Any) -> Any:
    """The engine's ``generate`` without its progress bar; the outputs do not change.

    vLLM 0.24 divides by the bar's elapsed time, which is 0 when tqdm is disabled
    (ZeroDivisionError, vllm#28097).
    """
    return generate(*args, **{**kwargs, "use_tqdm": False})


@register_model(MODEL_NAME)
class VLLMMeteredLM(MeteredLM, VLLM):
    """``vllm`` plus metering, precision and batch switches, and an embedded default model."""

    MODEL_NAME = MODEL_NAME
    INFO_KEY = "vllm_metered"

    def __init__(self, batch_size: Any = 1, **model_args: Any):
        own, self._plan, lm_args = self.checked_args(model_args, batch_size)
        self.chat = ChatTemplatePolicy(own.chat_template, MODEL_NAME)

        def load(pretrained: str, kept: WarmModel | None) -> None:
            # the engine schedules a whole task at once; its batch is max_num_seqs
            with offering(None if kept is None else kept.model):
                super(VLLMMeteredLM, self).__init__(pretrained=pretrained, batch_size="auto",
                                                    **self._plan.engine_kwargs(), **lm_args)
            self._engine = {}  # data-parallel: lm-eval's replicas hold the engines
            if self.data_parallel_size == 1:
                if progress_bars_disabled():
                    self.model.generate = functools.partial(_without_progress_bar,
                                                            self.model.generate)
                self._engine = engine_config(self.model)
            atexit.register(self.shutdown)

        # a kept engine comes through the plug-in's handoff; data-parallel replicas are not kept
        keep = WARM.engine_handoff and self._plan.data_parallel_size == 1
        self.start_metered(own.pretrained, load, self._cuda_indices, energy=own.energy,
                           idle_seconds=own.idle_seconds, sync=False, forward_observable=False,
                           power_check=own.power_check, load_key=load_key(
                               MODEL_NAME, {**model_args, "batch_size": batch_size})
                           if keep else None)
        self.announce()

    @staticmethod
    def checked_args(model_args: dict[str, Any], batch_size: Any = 1
                     ) -> tuple[MeteredArgs, EnginePlan, dict[str, Any]]:
        """Own args checked, the engine plan, and the rest for lm-eval's ``VLLM``; loads nothing."""
        own, lm_args = MeteredArgs.split(model_args)
        own = own.checked(MODEL_NAME, {"batch_size": batch_size})
        return own, plan_engine(own.precision, batch_size, lm_args), lm_args

    @classmethod
    def check_model_args(cls, model_args: str | dict[str, Any], batch_size: Any = 1) -> None:
        """Validate ``--model_args`` and the batch size as the constructor would, loading nothing.

        Raises:
            ConfigError: The first problem, with the fix.
        """
        if isinstance(model_args, str):
            from lm_eval.utils import simple_parse_args_string

            model_args = simple_parse_args_string(model_args)
        cls.checked_args(dict(model_args), batch_size)

    def _cuda_indices(self) -> list[int]:
        """The engine's GPUs as this process numbers them (none without CUDA)."""
        import torch

        return list(range(self._plan.gpus)) if torch.cuda.is_available() else []

    def start_line(self) -> str:
        """One line printed at start: what this model adds to lm-eval's ``vllm``."""
        source = self.metering.meter.source
        why = f": {source.reason}" if getattr(source, "reason", None) else ""
        seqs = self._engine.get("max_num_seqs") or self._plan.max_num_seqs or "vLLM's default"
        return (f"[{MODEL_NAME}] precision={self._plan.precision or 'checkpoint'} (vLLM dtype="
                f"{self._plan.dtype}, quantization={self._plan.quantization}); "
                f"max_num_seqs={seqs}; GPUs={self._plan.gpus}; energy={source.name}{why} "
                "(inference windows only; forward time not observable inside the engine); "
                f"{self.chat.describe(self.tokenizer)}.")

    def execution_modes(self) -> dict[str, str]:
        """Every request type runs in the vLLM engine."""
        return dict.fromkeys(("loglikelihood", "loglikelihood_rolling", "generate_until"), "vllm")

    def metering_extras(self) -> dict[str, Any]:
        """Precision, the engine's own settings and load time added to ``config.metering``."""
        return {
            "precision": self._plan.precision,
            "batch_size": self._engine.get("max_num_seqs") or self._plan.max_num_seqs,
            "load_seconds": self._load_seconds,
            "engine": {"name": "vllm", "version": version("vllm"),
                       "requested": {**self._plan.engine_kwargs(),
                                     "max_num_seqs": self._plan.max_num_seqs},
                       "running": self._engine},
        }

    def shutdown(self) -> None:
        """Stop the engine's processes (vLLM aborts at interpreter exit otherwise)."""
        core = getattr(getattr(getattr(self, "model", None), "llm_engine", None), "engine_core",
                       None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
