"""Register ``hf-metered``, ``vllm-metered`` and the package's task folders with lm-eval.

Used by the start-up hook (:mod:`lm_eval_ext.plugin.autoload`) and explicitly by
``lm-eval-ext run``. Both functions are idempotent.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from lm_eval_ext.errors import (
    TRACEBACK_ENV,
    EnvironmentProblem,
    LmEvalExtError,
    ending_lm_eval_command,
)
from lm_eval_ext.paths import package_tasks_dir, user_tasks_dir

#: lm-eval model name -> "module:Class" (must match the class exactly so that the
#: registry's lazy placeholder upgrades to the class when the module is imported).
MODELS = {
    "hf-metered": "lm_eval_ext.backends.hf.metered:HFMeteredLM",
    "hf-multimodal-metered": "lm_eval_ext.backends.hf.multimodal:HFMultimodalMeteredLM",
    "vllm-metered": "lm_eval_ext.backends.vllm.metered:VLLMMeteredLM",
}

_PATCH_MARK = "_lm_eval_ext_patched"


def register_models() -> None:
    """Register our models as lazy placeholders, after lm-eval's own built-ins.

    Importing ``lm_eval.models`` first matters: ``get_model`` only imports the built-ins
    when the registry is empty, so registering first would hide ``--model hf``.
    """
    import lm_eval.models  # noqa: F401  (registers the built-in models)
    from lm_eval.api.registry import model_registry

    for name, target in MODELS.items():
        if name not in model_registry:
            model_registry.register(name, target=target)


def task_include_paths() -> list[Path]:
    """The package's task folder, plus the user-registered task folder when it exists."""
    paths = [package_tasks_dir()]
    user_dir = user_tasks_dir()
    if user_dir.is_dir():
        paths.append(user_dir)
    return paths


def _merge_include_paths(user_value) -> list:
    ours = [str(p) for p in task_include_paths()]
    if user_value is None:
        theirs = []
    elif isinstance(user_value, (list, tuple)):
        theirs = list(user_value)
    else:
        theirs = [user_value]
    # Later paths override earlier ones in lm-eval's index: the user's paths come last.
    return ours + [p for p in theirs if str(p) not in ours]


def check_setting_keys(metadata) -> None:
    """Reject a ``--metadata`` key that is a misspelling of one of our task settings.

    ``--metadata`` also carries other tasks' keys (and lm-eval merges model args into it), so
    unknown keys in general must pass; a near miss such as ``template_teir`` would otherwise
    be ignored and the default tier would run. Checked when the TaskManager is built, before
    the model loads.
    """
    import difflib

    from lm_eval_ext.errors import ConfigError
    from lm_eval_ext.tasks.common.prompting import TASK_SETTING_KEYS

    for key in metadata or {}:
        close = difflib.get_close_matches(str(key), TASK_SETTING_KEYS, n=1, cutoff=0.75)
        if close and key != close[0]:
            raise ConfigError(f"--metadata key {key!r} is not a task setting; did you mean "
                              f"{close[0]!r}? (e.g. --metadata '{{\"{close[0]}\": \"cot\"}}')")


def patch_task_manager(task_manager_cls=None) -> None:
    """Make every ``TaskManager`` also index the package's task folders."""
    from lm_eval_ext.plugin.upstream_noise import drop_metadata_hint

    drop_metadata_hint()
    if task_manager_cls is None:
        from lm_eval.tasks import TaskManager as task_manager_cls
    original = task_manager_cls.__init__
    if getattr(original, _PATCH_MARK, False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        _check_command_tasks_once()
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["include_path"] = _merge_include_paths(
            bound.arguments.get("include_path")
        )
        with ending_lm_eval_command():
            check_setting_keys(bound.arguments.get("metadata"))
        if "include_defaults" not in bound.arguments and lm_eval_index_skipped():
            bound.arguments["include_defaults"] = False
        original(*bound.args, **bound.kwargs)

    setattr(__init__, _PATCH_MARK, True)
    task_manager_cls.__init__ = __init__


def embedded_run_name(model_args) -> str:
    """Output-folder name of an hf-metered run of the embedded model: model and precision.

    lm-eval names the folder after ``pretrained=``; without it, after a seeded "random" draw,
    so every headline run would land in the same meaningless folder.
    """
    from lm_eval.utils import simple_parse_args_string

    from lm_eval_ext.backends.embedded_model import MODEL_NAME
    from lm_eval_ext.backends.precision import precision_name

    args = model_args if isinstance(model_args, dict) else simple_parse_args_string(model_args or "")
    # without precision= the embedded checkpoint runs in its own dtype: float32 (dequantised)
    precision = args.get("precision") or precision_name(args.get("dtype")) or "fp32"
    return f"{MODEL_NAME}__embedded__{precision}"


def patch_output_naming(tracker_cls=None) -> None:
    """Name the embedded model's output folder by model and precision (not randomly).

    Also makes lm-eval's saves check the files they write (:mod:`lm_eval_ext.plugin.saved_outputs`):
    the start-up hook calls this function when lm-eval's tracker module is imported.
    """
    from lm_eval_ext.plugin.saved_outputs import check_saved_outputs

    check_saved_outputs()
    if tracker_cls is None:
        from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker as tracker_cls
    original = tracker_cls.log_experiment_args
    if getattr(original, _PATCH_MARK, False):
        return

    @functools.wraps(original)
    def log_experiment_args(self, model_source, model_args, *args, **kwargs):
        original(self, model_source, model_args, *args, **kwargs)
        if model_source in MODELS and tracker_cls._get_model_name(model_args) is None:
            from lm_eval.utils import sanitize_model_name

            self.model_name = embedded_run_name(model_args)
            self.model_name_sanitized = sanitize_model_name(self.model_name)

    setattr(log_experiment_args, _PATCH_MARK, True)
    tracker_cls.log_experiment_args = log_experiment_args


def activate() -> None:
    """Register models and patch the task manager (what the autoload hook does)."""
    import lm_eval.evaluator

    from lm_eval_ext.plugin.upstream_noise import quiet_git_hash

    register_models()
    patch_task_manager()
    patch_output_naming()
    quiet_git_hash(lm_eval.evaluator)


def narrow_task_manager(tasks: list[str], extra_paths: list[str] | tuple = ()):
    """A TaskManager over our task folders (plus ``extra_paths``) alone, if it holds every task.

    lm-eval indexes its whole task tree (about 12 s on 2 cores) for every TaskManager; our
    tasks load from the same YAML files without it. None when a task is not ours.
    """
    manager = our_task_manager(extra_paths)
    return manager if tasks and all(task in manager.all_tasks for task in tasks) else None


def our_task_manager(extra_paths: list[str] | tuple = ()):
    """A TaskManager over our task folders (plus ``extra_paths``) alone: lm-eval's index skipped."""
    from lm_eval.tasks import TaskManager

    patch_task_manager()
    return TaskManager(include_path=list(extra_paths) or None, include_defaults=False)


#: (task names, --include_path) of this process's lm-eval command line; see narrow_to_command_line
_COMMAND_TASKS: tuple[tuple[str, ...], str | None] | None = None
#: whether those names were checked (:func:`check_known_tasks`, once, before lm-eval's index)
_TASKS_CHECKED = False


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
    global _COMMAND_TASKS, _TASKS_CHECKED
    _COMMAND_TASKS, _TASKS_CHECKED = command_line_tasks(argv), False
    _command_tasks_are_ours.cache_clear()


def _check_command_tasks_once() -> None:
    """:func:`check_known_tasks` on the command line's tasks, at the first TaskManager."""
    global _TASKS_CHECKED
    if _COMMAND_TASKS is None or _TASKS_CHECKED:
        return
    _TASKS_CHECKED = True
    with ending_lm_eval_command():
        check_known_tasks(*_COMMAND_TASKS)


def check_known_tasks(tasks: Sequence[str], include_path: str | None) -> None:
    """A task name that no task folder mentions is refused now, before lm-eval's index.

    Names in our folders are looked up in our own small index; the rest in the text of every
    task YAML (:mod:`lm_eval_ext.plugin.task_names`, about a second against lm-eval's minute).
    """
    from lm_eval_ext.plugin.command_preflight import PreflightError, unknown_task_message
    from lm_eval_ext.plugin.task_names import declared_task_names, unknown_task_names

    extra = [include_path] if include_path else []
    ours = set(our_task_manager(extra).all_tasks)
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
    return _COMMAND_TASKS is not None and _command_tasks_are_ours(*_COMMAND_TASKS)


def existing_task_owners(tasks: Sequence[str]) -> dict[str, str]:
    """Task -> path of the YAML that already defines it (outside the user task folder).

    lm-eval's whole index (several seconds) is read once per process for every name.
    """
    index, user = full_task_index(), str(user_tasks_dir())
    return {task: index[task] or "lm-eval" for task in tasks
            if task in index and not index[task].startswith(user)}


@functools.cache
def full_task_index(include_path: str | None = None) -> dict[str, str]:
    """Task -> defining YAML ('' when none): lm-eval's whole tree, our folders, ``include_path``.

    Read once per process (several seconds on 2 cores).
    """
    from lm_eval.tasks import TaskManager

    patch_task_manager()
    manager = TaskManager(include_path=[include_path] if include_path else None)
    return {name: str(entry.yaml_path or "") for name, entry in manager.task_index.items()}


def check_task_names_free(tasks: Sequence[str]) -> None:
    """A name that lm-eval or our packaged tasks already define is refused, naming the owner."""
    for task, owner in existing_task_owners(tasks).items():
        raise LmEvalExtError(f"task name {task!r} is already defined by {owner}; choose "
                             "another name")


def one_line_error(error: BaseException) -> BaseException:
    """lm-eval's "Tasks not found: NAMES" as our one-line error with the closest names.

    A task whose data set needs the Hugging Face hub, which cannot be reached, is one line too.
    """
    text = str(error)
    if isinstance(error, ConnectionError) and " on the Hub" in text:
        return EnvironmentProblem(
            f"a task's data set could not be loaded: {text}; the task downloads it from the "
            "Hugging Face hub: connect to the hub (unset HF_HUB_OFFLINE and HF_DATASETS_OFFLINE "
            "where set), or run it once online so that datasets caches it")
    if isinstance(error, ValueError) and text.startswith("Tasks not found: "):
        from lm_eval_ext.plugin.command_preflight import PreflightError, unknown_task_message

        include_path = (_COMMAND_TASKS or ((), None))[1]
        return PreflightError(unknown_task_message(text.removeprefix("Tasks not found: "),
                                                   list(full_task_index(include_path))))
    return error


def install_one_line_errors() -> None:
    """Our own errors in the stock ``lm_eval`` command: one line, not lm-eval's traceback.

    lm-eval-ext's errors (:class:`~lm_eval_ext.errors.LmEvalExtError`: a bad model arg, a
    missing file) already say what was wrong and the fix; every other exception keeps Python's
    traceback. ``LM_EVAL_EXT_TRACEBACK=1`` shows ours in full too.
    """
    original = sys.excepthook
    if getattr(original, _PATCH_MARK, False) or os.environ.get(TRACEBACK_ENV):
        return

    def excepthook(kind, value, traceback) -> None:
        value = one_line_error(value)
        if isinstance(value, LmEvalExtError):
            sys.stderr.write(f"lm_eval: error: {value}\n")
        else:
            original(kind, value, traceback)

    setattr(excepthook, _PATCH_MARK, True)
    sys.excepthook = excepthook
