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
import sys
import time
from importlib.metadata import version
from typing import Any

from lm_eval_ext.backends.vllm.engine_args import missing_vllm_message
from lm_eval_ext.errors import ConfigError

if missing_vllm_message():  # before lm-eval's module, whose first line imports vllm
    raise ConfigError(missing_vllm_message())

from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.models.vllm_causallms import VLLM  # noqa: E402

from lm_eval_ext.backends import embedded_model, packaged_models  # noqa: E402
from lm_eval_ext.backends.chat_template import ChatTemplated, ChatTemplatePolicy  # noqa: E402
from lm_eval_ext.backends.model_args import MergedModelArgs, validate_own_args  # noqa: E402
from lm_eval_ext.backends.model_info import wrapper_info  # noqa: E402
from lm_eval_ext.backends.vllm.engine_args import (  # noqa: E402
    MODEL_NAME,
    plan_engine,
    progress_bars_disabled,
)
from lm_eval_ext.metering import MeteredLM, Metering  # noqa: E402


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
class VLLMMeteredLM(MergedModelArgs, ChatTemplated, MeteredLM, VLLM):
    """``vllm`` plus metering, precision and batch switches, and an embedded default model."""

    MODEL_NAME = MODEL_NAME

    def __init__(self, pretrained: str | None = None, precision: str | None = None,
                 chat_template: str = "auto", energy: str = "auto", idle_seconds: float = 3.0,
                 batch_size: Any = 1, **kwargs: Any):
        self._chat = ChatTemplatePolicy(chat_template, MODEL_NAME)
        own = validate_own_args(MODEL_NAME, pretrained=pretrained, energy=energy,
                                idle_seconds=idle_seconds, sync=True, codecarbon=False,
                                carbon_intensity=None, batch_size=batch_size, device=None)
        packaged_models.check_available(pretrained)
        self._plan = plan_engine(precision, batch_size, kwargs)
        self._embedded = pretrained is None
        if self._embedded:
            pretrained = str(embedded_model.ensure_checkpoint())
        pretrained, self._packaged = packaged_models.resolve(pretrained)
        started = time.perf_counter()
        # the engine schedules a whole task at once; its batch is max_num_seqs
        super().__init__(pretrained=pretrained, batch_size="auto",
                         **self._plan.engine_kwargs(), **kwargs)
        self._load_seconds = time.perf_counter() - started
        self._engine = {}  # data-parallel: lm-eval's replicas hold the engines
        if self.data_parallel_size == 1:
            if progress_bars_disabled():
                self.model.generate = functools.partial(_without_progress_bar, self.model.generate)
            self._engine = engine_config(self.model)
        atexit.register(self.shutdown)
        self.metering = Metering.start(self._cuda_indices(), energy=own.energy, sync=False,
                                       idle_seconds=own.idle_seconds, forward_observable=False)
        print(self.header(), file=sys.stderr, flush=True)

    def _cuda_indices(self) -> list[int]:
        """The engine's GPUs as this process numbers them (none without CUDA)."""
        import torch

        return list(range(self._plan.gpus)) if torch.cuda.is_available() else []

    def header(self) -> str:
        """One line printed at start: what this model adds to lm-eval's ``vllm``."""
        source = self.metering.meter.source
        why = f": {source.reason}" if getattr(source, "reason", None) else ""
        seqs = self._engine.get("max_num_seqs") or self._plan.max_num_seqs or "vLLM's default"
        return (f"[{MODEL_NAME}] precision={self._plan.precision or 'checkpoint'} (vLLM dtype="
                f"{self._plan.dtype}, quantization={self._plan.quantization}); "
                f"max_num_seqs={seqs}; GPUs={self._plan.gpus}; energy={source.name}{why} "
                "(inference windows only; forward time not observable inside the engine); "
                f"{self._chat.describe(self.tokenizer)}.")

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

    def get_model_info(self) -> dict:  # noqa: D102
        info = super().get_model_info()
        info["vllm_metered"] = wrapper_info(self, MODEL_NAME)
        return info

    def shutdown(self) -> None:
        """Stop the engine's processes (vLLM aborts at interpreter exit otherwise)."""
        core = getattr(getattr(getattr(self, "model", None), "llm_engine", None), "engine_core",
                       None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
