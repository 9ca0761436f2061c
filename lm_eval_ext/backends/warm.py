"""Loaded models kept for the next run in the same process: a campaign worker's cells.

Off in every process unless :func:`keep_loaded_models` turns it on (the campaign worker,
:mod:`lm_eval_ext.campaign.worker`, does). Then a metered model built with the same weights and
load settings as the one before (batch size, tasks and limits may differ) reuses its loaded
weights and tokenizer, and the idle-power sample of the same devices is reused while it is
younger than :data:`IDLE_REFRESH_SECONDS`. One model is kept at a time: a different key drops
the one before. Each run's ``config.metering.warm`` says what it reused.

A backend whose lm-eval class builds its engine itself (lm-eval's ``VLLM``) gets the kept one
through :func:`offering`: the plug-in's handoff (:mod:`lm_eval_ext.plugin.vllm_engines`)
returns it in place of a new engine built with the same arguments, and sets
:attr:`WarmModels.engine_handoff` when installed.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import gc
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from lm_eval_ext.metering.meter import IdlePower

#: an idle sample older than this is taken again (the GPU's idle power drifts with its heat)
IDLE_REFRESH_SECONDS = 600.0


@dataclasses.dataclass(frozen=True)
class WarmModel:
    """A loaded model and tokenizer, and how long their load took."""

    key: str
    model: Any
    tokenizer: Any
    load_seconds: float


@dataclasses.dataclass(frozen=True)
class WarmIdle:
    """An idle-power sample of some devices and when it ended (``time.monotonic``)."""

    key: str
    idle: IdlePower
    taken_at: float


class WarmModels:
    """The one model (and idle sample) kept between runs of this process, when turned on."""

    def __init__(self) -> None:
        self.enabled = False
        self._model: WarmModel | None = None
        self._idle: WarmIdle | None = None
        self.reused_models = 0
        #: whether the plug-in hands an offered engine to lm-eval's engine constructor
        self.engine_handoff = False

    def model(self, key: str) -> WarmModel | None:
        """The kept model for ``key`` (None: off, or none kept for it)."""
        if self.enabled and self._model is not None and self._model.key == key:
            self.reused_models += 1
            return self._model
        return None

    def keep_model(self, key: str, model: Any, tokenizer: Any, load_seconds: float) -> None:
        """Keep a just-loaded model (dropping another one kept before)."""
        if not self.enabled:
            return
        if self._model is not None and self._model.key != key:
            self.drop_model()
        self._model = WarmModel(key, model, tokenizer, load_seconds)

    def drop_model(self) -> None:
        """Let the kept model go (its memory returns once no run holds it)."""
        self._model = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover - torch is a dependency
            pass

    def idle(self, devices: Sequence[int], source: str) -> WarmIdle | None:
        """A kept idle sample of these devices from this source, if young enough."""
        key = json.dumps([list(devices), source])
        kept = self._idle
        if (self.enabled and kept is not None and kept.key == key
                and time.monotonic() - kept.taken_at < IDLE_REFRESH_SECONDS):
            return kept
        return None

    def keep_idle(self, devices: Sequence[int], source: str, idle: IdlePower | None) -> None:
        """Keep a just-taken idle sample."""
        if self.enabled and idle is not None:
            self._idle = WarmIdle(json.dumps([list(devices), source]), idle, time.monotonic())


_OFFERED: contextvars.ContextVar[Any] = contextvars.ContextVar("offered_engine", default=None)


@contextlib.contextmanager
def offering(engine: Any) -> Iterator[None]:
    """Within the block, :func:`offered_engine` is ``engine`` (None: build afresh)."""
    token = _OFFERED.set(engine)
    try:
        yield
    finally:
        _OFFERED.reset(token)


def offered_engine() -> Any:
    """The kept engine a constructor may return in place of a new one (None: none)."""
    return _OFFERED.get()


#: this process's registry (off unless a campaign worker turns it on)
WARM = WarmModels()


def keep_loaded_models() -> None:
    """Turn reuse on for this process (the campaign worker calls it once)."""
    WARM.enabled = True
