"""``precision=`` switch of hf-metered: dtype or bitsandbytes quantisation, verified after load.

transformers 5 rejects ``load_in_8bit``/``load_in_4bit`` keyword arguments, and HFLM passes
its own ``quantization_config``, so quantisation goes through a ``BitsAndBytesConfig`` that
hf-metered injects into ``_create_model``. After loading, the quantised linear modules are
counted: a requested precision that did not take effect is an error.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from lm_eval_ext.errors import ConfigError

FLOAT_PRECISIONS = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
QUANTIZED_PRECISIONS = ("int8", "nf4", "fp4")
PRECISIONS = (*FLOAT_PRECISIONS, *QUANTIZED_PRECISIONS)
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                  "float": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16",
                  "torch.float32": "fp32"}
#: model args that would bypass or fight the precision switch
_QUANT_KWARGS = ("load_in_8bit", "load_in_4bit", "quantization_config", "bnb_4bit_quant_type",
                 "bnb_4bit_compute_dtype", "bnb_4bit_use_double_quant")


class PrecisionError(ConfigError):
    """The requested precision is invalid or did not take effect."""


@dataclass(frozen=True)
class PrecisionPlan:
    """How to load the model for a requested precision."""

    precision: str | None  # None: whatever the checkpoint is ("auto")
    dtype: str  # passed to HFLM's ``dtype``
    quantization: str | None  # "int8" | "nf4" | "fp4" | None

    def bnb_config(self):
        """The ``BitsAndBytesConfig`` for a quantised precision, else None."""
        if self.quantization is None:
            return None
        import torch
        from transformers import BitsAndBytesConfig

        if self.quantization == "int8":
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=self.quantization,
                                  bnb_4bit_compute_dtype=torch.bfloat16)


def precision_name(dtype: Any) -> str | None:
    """``bf16``/``fp16``/``fp32`` for a dtype name (``bfloat16``, ``torch.float32``, ...).

    None for ``auto``, None or a name it does not know.
    """
    return _DTYPE_ALIASES.get(str(dtype).lower()) if dtype is not None else None


def _dtype_precision(dtype: Any) -> str | None:
    if dtype is None or str(dtype) == "auto":
        return None
    name = precision_name(dtype)
    if name is None:
        raise PrecisionError(f"hf-metered: dtype={dtype!r} is not one of "
                             f"auto, {', '.join(sorted(_DTYPE_ALIASES))}")
    return name


def plan_precision(precision: str | None, dtype: Any, model_kwargs: dict[str, Any]) -> PrecisionPlan:
    """Validate ``precision`` against ``dtype`` and other model args; return the load plan."""
    clashes = [k for k in _QUANT_KWARGS if k in model_kwargs]
    if clashes:
        raise PrecisionError(
            f"hf-metered: model arg(s) {', '.join(clashes)} are not accepted; use "
            f"precision=int8|nf4|fp4 (valid precisions: {', '.join(PRECISIONS)})")
    if precision is not None and precision not in PRECISIONS:
        raise PrecisionError(f"hf-metered: precision={precision!r} is not valid; use one of "
                             f"{', '.join(PRECISIONS)}")
    from_dtype = _dtype_precision(dtype)
    if precision is None:
        return PrecisionPlan(from_dtype, str(dtype) if dtype is not None else "auto", None)
    if precision in FLOAT_PRECISIONS:
        if from_dtype is not None and from_dtype != precision:
            raise PrecisionError(f"hf-metered: precision={precision} conflicts with dtype={dtype}"
                                 "; give one of them")
        return PrecisionPlan(precision, FLOAT_PRECISIONS[precision], None)
    # Quantised: non-quantised modules in bf16 (the seed paper's setting) unless dtype says.
    compute = FLOAT_PRECISIONS[from_dtype] if from_dtype else "bfloat16"
    return PrecisionPlan(precision, compute, precision)


def quantized_module_counts(model: Any) -> dict[str, int]:
    """Counts of bitsandbytes linear modules (``Linear8bitLt``, ``Linear4bit``) in ``model``."""
    counts: Counter[str] = Counter()
    for module in model.modules():
        name = type(module).__name__
        if name in ("Linear8bitLt", "Linear4bit"):
            counts[name] += 1
    return {"Linear8bitLt": counts["Linear8bitLt"], "Linear4bit": counts["Linear4bit"]}


def _quant_type(model: Any) -> str | None:
    for module in model.modules():
        if type(module).__name__ == "Linear4bit":
            return getattr(module.weight, "quant_type", None)
    return None


class _OncePerMessage(logging.Filter):
    """Let the first record of each message through and drop its repeats."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


#: bitsandbytes' logger of "MatMul8bitLt: inputs will be cast ... to float16", said on every
#: int8 matmul (210 lines a forward of the embedded model; 150,000 in one run of trial 18)
BNB_MATMUL_LOGGER = "bitsandbytes.autograd._functions"


def say_quantisation_notes_once() -> None:
    """Say each of bitsandbytes' per-call notes once per process (a filter on its logger)."""
    logger = logging.getLogger(BNB_MATMUL_LOGGER)
    if not any(isinstance(f, _OncePerMessage) for f in logger.filters):
        logger.addFilter(_OncePerMessage())


def verify_precision(model: Any, plan: PrecisionPlan) -> tuple[str, dict[str, int]]:
    """Check the loaded model against the plan; return (effective precision, module counts)."""
    counts = quantized_module_counts(model)
    if plan.quantization == "int8" and counts["Linear8bitLt"] == 0:
        raise PrecisionError("hf-metered: precision=int8 was requested but the loaded model has "
                             "no Linear8bitLt modules (bitsandbytes did not quantise it)")
    if plan.quantization in ("nf4", "fp4"):
        if counts["Linear4bit"] == 0:
            raise PrecisionError(f"hf-metered: precision={plan.quantization} was requested but "
                                 "the loaded model has no Linear4bit modules")
        if (found := _quant_type(model)) not in (None, plan.quantization):
            raise PrecisionError(f"hf-metered: precision={plan.quantization} was requested but "
                                 f"the Linear4bit weights use {found}")
    if plan.quantization:
        return plan.quantization, counts
    if any(counts.values()):
        raise PrecisionError(f"hf-metered: the checkpoint is already quantised ({counts}); "
                             "pass precision=int8|nf4|fp4 to match it")
    effective = _DTYPE_ALIASES.get(str(getattr(model, "dtype", "")).lower())
    if plan.precision is not None and effective != plan.precision:
        raise PrecisionError(f"hf-metered: precision={plan.precision} was requested but the "
                             f"model loaded as {getattr(model, 'dtype', '?')}")
    return effective or str(getattr(model, "dtype", "unknown")), counts
