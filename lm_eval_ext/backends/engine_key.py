"""What makes two runs the same loaded engine, and when one run's answers stand for another's.

The one home of the model-arg groups every part of the package decides by:

* :func:`load_key`: what the loaded weights depend on (the backend, ``pretrained``,
  ``precision`` and every lm-eval model arg but the run-shaping ones, which vLLM's engine is
  built for). Cells with one key share
  a campaign worker (:meth:`~lm_eval_ext.campaign.spec.Cell.load_key`), and in that worker the
  second run reuses the first one's loaded model (:mod:`~lm_eval_ext.backends.warm`).
* :func:`answer_differences`: what a batch-1 answer depends on besides the request's strings
  (every model arg but the run-shaping, derivation and placement ones). A derived run's parent
  must agree on all of it (:mod:`~lm_eval_ext.backends.parent_run`), and the campaign plans a
  derivation only where it does (:mod:`~lm_eval_ext.campaign.derivation`).
* :func:`at_batch_one`: the batch size at which answers are per item.

Values are compared as text in one canonical form (:func:`canonical`): ``0`` and ``0.0``,
``True`` and ``true`` agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: model args that shape a run (how many requests go to the model at once), not the engine
RUN_ARGS = ("batch_size", "max_batch_size")
#: backends whose engine is built for its batch (vLLM's ``max_num_seqs``): there the run args
#: are load args
BATCH_IN_ENGINE = ("vllm-metered",)
#: a derived run's own model args: where its answers come from and how they are re-checked
DERIVATION_ARGS = ("answers_from", "recheck", "recheck_seed")


def without_idle_derivation_args(model_args: str) -> str:
    """``k=v,...`` model args less ``recheck``/``recheck_seed`` where no ``answers_from`` is given.

    A campaign's model args go to every cell, and the re-check applies only to the cells it
    derives (hf-metered refuses it on a run that takes no answers).
    """
    parts = [part for part in model_args.split(",") if part.strip()]
    keys = [part.partition("=")[0].strip() for part in parts]
    if "answers_from" in keys:
        return model_args
    return ",".join(part for part, key in zip(parts, keys, strict=True) if key not in DERIVATION_ARGS)


#: where the engine runs: part of the load; a derived run's devices are compared by their
#: names once loaded (:meth:`~lm_eval_ext.backends.derived_answers.DerivedAnswers.run`)
PLACEMENT_ARGS = ("device",)
#: the metered backends' own args that change how requests are served and measured, not the
#: loaded weights (the backends' other own args, ``pretrained`` and ``precision``, decide them)
SERVING_ARGS = ("chat_template", "energy", "idle_seconds", "power_check", "sync", "codecarbon",
                "codecarbon_country", "codecarbon_region", "carbon_intensity", "mc_scoring",
                "generation", "cuda_graphs")
#: the serving args that change only how a run is measured, never one of its answers
METERING_ARGS = ("energy", "idle_seconds", "power_check", "sync", "codecarbon",
                 "codecarbon_country", "codecarbon_region", "carbon_intensity")
#: the serving args that act on generations only (a log-likelihood request never reads them)
GENERATION_ARGS = ("generation",)
#: lm_eval options that reach the model as model args (``--device``, ``--trust_remote_code``)
LOAD_OPTIONS = ("device", "trust_remote_code")
#: lm_eval options a derived cell may have apart from its parent (its items are checked apart)
FREE_OPTIONS = ("limit",)


def canonical(value: Any) -> str:
    """A model arg's value as text, so that ``0`` and ``0.0``, ``True`` and ``true`` agree."""
    text = str(value).strip()
    if text.lower() in ("true", "false"):
        return text.lower()
    try:
        return repr(float(text))
    except ValueError:
        return text


def canonical_args(args: Mapping[str, Any] | None) -> dict[str, str]:
    """Model args with canonical values; a value of None is no value given."""
    return {str(k): canonical(v) for k, v in (args or {}).items() if v is not None}


def answer_args(args: Mapping[str, Any], path: str | None = None) -> dict[str, str]:
    """The model args a run's answers depend on (canonical values).

    Left out: :data:`METERING_ARGS` and :data:`RUN_ARGS` (how a run is measured or batched),
    :data:`GENERATION_ARGS` on the ``loglik`` path, and ``precision=fp32`` for the embedded or a
    packaged model (their checkpoints' own dtype, which no precision also gives).
    """
    skip = METERING_ARGS + RUN_ARGS + (GENERATION_ARGS if path == "loglik" else ())
    return {k: v for k, v in _own_dtype_unsaid(canonical_args(args)).items() if k not in skip}


def _own_dtype_unsaid(args: dict[str, str]) -> dict[str, str]:
    """Canonical ``args`` without ``precision=fp32`` for the embedded or a packaged model."""
    from lm_eval_ext.backends.packaged_models import PACKAGED

    if args.get("precision") == "fp32" and args.get("pretrained") in (None, *PACKAGED):
        return {k: v for k, v in args.items() if k != "precision"}
    return args


def with_load_options(args: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Model args as lm-eval hands them to the model, with the command's load options.

    ``--device`` and ``--trust_remote_code`` from ``options`` are added; a false or absent
    option adds nothing.
    """
    added = {k: options[k] for k in LOAD_OPTIONS if options.get(k) not in (None, False, "")}
    return {**args, **added}


def load_key(model: str, args: Mapping[str, Any]) -> str:
    """What the loaded weights depend on: the backend and every model arg that loads them.

    For a backend in :data:`BATCH_IN_ENGINE` the run args are load args too.
    """
    run = () if model in BATCH_IN_ENGINE else RUN_ARGS
    loads = {k: v for k, v in canonical_args(args).items()
             if k not in run + DERIVATION_ARGS + SERVING_ARGS}
    return json.dumps({"model": model, "args": loads}, sort_keys=True)


def answer_differences(parent: Mapping[str, Any], child: Mapping[str, Any]
                       ) -> dict[str, tuple[str | None, str | None]]:
    """Model args on which a child's batch-1 answers may differ from its parent's.

    Each differing arg -> (parent's value, child's value), None where one lacks it; every arg
    is compared but :data:`RUN_ARGS`, :data:`DERIVATION_ARGS` and :data:`PLACEMENT_ARGS`
    (metering args too: a derived run's energy is its parent's); ``precision=fp32`` written out
    for the embedded or a packaged model is its checkpoint's own dtype, as no precision.
    """
    skip = RUN_ARGS + DERIVATION_ARGS + PLACEMENT_ARGS
    a, b = _own_dtype_unsaid(canonical_args(parent)), _own_dtype_unsaid(canonical_args(child))
    return {k: (a.get(k), b.get(k)) for k in sorted((set(a) | set(b)) - set(skip))
            if a.get(k) != b.get(k)}


def at_batch_one(batch_size: Any) -> bool:
    """Whether a batch size is 1 (absent is lm-eval's default, 1); ``auto`` is not."""
    return canonical(1 if batch_size is None else batch_size) == canonical(1)
