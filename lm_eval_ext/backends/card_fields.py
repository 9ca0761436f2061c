"""What the backends know of a run's model, for its disclosure card.

:func:`model_card_fields` reads a results file's ``config``: the model's identity
(:func:`~lm_eval_ext.backends.packaged_models.model_identity_of`: a converted GGUF by its
SHA-256) and ``model_settings``, the model args its answers depend on besides the weights and
the precision (``max_length``, ``mc_scoring``, ``chat_template``, ...), so that a comparison
that changes one of them shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lm_eval_ext.backends.engine_key import DERIVATION_ARGS, PLACEMENT_ARGS, answer_args
from lm_eval_ext.backends.packaged_models import model_identity_of

#: model args that other card axes carry (the model, its revision, the precision)
ON_OTHER_AXES = ("pretrained", "revision", "precision", "dtype")


def model_settings(model_args: Mapping[str, Any] | str | None) -> dict[str, str]:
    """The model args a run's answers depend on beyond its weights and precision (canonical)."""
    if isinstance(model_args, str):
        from lm_eval.utils import simple_parse_args_string

        model_args = simple_parse_args_string(model_args)
    skip = ON_OTHER_AXES + DERIVATION_ARGS + PLACEMENT_ARGS
    return {k: v for k, v in sorted(answer_args(model_args or {}).items()) if k not in skip}


def model_card_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """``model``, ``model_revision``, ``weights`` and ``model_settings`` of a results config."""
    model, revision, weights = model_identity_of(config)
    return {"model": model, "model_revision": revision, "weights": weights,
            "model_settings": model_settings(config.get("model_args"))}
