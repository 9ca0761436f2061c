"""Start-up hook that plugs lm-eval-ext into the stock ``lm_eval`` command.

lm-eval 0.4.13 has no plugin discovery, so the wheel ships ``lm_eval_ext_autoload.pth``,
which imports this module at interpreter start (installed top-level as
``_lm_eval_ext_autoload`` so that start-up does not import the ``lm_eval_ext`` package).
It only installs a ``sys.meta_path``
finder (no lm_eval or torch import happens here). When ``lm_eval.models`` or
``lm_eval.tasks.manager`` finish importing, :mod:`lm_eval_ext.plugin.registration` registers
``hf-metered`` and adds the package's task folders to every ``TaskManager``; in the ``lm_eval``
command, a run of our tasks alone skips lm-eval's own task index (same tasks, ~10 s sooner).

Set ``LM_EVAL_EXT_DISABLE=1`` to turn the hook off; ``lm-eval-ext run ...`` still works.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Callable
from types import ModuleType

DISABLE_ENV = "LM_EVAL_EXT_DISABLE"


def _run_models_hook(module: ModuleType) -> None:
    from lm_eval_ext.plugin.lm_eval_cli import install_one_line_errors
    from lm_eval_ext.plugin.registration import register_models

    register_models()
    install_one_line_errors()


def _run_task_manager_hook(module: ModuleType) -> None:
    from lm_eval_ext.plugin.lm_eval_cli import check_stock_command_line
    from lm_eval_ext.plugin.task_folders import add_task_folders
    from lm_eval_ext.plugin.upstream_noise import drop_metadata_hint

    add_task_folders()
    drop_metadata_hint()
    check_stock_command_line()


def _run_tracker_hook(module: ModuleType) -> None:
    from lm_eval_ext.plugin.registration import name_embedded_runs
    from lm_eval_ext.plugin.saved_outputs import check_saved_results, check_saved_samples

    name_embedded_runs()
    check_saved_results()
    check_saved_samples()


def _run_evaluator_hook(module: ModuleType) -> None:
    from lm_eval_ext.plugin.upstream_noise import quiet_git_hash

    quiet_git_hash()


_POST_IMPORT_HOOKS: dict[str, Callable[[ModuleType], None]] = {
    "lm_eval.models": _run_models_hook,
    "lm_eval.tasks.manager": _run_task_manager_hook,
    "lm_eval.loggers.evaluation_tracker": _run_tracker_hook,
    "lm_eval.evaluator": _run_evaluator_hook,
}


class _HookedLoader(importlib.abc.Loader):
    """Delegating loader that runs a hook right after the wrapped module executes."""

    def __init__(self, loader: importlib.abc.Loader, hook: Callable[[ModuleType], None]):
        self._loader = loader
        self._hook = hook

    def create_module(self, spec):  # noqa: D102
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:  # noqa: D102
        self._loader.exec_module(module)
        try:
            self._hook(module)
        except Exception as exc:  # never break lm_eval itself
            sys.stderr.write(
                f"lm-eval-ext: autoload hook for {module.__name__} failed ({exc!r}); "
                "use `lm-eval-ext run ...` instead, or set LM_EVAL_EXT_DISABLE=1.\n"
            )

    def __getattr__(self, name: str):
        return getattr(self._loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that wraps the loaders of a few named modules."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]):
        self._hooks = dict(hooks)

    def find_spec(self, fullname, path, target=None):  # noqa: D102
        hook = self._hooks.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookedLoader(spec.loader, hook)
                return spec
        return None


def install() -> None:
    """Install the finder once, unless ``LM_EVAL_EXT_DISABLE`` is set to a true value."""
    if os.environ.get(DISABLE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
        return
    if any(isinstance(f, PostImportFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, PostImportFinder(_POST_IMPORT_HOOKS))
    # Modules imported before this hook (rare: only if something imported lm_eval from a
    # .pth file that sorts earlier) get the hook applied directly.
    for name, hook in _POST_IMPORT_HOOKS.items():
        module = sys.modules.get(name)
        if module is not None:
            hook(module)


try:
    install()
except Exception as _exc:  # a broken hook must never break Python start-up
    sys.stderr.write(f"lm-eval-ext: autoload disabled ({_exc!r})\n")
