"""The metered model's own block of a results file (``config.hf_metered`` / ``vllm_metered``)."""

from __future__ import annotations

from typing import Any

from lm_eval_ext.backends import embedded_model


def wrapper_info(lm: Any, model_class: str) -> dict[str, Any]:
    """Model class, what it adds, the weights' provenance and who applied the chat template.

    ``lm`` is a metered model: ``header()``, ``_embedded``, ``_packaged``, ``_chat`` and
    ``tokenizer``.
    """
    return {
        "model_class": model_class,
        "adds": lm.header(),
        "embedded_model": embedded_model.provenance() if lm._embedded else None,
        "packaged_model": lm._packaged,
        "chat_template_mode": lm._chat.mode,
        "generation_chat_template_applied_by": lm._chat.applied_by(lm.tokenizer),
    }
