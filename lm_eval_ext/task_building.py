"""lm-eval's tasks built as lm-eval builds them, before the model loads.

lm-eval builds a run's tasks (reads their data, renders the first item's prompt) only after it
has loaded the model; a task YAML of the user's own that fails there ends in lm-eval's
traceback. Built here first, its failure is one line naming the task and the folder.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lm_eval_ext.errors import EnvironmentProblem, LmEvalExtError, PreflightError


def unreachable_data(error: BaseException) -> EnvironmentProblem | None:
    """A task whose data set needs the Hugging Face hub or the web, out of reach: one line."""
    text = str(error)
    if isinstance(error, ConnectionError) and " on the Hub" in text:
        return EnvironmentProblem(
            f"a task's data set could not be loaded: {text}; the task downloads it from the "
            "Hugging Face hub: connect to the hub (unset HF_HUB_OFFLINE and HF_DATASETS_OFFLINE "
            "where set), run it once online so that datasets caches it, or use one of this "
            "package's tasks (e.g. bbq_subset_25pct), which read local files")
    if isinstance(error, FileNotFoundError) and "Unable to find 'http" in text:
        return EnvironmentProblem(
            f"a task's data file could not be fetched ({text.split('Unable to find ')[-1]}): "
            "the web cannot be reached from here; a task from `lm-eval-ext export-upstream` "
            "reads local files when exported with --local-data")
    return None


#: the tasks a check before the run builds (:func:`tasks_of_this_run`); None: not known
RUN_TASKS: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "lm_eval_ext_run_tasks", default=None)


@contextlib.contextmanager
def tasks_of_this_run(tasks: Sequence[str]) -> Iterator[None]:
    """TaskManagers made inside know the run's tasks (before the command line is recorded)."""
    token = RUN_TASKS.set(tuple(tasks))
    try:
        yield
    finally:
        RUN_TASKS.reset(token)


#: the fix for a task YAML of the user's own that lm-eval cannot build
FIX_THE_YAML = "fix the task YAML in {folders} (its keys, data files, prompt, choices or target)"
#: the fix for a task written by ``data fingerprint --register`` (changed or cut since)
REGISTER_AGAIN = ("its files under {folders} were changed after `lm-eval-ext data fingerprint "
                  "--register` wrote them: register it again from the manifest CSV it came from "
                  "(`lm-eval-ext data fingerprint CSV --register NAME --replace`)")


def build_tasks(names: Sequence[str], manager: Any, user_folders: Sequence[str] = (),
                fix: str = FIX_THE_YAML) -> dict:
    """lm-eval's tasks ``names``, built by ``manager.load_task_or_group``.

    (What lm-eval's ``get_task_dict`` calls, and usable while ``lm_eval.tasks`` is still
    loading, where the start-up hook checks the stock command.)

    A data set out of reach is :func:`unreachable_data`'s line and our own errors keep theirs;
    any other failure, where the tasks come from the user's ``user_folders``, is a line naming
    them and ``fix`` (elsewhere it is a bug, ours or lm-eval's, raised as it is).
    """
    try:
        return manager.load_task_or_group(list(names))
    except LmEvalExtError:
        raise
    except Exception as exc:
        unreachable = unreachable_data(exc)
        if unreachable is not None:
            raise unreachable from None
        if not user_folders:
            raise
        raise PreflightError(f"lm-eval cannot build the task(s) {', '.join(names)} "
                             f"({type(exc).__name__}: {exc}); "
                             f"{fix.format(folders=', '.join(user_folders))}, and run "
                             "again") from None


def _defined_under(manager: Any, name: str, folder: Path) -> bool:
    """Whether ``manager`` indexed task ``name`` from a YAML file under ``folder``.

    (The index also holds the package's own tasks.)
    """
    path = _yaml_path(manager, name)
    return path is not None and folder.resolve() in Path(path).resolve().parents


def _yaml_path(manager: Any, name: str) -> str | None:
    """The YAML file ``manager`` indexed task ``name`` from (None: none)."""
    entry = manager.task_index.get(name)
    return getattr(entry, "yaml_path", None) or (entry.get("yaml_path")
                                                 if isinstance(entry, dict) else None)


@functools.cache
def packaged_task_names() -> frozenset[str]:
    """The ``task:`` names of the package's own task YAMLs.

    (Read from the files: every lm-eval ``TaskManager`` here also indexes the user's folder.)
    """
    from lm_eval_ext.paths import package_tasks_dir

    return frozenset(match.group(1) for path in package_tasks_dir().rglob("*.yaml")
                     for match in _TASK_LINE.finditer(path.read_text(encoding="utf-8")))


_TASK_LINE = re.compile(r"^task:\s*([\w.-]+)\s*$", re.MULTILINE)


def _check_not_shadowing(names: Sequence[str], manager: Any) -> None:
    """A file in the registered-task folder must not define one of the package's tasks.

    (lm-eval would run the later definition, the user's file, under the packaged name.)
    """
    packaged = packaged_task_names()
    for name in names:
        if name in packaged:
            raise PreflightError(
                f"task {name} is the package's own, and a file under the registered-task "
                f"folder defines it again ({_yaml_path(manager, name)}), which lm-eval would "
                "run in its place: remove that file (a task of your own needs another name), "
                "and run again")


def check_user_tasks_build(tasks: Sequence[str], include_path: str | None,
                           metadata: Mapping[str, Any] | None = None) -> None:
    """The user's own tasks among ``tasks``, built as lm-eval will build them.

    Those of the ``include_path`` folder, those ``data fingerprint --register`` wrote, and
    task YAMLs given by their path.
    """
    with tasks_of_this_run(tasks):
        _build_user_tasks(tasks, include_path, dict(metadata or {}) or None)


def _build_user_tasks(tasks: Sequence[str], include_path: str | None,
                      metadata: dict[str, Any] | None) -> None:
    """:func:`check_user_tasks_build`'s work, inside :func:`tasks_of_this_run`."""
    from lm_eval.tasks.manager import TaskManager

    from lm_eval_ext.paths import user_tasks_dir

    registered = user_tasks_dir()
    for folder, fix in ((include_path, FIX_THE_YAML),
                        (str(registered) if registered.is_dir() else None, REGISTER_AGAIN)):
        if folder is None:
            continue
        manager = TaskManager(include_path=[folder], include_defaults=False, metadata=metadata)
        own = [name for name in tasks if _defined_under(manager, name, Path(folder))]
        if own and fix is REGISTER_AGAIN:
            _check_not_shadowing(own, manager)
        if own:
            build_tasks(own, manager, [folder], fix)
    files = [name for name in tasks if name.endswith((".yaml", ".yml")) and Path(name).is_file()]
    if files:  # a task YAML given by its path (lm-eval reads it as the task)
        build_tasks(files, TaskManager(include_defaults=False, metadata=metadata), files,
                    FIX_THE_YAML)
