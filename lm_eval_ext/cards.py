"""Disclosure cards (after SafetyRepro's GRID card): what one run was, axis by axis.

A card is derived from a run's own lm-eval output (``results_*.json`` and its samples), so any
lm-eval run has one; campaigns write it beside each cell as ``card.json``, and ``analyze``
lists every axis on which the compared runs differ, so that a comparison that changes two
things at once is visible. ``prompt_sha256`` is the SHA-256 over the per-item prompt hashes in
``doc_id`` order (it changes with the prompt text, chat template or few-shot context);
``item_set_sha256`` the SHA-256 over the sorted item keys (our tasks' ``doc.item_key``, else
``doc_hash``: the items evaluated).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CARD_FILE = "card.json"
#: axes of a card that describe the evaluation (everything a card holds)
AXES = ("model", "model_revision", "weights", "model_settings", "harness", "harness_version",
        "model_class", "task", "task_version", "template_tier", "prompt_sha256", "chat_template_sha256",
        "system_instruction_sha256", "shots", "decoding", "scoring_path", "precision",
        "batch_size", "item_set_sha256", "n_items", "judge_rubrics", "packages")


def _sha256_lines(values: Sequence[str]) -> str:
    return hashlib.sha256("".join(f"{v}\n" for v in values).encode()).hexdigest()


def model_identity(config: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """(model name, revision, weights provenance) from a results file's ``config``."""
    args = config.get("model_args")
    pretrained = None
    if isinstance(args, Mapping):
        pretrained = args.get("pretrained")
    elif isinstance(args, str) and "pretrained=" in args:
        pretrained = args.split("pretrained=")[1].split(",")[0]
    wrapper = wrapper_block(config) or {}
    # the embedded model, or a packaged one (``pretrained=gemma3-270m``): a GGUF, not a hub revision
    gguf = wrapper.get("embedded_model") or wrapper.get("packaged_model") or {}
    if gguf:
        return gguf_identity(str(gguf.get("model")), str(gguf.get("gguf_sha256")))
    if pretrained:
        return Path(str(pretrained)).name, config.get("model_revision"), f"checkpoint {pretrained}"
    return Path(str(config.get("model", "unknown"))).name, config.get("model_revision"), "unknown"


def gguf_identity(model: str, gguf_sha256: str) -> tuple[str, str, str]:
    """(model name, revision, weights) of a checkpoint converted from a GGUF file: its SHA-256."""
    return model, gguf_sha256, f"GGUF sha256={gguf_sha256}"


def _item_id(sample: Mapping[str, Any]) -> str:
    """An item as the item set counts it.

    Our tasks' ``item_key`` (the same item under every template tier, whose doc differs), else
    lm-eval's ``doc_hash``.
    """
    doc = sample.get("doc")
    key = doc.get("item_key") if isinstance(doc, Mapping) else None
    return str(key or sample.get("doc_hash"))


def _chat_template(results: Mapping[str, Any], task_config: Mapping[str, Any]) -> str | None:
    """The SHA-256 of the chat template the prompts went through.

    lm-eval's, or the one hf-metered applies to generation requests itself
    (``chat_template=auto``).
    """
    if results.get("chat_template_sha") or task_config.get("output_type") != "generate_until":
        return results.get("chat_template_sha")
    wrapper = wrapper_block(results.get("config") or {}) or {}
    applied_by = wrapper.get("generation_chat_template_applied_by")
    if not applied_by:
        return None
    return (wrapper.get("generation_chat_template_sha256")
            or f"applied by {applied_by} (its SHA-256 not recorded)")


def _decoding(task_config: Mapping[str, Any], run_config: Mapping[str, Any]) -> str | None:
    if task_config.get("output_type") != "generate_until":
        return None
    merged = {**(task_config.get("generation_kwargs") or {}), **(run_config.get("gen_kwargs") or {})}
    if sampled(merged):  # a sampled text depends on the seeds (greedy decoding on none)
        merged["seeds"] = {k: run_config.get(f"{k}_seed") for k in ("random", "numpy", "torch")}
    return json.dumps(merged, sort_keys=True, default=str)


def sampled(gen_kwargs: Mapping[str, Any]) -> bool:
    """Whether generation kwargs sample (``do_sample`` with a temperature above 0)."""
    try:
        temperature = float(gen_kwargs.get("temperature", 1.0))
    except (TypeError, ValueError):
        temperature = 1.0
    return str(gen_kwargs.get("do_sample", False)).lower() == "true" and temperature > 0


def wrapper_block(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The metered model's own block of a results file's ``config`` (hf- or vllm-metered)."""
    for key in ("hf_metered", "vllm_metered"):
        if isinstance(config.get(key), Mapping):
            return config[key]
    return None


def _model_class(config: Mapping[str, Any]) -> str | None:
    """The lm-eval model class; runs handed a model object record its path as ``model``.

    A metered model names itself in its block (hf-metered runs before it did: ``hf-metered``).
    """
    wrapper = wrapper_block(config)
    if wrapper is not None:
        return str(wrapper.get("model_class") or "hf-metered")
    return config.get("model")


def _torch_version(results: Mapping[str, Any]) -> str | None:
    match = re.search(r"PyTorch version: (\S+)", str(results.get("pretty_env_info") or ""))
    return match.group(1) if match else None


def task_card(results: Mapping[str, Any], task: str, samples: Sequence[Mapping[str, Any]],
              judge_rubrics: Mapping[str, str] | None = None,
              model_fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The card of one task of one run.

    ``model_fields``: ``model``, ``model_revision``, ``weights`` and ``model_settings`` where
    the caller knows more than the results file says
    (:func:`lm_eval_ext.backends.card_fields.model_card_fields`); else
    :func:`model_identity`, and no settings known.
    """
    config = results.get("config") or {}
    task_config = (results.get("configs") or {}).get(task) or {}
    metering = config.get("metering") or {}
    model, revision, weights = model_identity(config)
    ordered = sorted(samples, key=lambda s: int(s["doc_id"]))
    return {
        "model": model, "model_revision": revision, "weights": weights, "model_settings": None,
        **(model_fields or {}),
        "harness": "lm-evaluation-harness", "harness_version": results.get("lm_eval_version"),
        "model_class": _model_class(config),
        "task": task, "task_version": (results.get("versions") or {}).get(task),
        "template_tier": (task_config.get("metadata") or {}).get("template_tier", "default"),
        "prompt_sha256": _sha256_lines([str(s.get("prompt_hash")) for s in ordered]),
        "chat_template_sha256": _chat_template(results, task_config),
        "system_instruction_sha256": results.get("system_instruction_sha"),
        "shots": (results.get("n-shot") or {}).get(task, task_config.get("num_fewshot", 0)),
        "decoding": _decoding(task_config, config),
        "scoring_path": ("generative" if task_config.get("output_type") == "generate_until"
                         else "loglik"),
        "precision": metering.get("precision", _precision_of(config.get("model_dtype"))),
        "batch_size": batch_size_of(config, task_config.get("output_type") == "generate_until"),
        "item_set_sha256": _sha256_lines(sorted(_item_id(s) for s in samples)),
        "n_items": len(samples),
        "judge_rubrics": dict(judge_rubrics or {}),
        "packages": {"lm_eval": results.get("lm_eval_version"),
                     "transformers": results.get("transformers_version"),
                     "torch": _torch_version(results)},
    }


def batch_size_of(config: Mapping[str, Any], generative: bool) -> str:
    """The batch size a run's answers came from: as configured, or the fast path's plan.

    Left at lm-eval's default (the number 1), hf-metered's fast path plans the batches of greedy
    generation itself (docs/hf-metered.md), so a generative task's answers came from batches of
    ``planned:32`` (the planned sizes, ``planned:16-32`` where they varied), not of 1. A typed
    batch size, ``auto`` and log-likelihood tasks keep the configured value.
    """
    metering = config.get("metering") or {}
    configured = str(metering.get("batch_size", config.get("batch_size")))
    generation = metering.get("generation") or {}
    planned = [int(b) for b in generation.get("batch_sizes") or [] if isinstance(b, int)]
    if (not generative or not planned or not generation.get("fast_requests")
            or generation.get("batch_size_asked") is not None or configured != "1"):
        return configured
    low, high = min(planned), max(planned)
    return f"planned:{low}" if low == high else f"planned:{low}-{high}"


#: torch dtypes as the metered models name their precision (stock lm-eval records the dtype)
DTYPE_PRECISION = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


def _precision_of(model_dtype: object) -> str:
    """A stock run's ``model_dtype`` in the metered models' words (``torch.float32`` -> fp32)."""
    return DTYPE_PRECISION.get(str(model_dtype), str(model_dtype))


#: axis -> the design factor it belongs to (a comparison should change one factor)
FACTORS = {
    "model": "model", "model_revision": "model", "weights": "model",
    "model_settings": "model_settings",
    # the lm-eval model class (hf, hf-metered) is the harness's code around the same weights
    "harness": "harness", "harness_version": "harness", "packages": "harness",
    "model_class": "harness",
    "task_version": "task_version",
    "task": "items", "item_set_sha256": "items", "n_items": "items",
    "template_tier": "prompt", "prompt_sha256": "prompt", "chat_template_sha256": "prompt",
    "system_instruction_sha256": "prompt", "shots": "prompt",
    "decoding": "decoding", "scoring_path": "scoring_path", "precision": "precision",
    "batch_size": "batch_size", "judge_rubrics": "judge",
}


def differing_axes(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """The axes whose values differ between two cards (nested values compared whole).

    ``prompt_sha256`` hashes the prompts of the evaluated items, so on different item sets it
    differs by construction; it is listed there only when a prompt setting differs too.
    """
    axes = [axis for axis in AXES if reference.get(axis) != other.get(axis)]
    if "item_set_sha256" in axes and not any(
            FACTORS[a] == "prompt" for a in axes if a != "prompt_sha256"):
        axes = [a for a in axes if a != "prompt_sha256"]
    return axes


def differing_factors(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """The design factors (model, items, prompt, precision, ...) that differ.

    Another task name on the same items (``bbq_x`` and ``bbq_x_loglik``: the scoring path's
    twin) is the factor ``task``, not a change of items.
    """
    axes = differing_axes(reference, other)
    same_items = not {"item_set_sha256", "n_items"} & set(axes)
    return sorted({"task" if a == "task" and same_items else FACTORS[a] for a in axes})


def describe_difference(reference: Mapping[str, Any], other: Mapping[str, Any]) -> str:
    """``precision: bf16 -> int8; batch_size: 1 -> 32`` (or ``nothing``)."""
    parts = []
    for axis in differing_axes(reference, other):
        old, new = reference.get(axis), other.get(axis)
        if isinstance(old, str) and len(old) == 64 and isinstance(new, str):
            old, new = old[:12], new[:12]  # hashes: the prefix is enough to tell
        parts.append(f"{axis}: {old} -> {new}")
    return "; ".join(parts) or "nothing"
