"""Where lm-eval-ext keeps downloads, converted models and user-registered tasks."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "LM_EVAL_EXT_CACHE"
DATA_ENV = "LM_EVAL_EXT_DATA"


def cache_dir() -> Path:
    """Root of the cache: ``$LM_EVAL_EXT_CACHE``, else ``$XDG_CACHE_HOME/lm_eval_ext``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "lm_eval_ext"


def cache_error(path: Path, error: OSError) -> Exception:
    """One line for a cache folder that cannot be written: the path, the cause, the setting."""
    from lm_eval_ext.files import path_error

    setting = (f"{CACHE_ENV}={os.environ[CACHE_ENV]}" if os.environ.get(CACHE_ENV)
               else f"the default cache {cache_dir()}")
    problem = path_error(path, error)
    fix = (problem.fix if problem.exit_code == 1 else
           f"set {CACHE_ENV} to a folder you can write")
    return type(problem)(f"cannot write the cache {path}: {problem.cause} ({setting}); {fix}")


def user_tasks_dir() -> Path:
    """Folder for tasks the user registers (``lm-eval-ext data fingerprint --register``)."""
    return cache_dir() / "user_tasks"


def package_tasks_dir() -> Path:
    """Folder of the task YAMLs shipped with the package."""
    return Path(__file__).resolve().parent / "tasks"


def task_include_paths() -> list[Path]:
    """The package's task folder, plus the user-registered task folder when it exists."""
    return [package_tasks_dir(), *(d for d in [user_tasks_dir()] if d.is_dir())]
