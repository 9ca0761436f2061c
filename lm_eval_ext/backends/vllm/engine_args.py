"""vllm-metered's switches as vLLM engine arguments, checked before the engine starts.

* ``precision``: bf16/fp16/fp32 set vLLM's ``dtype``; ``fp8`` is vLLM's in-flight FP8 weight
  quantisation (``quantization=fp8``) and ``nf4`` its in-flight bitsandbytes 4-bit
  (``quantization=bitsandbytes``). vLLM has no in-flight 8-bit bitsandbytes, so ``int8`` (and
  ``fp4``) are refused with the alternatives named.
* batch: vLLM schedules every request of a task itself; its batch is the number of sequences
  it runs at once, ``max_num_seqs``. A batch size the user gave (``--batch_size N``) becomes
  ``max_num_seqs=N``; lm-eval's default leaves vLLM's own.
* GPUs: ``tensor_parallel_size`` x ``data_parallel_size`` (energy is summed over all of them).

Nothing here imports vLLM.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

from lm_eval_ext.backends.model_args import check_batch_size, explicit_batch_size
from lm_eval_ext.errors import ConfigError

MODEL_NAME = "vllm-metered"
INSTALL = 'pip install "lm-eval-ext[vllm]"'
#: precision -> (vLLM dtype, vLLM in-flight quantization)
VLLM_PRECISIONS: dict[str, tuple[str, str | None]] = {
    "bf16": ("bfloat16", None), "fp16": ("float16", None), "fp32": ("float32", None),
    "fp8": ("bfloat16", "fp8"), "nf4": ("bfloat16", "bitsandbytes")}
REFUSED = {"int8": "vLLM has no in-flight 8-bit bitsandbytes quantisation",
           "fp4": "vLLM's in-flight bitsandbytes quantisation is NF4 only"}


@dataclass(frozen=True)
class EnginePlan:
    """What the engine is asked for (recorded in ``config.metering.engine``)."""

    precision: str | None  # None: the checkpoint's own dtype, or the dtype/quantization given
    dtype: str
    quantization: str | None
    max_num_seqs: int | None  # None: vLLM's default
    tensor_parallel_size: int
    data_parallel_size: int

    @property
    def gpus(self) -> int:
        """GPUs the engine occupies."""
        return self.tensor_parallel_size * self.data_parallel_size

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for lm-eval's ``VLLM`` (which passes them to ``vllm.LLM``)."""
        kwargs: dict[str, Any] = {"dtype": self.dtype, "quantization": self.quantization,
                                  "tensor_parallel_size": self.tensor_parallel_size,
                                  "data_parallel_size": self.data_parallel_size}
        if self.max_num_seqs is not None:
            kwargs["max_num_seqs"] = self.max_num_seqs
        return kwargs


def _positive_int(name: str, value: Any) -> int:
    text = str(value)
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{MODEL_NAME}: model arg {name}={value!r} must be a positive integer "
                          f"(e.g. {name}=2)")
    return int(text)


def _precision(precision: str | None, args: dict[str, Any]) -> tuple[str, str | None]:
    """(dtype, quantization) for ``precision``, or as given in ``args`` when it is None."""
    if precision is None:
        return str(args.pop("dtype", "auto")), args.pop("quantization", None)
    given = sorted(k for k in ("dtype", "quantization") if args.get(k) not in (None, "auto"))
    if given:
        raise ConfigError(f"{MODEL_NAME}: precision={precision} and {given[0]}="
                          f"{args[given[0]]!r} both set the weights' format; pass one of them")
    args.pop("dtype", None)
    args.pop("quantization", None)
    if precision in REFUSED:
        raise ConfigError(f"{MODEL_NAME}: precision={precision} is not available: "
                          f"{REFUSED[precision]}; use precision=fp8 (8-bit) or precision=nf4 "
                          f"(4-bit), or --model hf-metered for bitsandbytes {precision}")
    if precision not in VLLM_PRECISIONS:
        raise ConfigError(f"{MODEL_NAME}: precision={precision!r} is not one of "
                          f"{', '.join(VLLM_PRECISIONS)}")
    dtype, quantization = VLLM_PRECISIONS[precision]
    if quantization == "bitsandbytes" and find_spec("bitsandbytes") is None:
        raise ConfigError(f"{MODEL_NAME}: precision=nf4 needs bitsandbytes: "
                          "pip install bitsandbytes")
    return dtype, quantization


def progress_bars_disabled() -> bool:
    """Whether tqdm bars are off (``TQDM_DISABLE``)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=0, file=io.StringIO())
    off = bool(bar.disable)
    bar.close()
    return off


def plan_engine(precision: str | None, batch_size: Any, args: dict[str, Any]) -> EnginePlan:
    """The engine plan for these switches.

    Pops ``dtype``, ``quantization``, ``max_num_seqs`` and the parallel sizes from ``args``;
    the rest goes to lm-eval's ``VLLM`` unchanged.

    Raises:
        ConfigError: The first problem, with the fix.
    """
    check_batch_size(MODEL_NAME, batch_size)
    dtype, quantization = _precision(precision, args)
    asked = explicit_batch_size(batch_size)
    given = args.pop("max_num_seqs", None)
    if given is not None:
        given = _positive_int("max_num_seqs", given)
        if asked is not None and asked != given:
            raise ConfigError(f"{MODEL_NAME}: --batch_size {batch_size} and max_num_seqs={given}"
                              " both set how many sequences vLLM runs at once; pass one of them")
    tensor = _positive_int("tensor_parallel_size", args.pop("tensor_parallel_size", 1))
    data = _positive_int("data_parallel_size", args.pop("data_parallel_size", 1))
    if data > 1 and progress_bars_disabled():
        raise ConfigError(f"{MODEL_NAME}: data_parallel_size={data} with progress bars off "
                          "(TQDM_DISABLE): lm-eval's replicas call vLLM 0.24 with a bar, which "
                          "then divides by zero (vLLM issue 28097); unset TQDM_DISABLE for a "
                          "data-parallel run")
    if data > 1 and find_spec("ray") is None:
        raise ConfigError(f"{MODEL_NAME}: data_parallel_size={data} runs vLLM replicas through "
                          "Ray, which is not installed: pip install ray")
    return EnginePlan(precision=precision, dtype=dtype, quantization=quantization,
                      max_num_seqs=given if given is not None else asked,
                      tensor_parallel_size=tensor, data_parallel_size=data)


def missing_vllm_message() -> str | None:
    """The one line for a run without vLLM (None when it is installed)."""
    if find_spec("vllm") is not None:
        return None
    return f"--model {MODEL_NAME} needs vLLM, which is not installed: {INSTALL}"
