"""The one way the plug-in replaces an attribute of lm-eval (or ``sys.excepthook``): once, marked.

``@wrap_once("lm_eval.evaluator", "get_git_commit_hash")`` over ``wrapper(original) ->
replacement`` makes an install of the wrapper's name (no arguments; a second call does nothing).
The replacement's :data:`MARK` holds that name: what replaced an attribute can be read back.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

#: the attribute of a replacement that names the install which made it
MARK = "_lm_eval_ext_install"


def wrap_once(module: str, attribute: str) -> Callable[[Callable], Callable[[], None]]:
    """The install setting ``module.attribute`` (``Class.name`` too) to ``wrapper(original)``.

    ``module`` is imported when the install runs (or taken from ``sys.modules`` mid-import).
    """
    *owner_names, name = attribute.split(".")

    def decorator(wrapper: Callable[[Callable], Callable]) -> Callable[[], None]:
        @functools.wraps(wrapper)
        def install() -> None:
            owner = functools.reduce(getattr, owner_names, importlib.import_module(module))
            if getattr(getattr(owner, name), MARK, None) != wrapper.__name__:
                replacement = wrapper(getattr(owner, name))
                setattr(replacement, MARK, wrapper.__name__)
                setattr(owner, name, replacement)
        return install
    return decorator
