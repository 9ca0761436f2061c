"""Validation of hf-metered's own model args, before anything is loaded.

lm-eval turns ``--model_args`` values into Python values loosely (``true``/``false`` become
booleans, digits ints, anything else stays a string), so ``sync=no`` arrives as the truthy
string ``"no"``. Every own arg is checked here, with a message naming the fix, so that a typo
costs no model load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval_ext.errors import ConfigError, check_choice

CHAT_TEMPLATE_MODES = ("auto", "off")
ENERGY_SOURCES = ("auto", "nvml", "rapl", "off")
MC_SCORING = ("standard", "shared_prefix")


@dataclass(frozen=True)
class OwnArgs:
    """hf-metered's own settings, validated."""

    chat_template: str
    energy: str
    idle_seconds: float
    sync: bool
    codecarbon: bool
    carbon_intensity: float | None


def strict_bool(model: str, name: str, value: Any) -> bool:
    """``true``/``false`` (as lm-eval parses them) or 0/1; anything else is an error."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ConfigError(f"{model}: model arg {name}={value!r} is not a boolean; use "
                      f"{name}=true or {name}=false")


def _number(model: str, name: str, value: Any, *, minimum: float = 0.0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < minimum:
        raise ConfigError(f"{model}: model arg {name}={value!r} must be a number >= {minimum:g}"
                          f" (e.g. {name}=1.0)")
    return number


def check_batch_size(model: str, value: Any) -> None:
    """A positive int, ``auto`` or ``auto:N`` (lm-eval would send everything at once for <= 0)."""
    text = str(value)
    if text == "auto" or (text.startswith("auto:") and _is_positive(text[5:])):
        return
    if not _is_positive(text):
        raise ConfigError(f"{model}: batch_size={value!r} is not valid; use a positive integer, "
                          "auto or auto:N (e.g. --batch_size 8)")


def _is_positive(text: str) -> bool:
    try:
        return float(text) > 0 and float(text) == int(float(text))
    except ValueError:
        return False


def _check_pretrained(model: str, pretrained: Any) -> None:
    """A value written as a local path (``/``, ``./``, ``../``, ``~``) must exist."""
    if pretrained is None or not isinstance(pretrained, str):
        return
    if pretrained.startswith(("/", "./", "../", "~")):
        path = Path(pretrained).expanduser()
        if not path.exists():
            raise ConfigError(f"{model}: pretrained={pretrained!r}: the local path {path} does "
                              "not exist; pass an existing model folder or a hub id")


def validate_own_args(model: str, *, pretrained: Any, chat_template: Any, energy: Any,
                      idle_seconds: Any, sync: Any, codecarbon: Any, carbon_intensity: Any,
                      batch_size: Any, device: Any, mc_scoring: Any = "standard") -> OwnArgs:
    """Check every own arg (and batch size, local paths, energy=nvml without a GPU)."""
    check_choice("model arg chat_template", chat_template, CHAT_TEMPLATE_MODES)
    check_choice("model arg energy", energy, ENERGY_SOURCES)
    check_choice("model arg mc_scoring", mc_scoring, MC_SCORING)
    check_batch_size(model, batch_size)
    _check_pretrained(model, pretrained)
    if energy == "nvml":
        import torch

        if not torch.cuda.is_available() or str(device or "cuda").startswith(("cpu", "mps")):
            raise ConfigError(f"{model}: energy=nvml needs the model on a CUDA GPU (device="
                              f"{device or 'auto'}, CUDA available: {torch.cuda.is_available()});"
                              " use energy=auto or energy=rapl on the CPU")
    return OwnArgs(
        chat_template=chat_template, energy=energy,
        idle_seconds=_number(model, "idle_seconds", idle_seconds),
        sync=strict_bool(model, "sync", sync),
        codecarbon=strict_bool(model, "codecarbon", codecarbon),
        carbon_intensity=None if carbon_intensity is None
        else _number(model, "carbon_intensity", carbon_intensity))
