"""A campaign worker's kept vLLM engine handed to lm-eval's ``VLLM`` (write 10).

lm-eval's ``VLLM.__init__`` builds its engine itself (``LLM(**self.model_args)``,
``models/vllm_causallms.py:154``); unlike ``HFLM`` it takes no built model. While
vllm-metered offers a kept engine (:func:`lm_eval_ext.backends.warm.offering`), the ``LLM``
that module calls returns that engine when it was built with exactly the same arguments, and
builds a new one otherwise. The rest of ``VLLM.__init__`` (tokenizer, run settings) runs as
always.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

from lm_eval_ext.backends.warm import WARM, offered_engine
from lm_eval_ext.plugin.wrapping import wrap_once


@wrap_once("lm_eval.models.vllm_causallms", "LLM")
def hand_over_kept_engines(build: Callable[..., Any]) -> Callable[..., Any]:
    """``LLM(...)`` returning the offered engine where its arguments are the same."""
    built_with: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @functools.wraps(build, updated=())
    def engine(*args: Any, **kwargs: Any) -> Any:
        offered = offered_engine()
        if offered is not None and built_with.get(offered) == (args, kwargs):
            return offered
        built = build(*args, **kwargs)
        built_with[built] = (args, kwargs)
        return built

    WARM.engine_handoff = True
    return engine
