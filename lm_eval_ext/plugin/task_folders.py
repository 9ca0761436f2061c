"""Our task folders in every lm-eval ``TaskManager``, and lm-eval's own index only where needed.

Every ``TaskManager`` also indexes the package's task folder and the user task folder
(:func:`add_task_folders`). In a command whose tasks are all ours (:func:`narrow_to_command_line`)
lm-eval's own index is skipped; its task names are checked before any index is built.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence

from lm_eval_ext.errors import LmEvalExtError, ending_lm_eval_command
from lm_eval_ext.paths import task_include_paths, user_tasks_dir
from lm_eval_ext.plugin.wrapping import wrap_once
from lm_eval_ext.task_building import RUN_TASKS


def _merge_include_paths(user_value) -> list:
    """Our folders, then the user's paths (later paths override earlier ones in the index)."""
    ours = [str(p) for p in task_include_paths()]
    theirs = ([] if user_value is None else list(user_value)
              if isinstance(user_value, (list, tuple)) else [user_value])
    return ours + [p for p in theirs if str(p) not in ours]


def check_setting_keys(metadata, tasks: Sequence[str] | None = None) -> None:
    """Refuse a ``--metadata`` key near a task setting's name, or one our tasks set themselves.

    (Other keys are other tasks'.) ``tasks``: the run's task names, where known; a key our
    tasks set themselves is left to a run of none of ours.
    """
    import difflib

    from lm_eval_ext.errors import ConfigError
    from lm_eval_ext.tasks.common.prompting import DATASET_KEYS, TASK_SETTING_KEYS

    for key in metadata or {}:
        if key in DATASET_KEYS and (tasks is None
                                    or any(t in our_task_names() for t in tasks)):
            raise ConfigError(f"--metadata key {key!r} is set by each of this package's tasks "
                              "itself (its dataset_kwargs; lm-eval would pass it twice to the "
                              "task's loader): leave it out, and name the task that has the "
                              f"{key} you want (e.g. bbq_subset_50pct_r2_loglik, "
                              "bbq_subset_25pct)")
        close = difflib.get_close_matches(str(key), TASK_SETTING_KEYS, n=1, cutoff=0.75)
        if close and key != close[0]:
            raise ConfigError(f"--metadata key {key!r} is not a task setting; did you mean "
                              f"{close[0]!r}? (e.g. --metadata '{{\"{close[0]}\": \"cot\"}}')")


@wrap_once("lm_eval.tasks.manager", "TaskManager.__init__")
def add_task_folders(init: Callable) -> Callable:
    """Every ``TaskManager`` also indexes our task folders (and checks ``--metadata`` keys)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        _check_command_tasks_once()
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["include_path"] = _merge_include_paths(bound.arguments.get("include_path"))
        with ending_lm_eval_command():
            check_setting_keys(bound.arguments.get("metadata"),
                               COMMAND_LINE.tasks if COMMAND_LINE.tasks is not None
                               else RUN_TASKS.get())
        if "include_defaults" not in bound.arguments and lm_eval_index_skipped():
            bound.arguments["include_defaults"] = False
        init(*bound.args, **bound.kwargs)
    return __init__


def our_task_manager(extra_paths: Sequence[str] = ()):
    """A TaskManager over our task folders (plus ``extra_paths``) alone: lm-eval's index skipped.

    (:func:`lm_eval_ext.lm_eval_inputs.our_task_manager`, with our hook installed first.)
    """
    from lm_eval_ext import lm_eval_inputs

    add_task_folders()
    return lm_eval_inputs.our_task_manager(extra_paths)


def our_task_names(extra_paths: Sequence[str] = ()) -> frozenset[str]:
    """The tasks, groups and tags of our folders (plus ``extra_paths``): our small index (0.1 s)."""
    return frozenset(our_task_manager(extra_paths).all_tasks)


def narrow_task_manager(tasks: list[str], extra_paths: Sequence[str] = ()):
    """A TaskManager over our task folders (plus ``extra_paths``) alone, if it holds every task.

    lm-eval indexes its whole task tree (about 12 s on 2 cores) for every TaskManager; our
    tasks load from the same YAML files without it. None when a task is not ours.
    """
    manager = our_task_manager(extra_paths)
    return manager if tasks and all(task in manager.all_tasks for task in tasks) else None


@functools.cache
def full_task_index(include_path: str | None = None) -> dict[str, str]:
    """Task -> its YAML ('' if none): lm-eval's tree, our folders, ``include_path`` (read once)."""
    from lm_eval.tasks import TaskManager

    add_task_folders()
    manager = TaskManager(include_path=[include_path] if include_path else None)
    return {name: str(entry.yaml_path or "") for name, entry in manager.task_index.items()}


def check_task_names_free(tasks: Sequence[str]) -> None:
    """A name that lm-eval or our packaged tasks already define is refused, naming the owner."""
    index, user = full_task_index(), str(user_tasks_dir())
    for task in tasks:
        if task in index and not index[task].startswith(user):
            raise LmEvalExtError(f"task name {task!r} is already defined by "
                                 f"{index[task] or 'lm-eval'}; choose another name")


@dataclasses.dataclass
class CommandLine:
    """This process's lm-eval command line, as :func:`narrow_to_command_line` was given it."""

    tasks: tuple[str, ...] | None = None  # None: no command line (the Python API)
    include_path: str | None = None
    checked: bool = False  # its tasks checked (check_known_tasks, at the first TaskManager)


COMMAND_LINE = CommandLine()


def command_line_tasks(argv: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
    """Task names (``--tasks``/``-t``, space or comma separated) and ``--include_path`` of argv."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--tasks", "-t", nargs="+", default=[])
    parser.add_argument("--include_path", default=None)
    known, _ = parser.parse_known_args(list(argv))
    tasks = tuple(name for value in known.tasks for name in value.split(",") if name)
    return tasks, known.include_path


def narrow_to_command_line(argv: Sequence[str]) -> None:
    """Let this process's TaskManagers skip lm-eval's own task index when every task is ours.

    lm-eval indexes its whole task tree (about 8-12 s on 2 cores) for every TaskManager. When
    every task named on the lm-eval command line ``argv`` is in our folders (or in its
    ``--include_path``), the index holds nothing the run can load, so it is skipped: the same
    YAML files load, the same tasks run. Decided at the first TaskManager; a command naming any
    other task (or none, e.g. ``--config``) keeps lm-eval's full index.
    """
    COMMAND_LINE.tasks, COMMAND_LINE.include_path = command_line_tasks(argv)
    COMMAND_LINE.checked = False
    _command_tasks_are_ours.cache_clear()


def _check_command_tasks_once() -> None:
    """:func:`check_known_tasks` on the command line's tasks, at the first TaskManager."""
    if COMMAND_LINE.tasks is None or COMMAND_LINE.checked:
        return
    COMMAND_LINE.checked = True
    with ending_lm_eval_command():
        check_known_tasks(COMMAND_LINE.tasks, COMMAND_LINE.include_path)


def check_known_tasks(tasks: Sequence[str], include_path: str | None) -> None:
    """A task name that no task folder mentions is refused now, before lm-eval's index.

    Names in our folders are looked up in our own small index; the rest in the text of every
    task YAML (:mod:`lm_eval_ext.plugin.task_names`, about a second against lm-eval's minute).
    """
    from lm_eval_ext.command_preflight import PreflightError, unknown_task_message
    from lm_eval_ext.plugin.task_names import declared_task_names, unknown_task_names

    extra = [include_path] if include_path else []
    ours = our_task_names(extra)
    paths = [*task_include_paths(), *extra]
    unknown = unknown_task_names([t for t in tasks if t not in ours], paths)
    if unknown:
        raise PreflightError(unknown_task_message(
            ",".join(unknown), sorted(ours | set(declared_task_names(paths)))))


@functools.cache
def _command_tasks_are_ours(tasks: tuple[str, ...], include_path: str | None) -> bool:
    """Every name is a task of ours or of ``include_path``, or a group of our own folders.

    A tag, or a group from ``include_path``, may gather lm-eval's own tasks too: those keep
    lm-eval's full index.
    """
    manager = narrow_task_manager(list(tasks), [include_path] if include_path else ())
    if manager is None:
        return False
    ours = tuple(str(p) for p in task_include_paths())
    for task in tasks:
        entry = manager.task_index[task]
        if entry.kind.name == "TAG" or (entry.kind.name == "GROUP"
                                        and not str(entry.yaml_path or "").startswith(ours)):
            return False
    return True


def lm_eval_index_skipped() -> bool:
    """Whether this process's TaskManagers skip lm-eval's own index (see narrow_to_command_line)."""
    return (COMMAND_LINE.tasks is not None
            and _command_tasks_are_ours(COMMAND_LINE.tasks, COMMAND_LINE.include_path))
