"""What both decoders and the packed scorer read of a transformers model (public APIs only).

Its attention kernel and whether it takes a custom 4-D mask, whether its layers keep every
earlier token, the position ids ``generate`` gives a left-padded prompt, one decoding forward,
and a cache's tensors (read, never written). Used by :mod:`.greedy`, :mod:`.graphed` and
:mod:`lm_eval_ext.backends.hf.shared_prefix`.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

#: attention kernels that take a custom 4-D mask (bool for sdpa, additive for eager); the
#: static decode and hf-metered's packed scoring both pass one
MASKABLE_ATTENTION = ("sdpa", "eager")
#: a decoder compacts its batch once the running rows are at most this share of its rows
COMPACT_SHARE = 0.5


def attention_kernel(model: Any) -> str | None:
    """The attention implementation the loaded model runs (read from its config; the one read)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


def prompt_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each token's position id in its left-padded row, as ``generate`` sets them (0 on padding)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def plain_layers(model: Any) -> bool:
    """Whether every layer keeps all earlier tokens (no sliding window, no recurrent state)."""
    config = model.config.get_text_config(decoder=True)
    kinds = getattr(config, "layer_types", None)
    if kinds is not None:
        return set(kinds) == {"full_attention"}
    return not getattr(config, "sliding_window", None)


class DecodeForward:
    """One model's decoding forward: the last position's scores, the cache grown by the ids.

    transformers 5.2x renames ``past_key_values`` to ``cache``; ``logits_to_keep`` is passed
    where the model takes it.
    """

    def __init__(self, model: Any):
        accepted = inspect.signature(model.forward).parameters
        self.cache_key = "cache" if "cache" in accepted else "past_key_values"
        self.last_only = {"logits_to_keep": 1} if "logits_to_keep" in accepted else {}
        self.model = model
        self.plain = plain_layers(model)

    def __call__(self, cache: Any, ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The last position's scores; the cache grows by ``ids``."""
        return self.model(input_ids=ids, use_cache=True, **{self.cache_key: cache},
                          **self.last_only, **kwargs).logits[:, -1]


def layer_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values, ``[rows, heads, columns, dim]`` (read, never written)."""
    return [(layer.keys, layer.values) for layer in cache.layers]
