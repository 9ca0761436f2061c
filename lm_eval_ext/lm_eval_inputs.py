"""The files and values lm-eval reads for its options, read as lm-eval reads them.

``--samples`` (JSON text or a file), ``--include_path`` and task YAML paths, the
key=value-or-JSON options, and a ``--config`` file's options as the flags they stand for: each
refused in one line where lm-eval would fail after loading the model, skip a file without a
word, or read something else than was meant. Used by :mod:`lm_eval_ext.command_preflight`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from lm_eval_ext.errors import ConfigError, PreflightError
from lm_eval_ext.files import not_valid_yaml, path_error
from lm_eval_ext.strict_yaml import NoRepeatedKeysLoader

_SAMPLES_SHAPE = ('a JSON object of task -> item indices, e.g. --samples \'{"bbq_subset_25pct": '
                  '[0, 1, 2]}\', or the path of a JSON file holding one')


class _RepeatedKey(ValueError):
    """A JSON object naming one key twice (the key is the message)."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    repeated = next((key for key in keys if keys.count(key) > 1), None)
    if repeated is not None:
        raise _RepeatedKey(repeated)
    return dict(pairs)


def check_samples(value: str, tasks: Sequence[str], include_path: str | None = None) -> None:
    """``--samples`` as lm-eval reads it: JSON text, else a JSON file; task -> indices >= 0.

    lm-eval crashes on a missing file, a list or a non-integer index, reads ``[-1]`` as no
    items (a traceback) and an empty list, or a task it does not run, as every item. An index
    beyond a task's items is lm-eval's assertion, made one line when it is raised.
    """
    try:
        samples = json.loads(value, object_pairs_hook=_unique_keys)
    except _RepeatedKey as exc:
        raise PreflightError(f"--samples {value}: names {exc} twice (JSON keeps the second "
                             "list only); give each task once, with all its indices") from None
    except ValueError:
        if "{" in value:  # lm-eval's parser refuses it in its usage line
            return
        path = Path(value)
        if not path.is_file():
            raise PreflightError(f"--samples {value}: not JSON and no such file; give "
                                 f"{_SAMPLES_SHAPE}") from None
        try:
            samples = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)
        except _RepeatedKey as exc:
            raise PreflightError(f"--samples {value}: names {exc} twice (JSON keeps the second "
                                 "list only); give each task once, with all its indices") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise path_error(path, exc, "read", not_text="save it as UTF-8") from None
        except ValueError as exc:
            raise PreflightError(f"--samples {value} is not valid JSON ({exc}); it must hold "
                                 f"{_SAMPLES_SHAPE}") from None
    if not isinstance(samples, dict) or not samples:
        held = "no task" if samples == {} else f"{type(samples).__name__} {json.dumps(samples)}"
        raise PreflightError(f"--samples {value}: holds {held[:50]}; give {_SAMPLES_SHAPE}")
    for task, indices in samples.items():
        if not isinstance(indices, list) or not indices or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices):
            raise PreflightError(f"--samples {value}: {task}: {json.dumps(indices)[:40]} is not "
                                 "a list of item indices (whole numbers from 0; lm-eval would "
                                 f"{'run every item' if indices == [] else 'fail'}); give "
                                 f"{_SAMPLES_SHAPE}")
        if indices != sorted(set(indices)):
            raise PreflightError(
                f"--samples {value}: {task}: {json.dumps(indices)[:40]} is not in ascending "
                "order without repeats; lm-eval runs the items in the data's order and labels "
                "the i-th with the i-th index given, so each answer would be logged under "
                f"another item's doc_id: give {json.dumps(sorted(set(indices)))[:40]}")
    _check_samples_tasks(value, list(samples), tasks, include_path)


def our_task_manager(extra_paths: Sequence[str] = ()):
    """lm-eval's TaskManager of our task folders (plus ``extra_paths``) alone: its own skipped.

    (From ``lm_eval.tasks.manager``: the stock command's hook checks while ``lm_eval.tasks``
    is still loading.)
    """
    from lm_eval.tasks.manager import TaskManager

    from lm_eval_ext.paths import task_include_paths

    folders = [str(p) for p in task_include_paths()]
    return TaskManager(include_path=folders + [p for p in extra_paths if p not in folders],
                       include_defaults=False)


def _check_samples_tasks(value: str, named: list[str], tasks: Sequence[str],
                         include_path: str | None) -> None:
    """Every task ``--samples`` names is one ``--tasks`` runs (checked where all are ours)."""
    run = [name for given in tasks for name in given.split(",") if name]
    leaves = our_task_manager([include_path] if include_path else []).all_subtasks
    if not run or not all(name in leaves for name in run):
        return  # a group or a task of lm-eval's own: its subtasks are not known here
    stray = [name for name in named if name not in run]
    if stray:
        raise PreflightError(f"--samples {value}: names {', '.join(stray)}, which --tasks does "
                             f"not run (it runs {', '.join(run)}); lm-eval would ignore the "
                             "indices and run every item: name the tasks --tasks runs")


def check_include_path(value: str, tasks: Sequence[str] = (),
                       where: str = "--include_path") -> None:
    """A folder whose task YAMLs lm-eval can read: it skips any other without a word.

    lm-eval indexes ``**/*.yaml`` under the folder (a file holds none) and passes over a file
    it cannot load at debug level, so its tasks are then "not found". A key given twice, or a
    task of ``tasks`` (those run) with no documents to load, is refused as well.
    """
    path = Path(value)
    if not path.exists():
        raise PreflightError(f"{where} {value}: no such folder (lm-eval would go on without its "
                             "tasks); give the folder of your task YAMLs")
    if not path.is_dir():
        raise PreflightError(f"{where} {value} is a file; lm-eval reads every .yaml file of a "
                             f"folder (a file holds none): give {where} {path.parent}")
    for task_file in sorted(path.glob("**/*.yaml")):
        task, problem = read_task_file(task_file)
        if problem is not None:
            raise PreflightError(f"{where} {value}: {task_file} {problem} (lm-eval would skip it "
                                 "and its tasks without a word); fix the file")
        problem = task_content_problem(task_file, task, run=_task_name(task) in tasks)
        if problem is not None:
            raise PreflightError(f"{where} {value}: {task_file} {problem}")


def read_task_file(task_file: Path) -> tuple[object, str | None]:
    """A task YAML as lm-eval reads it, and why it cannot (None: it can).

    The reason is the end of a sentence that starts with the file's name.
    """
    import yaml

    try:
        text = task_file.read_text(encoding="utf-8")
        return yaml.load(text, Loader=_task_loader(yaml.SafeLoader)), None  # noqa: S506
    except yaml.YAMLError as exc:
        return None, not_valid_yaml(exc)
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot be read ({exc})"


def _task_loader(base: type) -> type:
    """``base`` (a safe YAML loader) reading lm-eval's ``!function`` tag, as text."""

    class TaskYamlLoader(base):
        """YAML as lm-eval reads a task file: safe, with its ``!function`` tag."""

    TaskYamlLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    return TaskYamlLoader


#: a task file's keys that give it its documents (or inherit them)
_DOCUMENT_SOURCES = ("dataset_path", "custom_dataset", "include", "class")


def _task_name(task: object) -> str | None:
    """The task a task file defines (None: a group, or not a task file)."""
    return task["task"] if isinstance(task, dict) and isinstance(task.get("task"), str) else None


def task_content_problem(task_file: Path, task: object, run: bool = True) -> str | None:
    """What lm-eval misreads in a readable task file, or fails on after the model loads.

    With the fix, as the end of a sentence that starts with the file's name (None: nothing).
    A key given twice (lm-eval keeps the second without a word); and, for a task that is
    ``run``, no documents to load (a traceback from the datasets library).
    """
    import yaml

    try:
        yaml.load(task_file.read_text(encoding="utf-8"),  # noqa: S506
                  Loader=_task_loader(NoRepeatedKeysLoader))
    except ConfigError as exc:
        return f"is refused: {exc}"
    except yaml.YAMLError:  # read_task_file's reading stands (as lm-eval reads the file)
        pass
    if run and _task_name(task) and not any(key in task for key in _DOCUMENT_SOURCES):
        return ("names no dataset_path (nor include, custom_dataset or class), so lm-eval has no "
                "documents to load; add dataset_path (a hub dataset, or a loader such as json "
                "with dataset_kwargs: {data_files: ...})")
    return None


#: lm-eval's options read as one JSON object or ``key=value`` words (its ``MergeDictAction``)
DICT_OPTIONS = ("--gen_kwargs", "--wandb_args", "--wandb_config_args", "--trackio_args",
                 "--hf_hub_log_args", "--metadata")


def json_object(text: str) -> dict | None:
    """A JSON object written as one argument, else None (lm-eval then reads ``key=value``)."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def check_dict_options(args: argparse.Namespace) -> None:
    """lm-eval's ``key=value``-or-JSON options: text holding ``{`` must be valid JSON.

    lm-eval reads the first value as JSON and, where that fails and the text holds a ``{``,
    raises a ValueError from inside its argument parser (a traceback).
    """
    for option in ("--model_args", *DICT_OPTIONS):
        values = getattr(args, option.removeprefix("--"))
        if not values or "{" not in values[0]:
            continue
        try:
            json.loads(values[0], object_pairs_hook=_unique_keys)
        except _RepeatedKey as exc:
            raise PreflightError(f"{option} {values[0]}: names {exc} twice (JSON keeps the "
                                 f"second without a word); give {exc} once") from None
        except ValueError as exc:
            raise PreflightError(
                f"{option} {values[0]}: lm-eval reads a value holding {{ as JSON, and this is "
                f"not valid JSON ({exc.msg} at character {exc.pos + 1}); "
                f"write a JSON object with double quotes (e.g. {option} '{{\"key\": 1}}') or "
                f"key=value pairs (e.g. {option} key=1)") from None


def _text_pairs(text: str) -> list[tuple[str, str]]:
    """``key=value`` pairs of one argument, split at commas outside brackets and quotes.

    (As lm-eval's parser splits them.)
    """
    parts, part, depth, quote = [], "", 0, None
    for char in text:
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[({":
            depth += 1
        elif char in "])}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts, part = [*parts, part], ""
            continue
        part += char
    return [tuple(p.split("=", 1)) for p in [*parts, part] if "=" in p]


def check_repeated_keys(argv: Sequence[str]) -> None:
    """A key given twice in ``--model_args`` or a key=value option, in one or more of its words.

    lm-eval merges them all and keeps the last value, with only a warning (or none, for JSON).
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--model_args", "-a", nargs="+", action="append")
    for option in DICT_OPTIONS:
        parser.add_argument(option, nargs="+", action="append")
    try:
        args = parser.parse_known_args(list(argv))[0]
    except argparse.ArgumentError:  # lm-eval's parser names it
        return
    for option in ("--model_args", *DICT_OPTIONS):
        seen: dict[str, str] = {}
        for words in getattr(args, option.removeprefix("--")) or []:
            given = json_object(words[0])
            pairs = ([(k, json.dumps(v)) for k, v in given.items()] if given is not None
                     else [pair for word in words for pair in _text_pairs(word)])
            for key, value in pairs:
                if key in seen:
                    raise PreflightError(
                        f"{option} names {key} twice ({key}={seen[key]} and {key}={value}); "
                        "lm-eval keeps the last with no more than a warning: give "
                        f"{key} once")
                seen[key] = value


def config_as_arguments(options: Mapping[str, object]) -> list[str]:
    """A ``--config`` file's options as the flags they stand for (lm-eval: the flags win).

    A mapping is written as JSON, a list joined with commas, ``true`` as the bare flag;
    ``false`` and ``null`` are left out.
    """
    flags = []
    for key, value in options.items():
        if key == "config" or value is None or value is False:
            continue
        if value is True:
            flags.append(f"--{key}")
        elif isinstance(value, Mapping):
            flags.append(f"--{key}={json.dumps(dict(value), default=str)}")
        elif isinstance(value, (list, tuple)):
            flags.append(f"--{key}={','.join(str(v) for v in value)}")
        else:
            flags.append(f"--{key}={value}")
    return flags


def check_config_dict_text(options: Mapping[str, object]) -> None:
    """A key=value option of the file written as text holding ``{``: lm-eval reads it as pairs.

    (lm-eval parses a file's text value of these options with its ``key=value`` reader only, so
    ``metadata: '{"a": 1}'`` becomes one key named ``{"a": 1}``.)
    """
    for key in ("model_args", *(option.removeprefix("--") for option in DICT_OPTIONS)):
        value = options.get(key)
        if isinstance(value, str) and "{" in value:
            raise PreflightError(f"{key}: {value!r} is text, which lm-eval reads as key=value "
                                 f"pairs (a key named {value.split(',')[0]!r}); write a YAML "
                                 f"mapping ({key}: {{key: 1}}) or key=value text")


#: a file's options that lm-eval reads as true or false (any text, "false" too, is true)
_SWITCHES = ("log_samples", "predict_only", "write_out", "show_config", "trust_remote_code",
             "confirm_run_unsafe_code", "check_integrity", "fewshot_as_multiturn")
#: a file's options that lm-eval reads as one name or path
_NAMES = ("model", "output_path", "use_cache", "device", "system_instruction", "verbosity")
#: text that means a switch, not a chat template's name
_SWITCH_WORDS = ("true", "false", "yes", "no", "on", "off", "1", "0")


def check_chat_template_name(value: object, where: str, fix: str) -> None:
    """A chat template's name that is a switch word (``false``): lm-eval would look it up."""
    if isinstance(value, str) and value.strip().lower() in _SWITCH_WORDS:
        raise PreflightError(f"{where} {value!r} is text, which lm-eval reads as a chat "
                             f"template's name; {fix}")


def check_config_value_types(options: Mapping[str, object]) -> None:
    """A file's value of the type lm-eval reads: a switch true/false, a name text.

    YAML reads ``no`` as false and ``"false"`` as text; lm-eval then takes the text as true, or
    adds a path to false (a traceback).
    """
    if "config" in options:  # lm-eval reads one file: the one on the command line
        raise PreflightError(f"config: {options['config']!r}: a --config file cannot name "
                             "another (lm-eval would not read it); copy its options into this "
                             "file")
    requests = options.get("cache_requests")
    if requests is not None and not isinstance(requests, Mapping):  # lm-eval calls .get on it
        raise PreflightError(f"cache_requests: {requests!r} is not read by lm-eval from a file "
                             "(it takes a mapping there, e.g. cache_requests: {cache_requests: "
                             "true}); or give --cache_requests true on the command line")
    for key in _SWITCHES:
        if key in options and options[key] is not None and not isinstance(options[key], bool):
            raise PreflightError(f"{key}: {options[key]!r} is not true or false (lm-eval takes "
                                 "any text, 'false' too, as true); write true or false without "
                                 "quotes")
    check_chat_template_name(options.get("apply_chat_template"), "apply_chat_template:",
                             "write true or false without quotes")
    for key in _NAMES:
        value = options.get(key)
        if value is not None and not isinstance(value, str):
            raise PreflightError(f"{key}: {value!r} is not a name or path (YAML reads yes/no as "
                                 f"true/false and [...] as a list); write one {key}, in quotes "
                                 "where YAML would read it otherwise, or leave it out")
