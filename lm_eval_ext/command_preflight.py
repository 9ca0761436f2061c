"""An lm-eval command line checked before any model loads: one line per mistake, exit 2.

Run by the start-up hook in the stock ``lm_eval`` command (when lm-eval imports its task
manager, before the model) and by ``lm-eval-ext run``. Each check names the argument, what was
wrong and the fix; nothing is checked that lm-eval would accept and use correctly.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from lm_eval_ext.errors import ConfigError, EnvironmentProblem, LmEvalExtError, PreflightError
from lm_eval_ext.files import not_valid_yaml, path_error, probe_writable, unexpanded_home
from lm_eval_ext.lm_eval_inputs import (
    DICT_OPTIONS,
    check_chat_template_name,
    check_config_dict_text,
    check_config_value_types,
    check_dict_options,
    check_include_path,
    check_repeated_keys,
    check_samples,
    config_as_arguments,
    json_object,
    our_task_manager,
    read_task_file,
    task_content_problem,
)
from lm_eval_ext.response_cache import cache_owner, check_cache_owner
from lm_eval_ext.strict_yaml import UniqueKeyLoader
from lm_eval_ext.task_building import check_user_tasks_build

#: lm-eval's rule, said as ours (its own message is a ValueError traceback in the stock command)
SAMPLES_NEED_OUTPUT_PATH = ("--log_samples and --predict_only need --output_path (the folder "
                            "for the samples), e.g. --output_path results")


class NoCudaHere(PreflightError):
    """A CUDA device named on a machine where torch sees none."""


def check_limit(value: object, where: str = "--limit") -> None:
    """A count of items (>= 1) or a fraction in (0, 1), as lm-eval reads ``--limit``."""
    if isinstance(value, bool):  # YAML's true/yes: float(True) would be 1 item
        raise PreflightError(f"{where} {str(value).lower()}: give a number of items (e.g. 8) or "
                             "a fraction of each task in (0, 1) (e.g. 0.25), not true/false")
    try:
        limit = float(value)
    except (TypeError, ValueError):
        limit = math.nan
    if not limit > 0 or not math.isfinite(limit):
        raise PreflightError(f"{where} {value}: give a positive number of items (e.g. 8) or a "
                             "fraction of each task in (0, 1) (e.g. 0.25)")
    if limit == 1 and "." in str(value):  # lm-eval reads a fraction only below 1
        raise PreflightError(f"{where} {value}: lm-eval reads this as 1 item (a fraction is "
                             f"below 1); write {where} 1 for one item, or leave {where} out "
                             "for every item")
    if limit > 1 and limit != int(limit):
        raise PreflightError(f"{where} {value}: above 1 it counts items and must be whole "
                             f"(e.g. {int(limit)}); a fraction must be below 1")
    if limit > 10**15:  # lm-eval's islice takes at most sys.maxsize; no task is this large
        raise PreflightError(f"{where} {value}: more items than any task holds; leave {where} "
                             "out for every item")


#: lm-eval's four seeds in order, with the range each library takes (Python's random: any)
_SEED_RANGES = (("python", None, None), ("numpy", 0, 2**32 - 1), ("torch", -(2**63), 2**64 - 1),
                ("fewshot", None, None))


def check_seed(value: str) -> None:
    """``--seed`` as lm-eval parses it: one integer for all four seeds, or 3-4 of int/None."""
    def whole_or_none(item: str) -> bool:
        if item.strip().lower() == "none":
            return True
        try:
            int(item)
        except ValueError:
            return False
        return True

    items = value.split(",")
    if len(items) in (1, 3, 4) and all(whole_or_none(item) for item in items):
        seeds = items * 4 if len(items) == 1 else items  # one integer is all four
        # three seeds: the fourth is lm-eval's default
        for (name, low, high), item in zip(_SEED_RANGES, seeds, strict=False):
            if low is not None and item.strip().lower() != "none" and \
                    not low <= int(item) <= high:
                raise PreflightError(f"--seed {value}: the {name} seed {int(item)} is outside "
                                     f"the range {name} takes ({low} to {high}); give a seed "
                                     "in it (e.g. --seed 42)")
        return
    raise PreflightError(f"--seed {value}: give one integer for all four seeds (e.g. --seed 42) "
                         "or four integers or None, comma-separated (e.g. --seed 0,None,8,52)")


def check_num_fewshot(value: object, where: str = "--num_fewshot") -> None:
    """Few-shot examples: a whole number >= 0."""
    try:
        shots = int(str(value))
    except ValueError:
        shots = -1
    if shots < 0:
        raise PreflightError(f"{where} {value}: give 0 or more few-shot examples, as a whole "
                             "number written without a decimal point or a sign (e.g. 0 or 5)")


def check_fewshot_pools(tasks: Sequence[str], shots: int, where: str = "--num_fewshot") -> None:
    """No more few-shot examples than one of our tasks' pools holds (lm-eval asserts later)."""
    from lm_eval_ext.tasks import fewshot_pool_size

    for name in (name for value in tasks for name in value.split(",")):
        size = fewshot_pool_size(name)
        if size is not None and shots > size:
            raise PreflightError(f"{where} {shots}: {name} has {size} few-shot examples in its "
                                 f"pool; give {where} {size} or fewer (docs/tasks.md documents "
                                 "0, 3 and 5)")


def check_output_path(value: str, where: str = "--output_path") -> None:
    """lm-eval writes a folder there: not an existing file; tested by making it, then removed.

    A path under ``/proc``, a read-only or a full file system fails before any model loads
    (exit code 2, or 1 for a full disk or quota); so do the paths lm-eval would use otherwise
    than meant (:func:`check_path_text`).
    """
    check_path_text(value, where)
    path = Path(value)
    if path.is_file() and path.suffix != ".json":
        raise PreflightError(f"{where} {value} is an existing file; lm-eval writes a folder of "
                             "results there: pass a folder path (it is created if missing)")
    existing = path if path.exists() else next((p for p in path.parents if p.exists()), None)
    if existing is not None and existing != path and existing.is_file():
        raise PreflightError(f"{where} {value}: {existing} is a file, so no folder can be made "
                             "under it; pass another path")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise PreflightError(f"{where} {value}: {existing} is not writable; pass a folder you "
                             "can write to")
    folder = path.parent if path.suffix == ".json" else path
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:  # created and test-written now, so that no model loads for results that cannot be kept
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise path_error(folder, exc) from None
        probe_writable(folder)
    except LmEvalExtError as exc:
        kind = EnvironmentProblem if isinstance(exc, EnvironmentProblem) else PreflightError
        raise kind(f"{where}: {exc}") from None
    finally:  # lm-eval makes them when it saves: a run that fails leaves no empty folder
        for made_folder in made:
            try:
                made_folder.rmdir()
            except OSError:
                break


def check_cache_path(value: str, where: str = "--use_cache") -> None:
    """lm-eval's response cache, ``<value>_rank<N>.db``: a name it can make, in a folder it can.

    lm-eval creates the folder and opens the SQLite file only as the model starts answering.
    """
    fix = f"e.g. {where} cache/responses (lm-eval adds _rank0.db)"
    if not value.strip() or value.endswith(("/", os.sep)):
        raise PreflightError(f"{where} {value!r}: give the start of a file name, {fix}")
    check_path_text(value + "_rank0", where)
    database = Path(value + "_rank0.db")
    if database.is_dir():
        raise PreflightError(f"{where} {value}: {database} is a folder; give another name, {fix}")
    folder = database.parent
    if folder.is_file():
        raise PreflightError(f"{where} {value}: {folder} is a file, so no cache can be made "
                             f"under it; {fix}")
    check_output_path(str(folder), where)


#: the longest file name lm-eval writes for ``--output_path X.json``: ``X_<stamp>.json``
_STAMPED = len("_2026-12-05T18-34-11.100552.json")


def check_path_text(value: str, where: str = "--output_path") -> None:
    """The path as lm-eval will use it: not empty, no unexpanded ``~``, no name too long.

    A quoted ``~`` reaches lm-eval unexpanded (it writes into a folder named ``~``); a name
    over the file system's limit (255 bytes) fails only when lm-eval saves, after the run.
    """
    if not value.strip():
        raise PreflightError(f"{where} {value!r} is empty; give a folder for the results "
                             f"(e.g. {where} results)")
    if (meant := unexpanded_home(value)) is not None:
        raise PreflightError(f"{where} {value}: the ~ was not expanded (the path was quoted), "
                             f"so lm-eval would write into a folder named '{value.split('/')[0]}'"
                             f" here; write {meant}")
    path = Path(value)
    names = [(part, len(part.encode())) for part in path.parts[:-1]]
    names.append((path.name, len(path.stem.encode()) + _STAMPED if path.suffix == ".json"
                  else len(path.name.encode())))
    for name, size in names:
        if size > 255:
            kept = "its stamped results file name" if name == path.name and \
                path.suffix == ".json" else "the name"
            raise PreflightError(f"{where}: the name {name[:40]}... is {len(name.encode())} "
                                 f"bytes, and {kept} would be over the file system's 255-byte "
                                 "limit for one name; use a shorter name")


def check_device(value: str, where: str = "--device") -> None:
    """A device lm-eval can run here: cpu, a CUDA one that is here, or mps where there is one.

    lm-eval runs any other device torch parses (``xpu``, ``meta``) on the CPU and records the
    name it was given.
    """
    import torch

    given = f"{where}{value}" if where.endswith("=") else f"{where} {value}"
    instead = "" if where == "--device" else f" in place of {given}"
    try:
        kind = torch.device(value).type
    except RuntimeError:
        raise PreflightError(f"{given} is not a device torch knows (lm-eval would run "
                             "on the CPU); use cuda (or cuda:N) for a GPU, or cpu") from None
    if kind == "cpu" or (kind == "mps" and torch.backends.mps.is_available()):
        return
    if kind != "cuda":
        raise PreflightError(f"{given}: there is no {kind} device here (lm-eval would fail on "
                             f"it, or run on the CPU and record {value}); use --device "
                             f"cpu{instead}")
    if not torch.cuda.is_available():
        raise NoCudaHere(f"{given}: no CUDA device is visible here "
                             f"(torch.cuda.is_available() is False); use --device cpu{instead}")
    index = value.partition(":")[2]
    if index.isdigit() and int(index) >= torch.cuda.device_count():
        raise PreflightError(f"{given}: this machine has {torch.cuda.device_count()} "
                             f"CUDA device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")


def check_batch_size(value: str, where: str = "--batch_size") -> None:
    """The model's own rule (a positive whole number, ``auto`` or ``auto:N``), told as a flag."""
    from lm_eval_ext.backends.model_args import check_batch_size as model_rule

    try:
        model_rule("lm_eval", value)
    except ConfigError:
        raise PreflightError(f"{where} {value}: give a positive whole number, auto or auto:N "
                             "(e.g. --batch_size 8)") from None


def check_gen_kwargs(value: str | Mapping[str, object], where: str = "--gen_kwargs",
                     complete: bool = True) -> None:
    """The generation settings as lm-eval and transformers take them.

    ``max_gen_toks`` and ``num_beams`` positive whole numbers, ``top_k`` 0 or more,
    ``temperature`` >= 0, ``top_p`` and ``typical_p`` in (0, 1], ``min_p`` in [0, 1],
    ``repetition_penalty`` above 0.

    ``value`` is lm-eval's ``k=v,k=v`` text or (in a campaign file) a mapping; ``complete``:
    all the settings a run gets (sampling then needs its temperature among them; a campaign's
    part may leave it to the other part).
    """
    pairs = ({str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else
             dict(item.partition("=")[::2] for item in str(value).split(",") if "=" in item))
    whole = "whole number, written without a decimal point (e.g. 8)"
    # transformers' bounds where it refuses only after the model loads (its logits processors)
    checks = {"max_gen_toks": (lambda v: v.isdigit() and int(v) > 0, f"a positive {whole}"),
              "num_beams": (lambda v: v.isdigit() and int(v) > 0, f"a positive {whole}"),
              "top_k": (lambda v: v.isdigit(), f"a {whole}, 0 or more (0: no top-k)"),
              "temperature": (lambda v: _number(v) >= 0, "a number >= 0"),
              "top_p": (lambda v: 0 < _number(v) <= 1, "a number in (0, 1]"),
              "typical_p": (lambda v: 0 < _number(v) <= 1, "a number in (0, 1]"),
              "min_p": (lambda v: 0 <= _number(v) <= 1, "a number in [0, 1]"),
              "repetition_penalty": (lambda v: 0 < _number(v) < math.inf,
                                     "a number above 0 (1: no penalty)")}
    for key, (ok, wanted) in checks.items():
        if isinstance(value, Mapping) and isinstance(value.get(key), (str, bool)):
            raise PreflightError(f"{where} {key}={value[key]!r}: {key} must be a number, not "
                                 f"{_not_a_number(value[key], yaml=not where.startswith('--'))}")
        if key in pairs and not ok(pairs[key].strip()):
            raise PreflightError(f"{where} {key}={pairs[key]}: {key} must be {wanted}")
    sampling = pairs.get("do_sample", "").strip().lower() == "true"
    if sampling and complete and "temperature" not in pairs:
        raise PreflightError(f"{where} do_sample=True without a temperature samples at "
                             "lm-eval's default temperature, 0, which transformers refuses "
                             "after the model loads; add one (e.g. "
                             "do_sample=True,temperature=0.7)")
    if sampling and "temperature" in pairs and not _number(pairs["temperature"]) > 0:
        raise PreflightError(f"{where} do_sample=True,temperature={pairs['temperature']}: "
                             "sampling needs a temperature above 0; give one (e.g. 0.7), or "
                             "greedy decoding: do_sample=False")


def _not_a_number(value: str | bool, yaml: bool) -> str:
    """What a setting that must be a number was given instead, and how to write the number.

    ``yaml``: the value comes from a YAML file (a campaign's), not JSON on the command line.
    """
    if isinstance(value, bool):
        return "true or false"
    if yaml and re.fullmatch(r"[+-]?\d+[eE][+-]?\d+", value.strip()):
        return (f"text (YAML reads {value} as text; write it with a point and a signed "
                f"exponent, e.g. {float(value):.1e})")
    if not math.isnan(_number(value)):
        return f"text (a number in quotes: write {value} without them)"
    return "text"


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def check_model_name(value: str, where: str = "--model") -> None:
    """A model name lm-eval has registered (ours included), else the closest ones."""
    import lm_eval.models  # noqa: F401  (lm-eval's own models)
    from lm_eval.api.registry import model_registry

    from lm_eval_ext.backends.lm_eval_names import MODELS

    # ours are named too where nothing registered them yet (`lm-eval-ext run` checks first)
    known = [*model_registry, *(name for name in MODELS if name not in model_registry)]
    if value not in known:
        close = difflib.get_close_matches(value, known, n=3) or ["hf-metered"]
        raise PreflightError(f"{where} {value!r} is not an lm-eval model; did you mean "
                             f"{' or '.join(close)}?")


def model_args_of(values: Sequence[str] | None) -> dict:
    """``--model_args`` as lm-eval reads it: one JSON object, or ``k=v,k=v`` words (merged).

    ``{}`` where lm-eval would refuse it itself.
    """
    from lm_eval.utils import simple_parse_args_string

    if not values:
        return {}
    try:
        parsed = json.loads(values[0])
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    try:
        return {k: v for value in values for k, v in simple_parse_args_string(value).items()}
    except ValueError:
        return {}


def _needs_pretrained(model: str) -> bool:
    """Whether lm-eval's model ``model`` takes a ``pretrained`` argument without a default."""
    import inspect

    from lm_eval.api.registry import get_model

    try:
        parameter = inspect.signature(get_model(model).__init__).parameters.get("pretrained")
    except Exception:  # an unknown name or a model that cannot be imported here: lm-eval says
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


def check_verbosity(value: str) -> None:
    """``--verbosity`` as lm-eval's logging reads it (upper-cased): a level name."""
    import logging

    if not isinstance(logging.getLevelName(value.upper()), int):
        raise PreflightError(f"--verbosity {value}: give a log level: DEBUG, INFO, WARNING, "
                             "ERROR or CRITICAL")


def check_stock_pretrained(model: str, model_args: Mapping[str, object],
                           flags: tuple[str, str] = ("--model", "--model_args")) -> None:
    """``pretrained=`` of lm-eval's own models (``--model hf``), checked before loading.

    Our model names are not theirs; offline the value must be a folder or in the hub cache.
    (Our models check their own.) ``flags``: the command's names for the model and its args.
    """
    from lm_eval_ext.backends import embedded_model, packaged_models
    from lm_eval_ext.backends.lm_eval_names import MODELS
    from lm_eval_ext.backends.model_args import check_pretrained

    pretrained = model_args.get("pretrained")
    if model in MODELS:
        return
    if pretrained is None and _needs_pretrained(model):
        raise PreflightError(f"{flags[0]} {model} needs {flags[1]} pretrained=... (a model "
                             f"folder or hub id); or use {flags[0]} hf-metered, whose default is "
                             "the embedded model")
    if not isinstance(pretrained, str):
        return
    ours = {"embedded": embedded_model.checkpoint_dir(),
            **{name: m.checkpoint_dir() for name, m in packaged_models.PACKAGED.items()}}
    if pretrained in ours:
        raise PreflightError(
            f"{flags[0]} {model}: pretrained={pretrained} is hf-metered's name for a packaged "
            f"model; use {flags[0]} hf-metered, or give {model} the folder: "
            f"pretrained={ours[pretrained]} "
            f"(`lm-eval-ext model prepare --model {pretrained}` writes it)")
    try:
        check_pretrained(f"{flags[0]} {model}", pretrained)
    except ConfigError as exc:
        raise PreflightError(str(exc)) from None


def check_task_list(values: Sequence[str], where: str = "--tasks") -> None:
    """Task names as lm-eval splits them (at commas): none empty, none holding a space."""
    names = [name for value in values for name in value.split(",")]
    given = " ".join(f"'{v}'" if not v or " " in v or v.endswith(",") else v for v in values)
    fixed = ",".join(part for n in names for part in n.split())
    if not fixed:
        raise PreflightError(f"{where} {given}: no task named; give at least one (e.g. "
                             f"{where} bbq_subset_25pct)")
    if any(not n.strip() for n in names):
        raise PreflightError(f"{where} {given}: an empty task name (a stray comma); write "
                             f"{where} {fixed}")
    spaced = next((n for n in names if n != "".join(n.split())), None)
    if spaced is not None:
        raise PreflightError(f"{where} {given}: the name '{spaced}' holds a space (lm-eval "
                             f"splits only at commas); write {where} {fixed}")
    for name in names:  # lm-eval also takes the path of a task YAML file
        if name.endswith((".yaml", ".yml")) and Path(name).is_file():
            task, problem = read_task_file(Path(name))
            if problem is not None:
                raise PreflightError(f"{where} {name} {problem}; fix the file")
            problem = task_content_problem(Path(name), task)
            if problem is not None:
                raise PreflightError(f"{where} {name} {problem}")


def check_config_file(value: str, where: str = "--config") -> dict:
    """lm-eval's ``--config``: a YAML file holding a mapping of its options (returned)."""
    import yaml

    path = Path(value)
    fix = "give the path of a YAML file of lm-eval's options (e.g. model: hf-metered)"
    if path.is_dir():
        raise PreflightError(f"{where} {value} is a folder; {fix}")
    if not path.is_file():
        raise PreflightError(f"{where} {value}: no such file; {fix}")
    try:
        options = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)  # noqa: S506
    except (OSError, UnicodeDecodeError) as exc:
        raise path_error(path, exc, "read", not_text="save it as UTF-8") from None
    except yaml.YAMLError as exc:
        raise PreflightError(f"{where} {value} {not_valid_yaml(exc)}") from None
    except ConfigError as exc:  # a repeated key: YAML would keep the second silently
        raise PreflightError(f"{where} {value}: {exc}") from None
    if not isinstance(options, dict):
        held = "nothing" if options is None else f"a {type(options).__name__}"
        raise PreflightError(f"{where} {value} holds {held}, not a mapping of lm-eval's "
                             f"options; {fix}")
    _check_config_options(options, f"{where} {value}")
    return options


def _check_config_options(options: Mapping, where: str) -> None:
    """Keys lm-eval's ``EvaluatorConfig`` has, and ``tasks`` as lm-eval reads it."""
    import dataclasses

    from lm_eval.config.evaluate_config import EvaluatorConfig

    known = [field.name for field in dataclasses.fields(EvaluatorConfig)]
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise PreflightError(f"{where}: {key!r} is not an lm-eval option{hint}; the options "
                                 "are those of `lm_eval run --help`, written without the dashes")
    tasks = options.get("tasks")
    if tasks is not None and not (isinstance(tasks, str) or (
            isinstance(tasks, list) and all(isinstance(t, str) for t in tasks))):
        raise PreflightError(f"{where}: tasks: {tasks!r} is not a task name or a list of them "
                             "(e.g. tasks: [bbq_subset_25pct])")


def check_config_of(argv: Sequence[str]) -> dict:
    """The options of the ``--config`` file an lm-eval command line names (none: ``{}``)."""
    config = _arguments(argv).config
    return {} if config is None else check_config_file(config)


def _arguments(argv: Sequence[str]) -> argparse.Namespace:
    """The options checked here, read as lm-eval's parser reads them.

    A command line argparse cannot read (``--seed -5,0``: a value taken for an option) is left
    to lm-eval's parser, which names it in its usage line: every option is then None here.
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--tasks", "-t", nargs="+")
    parser.add_argument("--model", "-m")
    parser.add_argument("--model_args", "-a", nargs="+")
    parser.add_argument("--limit", "-L")
    parser.add_argument("--samples", "-E")
    parser.add_argument("--num_fewshot", "-f")
    parser.add_argument("--batch_size", "-b")
    parser.add_argument("--output_path", "-o")
    parser.add_argument("--log_samples", "-s", action="store_true")
    parser.add_argument("--predict_only", "-x", action="store_true")
    parser.add_argument("--device")
    parser.add_argument("--config", "-C")
    parser.add_argument("--include_path")
    parser.add_argument("--seed")
    parser.add_argument("--verbosity", "-v")
    parser.add_argument("--fewshot_as_multiturn", nargs="?", const="true")
    parser.add_argument("--apply_chat_template", nargs="?", const=True)
    for option in DICT_OPTIONS:
        parser.add_argument(option, nargs="+")
    parser.add_argument("--max_batch_size")
    parser.add_argument("--use_cache", "-c")
    parser.add_argument("--check_integrity", action="store_true")
    try:
        return parser.parse_known_args(list(argv))[0]
    except argparse.ArgumentError:
        return parser.parse_known_args([])[0]


def check_max_batch_size(value: object, batch_size: object, where: str = "--max_batch_size",
                         auto: str = "--batch_size auto") -> None:
    """A positive whole number, with an automatic batch size (lm-eval ignores it otherwise)."""
    if not (str(value).lstrip("+").isdigit() and int(str(value)) > 0):
        raise PreflightError(f"{where} {value}: give a positive whole number (the largest batch "
                             f"{auto} tries, e.g. 64)")
    if not str(batch_size).startswith("auto"):
        raise PreflightError(f"{where} {value} applies to {auto}, which is not given (the batch "
                             f"size is {batch_size or 1}): give {auto}, or leave {where} out")


def _optional_package(option: str, values: object, package: str) -> None:
    """An option that imports ``package`` once the evaluation is done: installed, or one line."""
    import importlib.util

    if values is not None and importlib.util.find_spec(package) is None:
        raise PreflightError(f"{option} needs the {package} package, which is not installed: "
                             f"pip install {package}, or leave {option} out")


def check_lm_eval_options(args: argparse.Namespace) -> None:
    """lm-eval's options that it refuses (or crashes on) only after the model has loaded."""
    from lm_eval_ext.backends.model_args import hub_offline

    check_dict_options(args)
    check_chat_template_name(args.apply_chat_template, "--apply_chat_template",
                             "give --apply_chat_template alone to apply the model's template, "
                             "or leave it out")
    multiturn = str(args.fewshot_as_multiturn).lower() in ("true", "1", "yes")
    if multiturn and args.apply_chat_template is None:
        raise PreflightError("--fewshot_as_multiturn needs --apply_chat_template (lm-eval's rule):"
                             " add it, or leave --fewshot_as_multiturn out")
    if args.wandb_config_args is not None and args.wandb_args is None:  # lm-eval ignores it
        raise PreflightError("--wandb_config_args applies to --wandb_args, which is not given: "
                             "give --wandb_args (e.g. project=my-evals), or leave "
                             "--wandb_config_args out")
    _optional_package("--wandb_args", args.wandb_args, "wandb")
    _optional_package("--trackio_args", args.trackio_args, "trackio")
    if args.check_integrity:
        import lm_eval.evaluator_utils as evaluator_utils

        try:
            evaluator_utils.find_test_root(Path(evaluator_utils.__file__))
        except FileNotFoundError:
            raise PreflightError("--check_integrity runs lm-eval's own test suite, which an "
                                 "installed lm-eval does not ship; run it from a clone of "
                                 "lm-evaluation-harness, or leave --check_integrity out") from None
    if args.max_batch_size is not None:
        check_max_batch_size(args.max_batch_size, args.batch_size)
    if args.use_cache is not None:
        check_cache_path(args.use_cache)
        check_cache_owner(args.use_cache, cache_owner(args.model, model_args_of(args.model_args)))
    hub = ",".join(args.hf_hub_log_args or [])
    if re.search(r"push_(results|samples)_to_hub=(true|1|yes)\b", hub, re.IGNORECASE):
        from huggingface_hub import get_token

        if hub_offline():
            raise PreflightError("--hf_hub_log_args pushes to the Hugging Face hub, and "
                                 "HF_HUB_OFFLINE is set: unset it where the hub can be reached, "
                                 "or leave push_results_to_hub/push_samples_to_hub out")
        if get_token() is None:
            raise PreflightError("--hf_hub_log_args pushes to the Hugging Face hub without a "
                                 "token: set HF_TOKEN (or `hf auth login`), or leave "
                                 "push_results_to_hub/push_samples_to_hub out")


def _with_config(argv: Sequence[str]) -> tuple[list[str], dict]:
    """The command line with its ``--config`` file's options in front, and those options."""
    from_file = check_config_of(argv)
    return [*config_as_arguments(from_file), *argv], from_file


def config_overrides(argv: Sequence[str]) -> list[str]:
    """One note per ``--config`` option the command line also gives with another value.

    lm-eval takes the command line's ("CLI args will override yaml"), without a word; the
    key=value options are refused instead (:func:`check_dicts_given_once`: their keys would be
    dropped one by one).
    """
    from_file, given = check_config_of(argv), _arguments(argv)
    notes = []
    for key, value in from_file.items():
        ours = getattr(given, key, None)
        if key == "config" or f"--{key}" in ("--model_args", *DICT_OPTIONS) or ours is None \
                or isinstance(ours, bool):
            continue
        shown = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        typed = ",".join(ours) if isinstance(ours, list) else str(ours)
        if shown != typed:
            notes.append(f"--{key} {typed} on the command line replaces the --config file's "
                         f"{key}: {shown} (lm-eval takes the command line's)")
    return notes


def config_batch_size_typed(argv: Sequence[str]) -> list[str]:
    """``argv`` with its ``--config`` file's ``batch_size`` as the flag it stands for.

    lm-eval hands a file's ``batch_size: 1`` to the model as the int 1, its own default, which
    hf-metered's fast path reads as "not typed" and plans the batch itself; a typed
    ``--batch_size 1`` arrives as text. The user wrote the file's value: given as the flag
    (which lm-eval would let win over the file anyway), it is the batch. A command line that
    gives ``--batch_size`` itself is returned as it is.
    """
    size = check_config_of(argv).get("batch_size")
    if size is None or any(a.startswith(("--batch_size", "-b")) for a in argv):
        return list(argv)
    return [*argv, f"--batch_size={size}"]


def check_arguments_lm_eval_parses(argv: Sequence[str]) -> tuple[argparse.Namespace, dict]:
    """What lm-eval's own parsing refuses in poor words, checked before it parses.

    A bad ``--seed`` shows a ``functools.partial`` repr; samples without a folder a traceback.
    The ``--config`` file's options count as their flags. Returns the arguments read (the
    file's included) and the file's options, for further checks.
    """
    merged, from_file = _with_config(argv)
    check_dicts_given_once(argv, from_file)  # names the file itself
    with _blaming_the_config(argv, from_file):
        check_config_dict_text(from_file)
        check_config_value_types(from_file)
        check_repeated_keys(argv)
        check_repeated_keys(config_as_arguments(from_file))
        args = _arguments(merged)
        _check_parsed(args)
    return args, from_file


def check_dicts_given_once(argv: Sequence[str], from_file: Mapping[str, object]) -> None:
    """A key=value option in both the ``--config`` file and on the command line is refused.

    lm-eval takes the command line's value whole ("CLI args will override yaml"), so the
    file's keys are dropped without a word (the file's ``pretrained=gemma3-270m``: the run
    evaluated the embedded model).
    """
    given = _arguments(argv)
    for option in ("--model_args", *DICT_OPTIONS):
        key = option.removeprefix("--")
        if from_file.get(key) and getattr(given, key, None):
            raise PreflightError(
                f"{option} is given on the command line and as {key} in --config "
                f"{given.config}; lm-eval would take the command line's whole and drop the "
                f"file's ({_shown(from_file[key])}): give {key} in one place")


def _shown(value: object) -> str:
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _check_parsed(args: argparse.Namespace) -> None:
    """What lm-eval's parsing (or its options after loading) would refuse in poor words."""
    if args.seed is not None:
        check_seed(args.seed)
    if (args.log_samples or args.predict_only) and args.output_path is None:
        raise PreflightError(SAMPLES_NEED_OUTPUT_PATH)
    check_lm_eval_options(args)


@contextlib.contextmanager
def _blaming_the_config(argv: Sequence[str], from_file: Mapping[str, object]):
    """A problem the command line alone does not have is the ``--config`` file's: named so."""
    try:
        yield
    except PreflightError as exc:
        if not from_file:
            raise
        try:
            check_command_line(argv, with_config=False)
        except PreflightError as alone:
            if str(alone) == str(exc):
                raise exc from None
        raise PreflightError(f"--config {_arguments(argv).config}: {exc}") from None


def check_command_line(argv: Sequence[str], with_config: bool = True,
                       build_user_tasks: bool = True) -> None:
    """Every check above on an lm-eval command line (``lm_eval [run] ...`` arguments).

    ``with_config``: the ``--config`` file's options count as their flags;
    ``build_user_tasks``: :func:`check_user_tasks` too (the stock command's hook makes it apart,
    once ``lm_eval.tasks`` has loaded).
    """
    if not with_config:
        args, from_file = _arguments(argv), {}
        _check_parsed(args)
        _check_options(args, from_file)
        return
    args, from_file = check_arguments_lm_eval_parses(argv)
    with _blaming_the_config(argv, from_file):
        _check_options(args, from_file)
    if build_user_tasks:
        _build_user_tasks(args)
    _claim_response_cache(args)


def claim_response_cache(argv: Sequence[str]) -> None:
    """The command line's ``--use_cache`` recorded as this model's and settings' (checked).

    Once every check has passed: the run is about to start (a dry run claims nothing).
    """
    _claim_response_cache(_arguments(_with_config(argv)[0]))


def _claim_response_cache(args: argparse.Namespace) -> None:
    if args.use_cache is not None:
        check_cache_owner(args.use_cache, cache_owner(args.model, model_args_of(args.model_args)),
                          claim=True)


def check_user_tasks(argv: Sequence[str]) -> None:
    """The user's own tasks the command line runs, built as lm-eval builds them.

    Their data is read: last, after every cheaper check.
    """
    _build_user_tasks(_arguments(_with_config(argv)[0]))


def _build_user_tasks(args: argparse.Namespace) -> None:
    if args.tasks:
        check_user_tasks_build(_task_names(args), args.include_path,
                               model_args_of(args.metadata))


def _has_chat_template(folder: Path) -> bool | None:
    """Whether a local model folder's tokenizer has a chat template (None: no tokenizer here)."""
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return None
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None


def check_chat_template_exists(model_args: Mapping[str, object]) -> None:
    """``--apply_chat_template`` for a model whose tokenizer has no chat template.

    transformers raises "Cannot use chat template functions" after the load: refused for a
    packaged base model (its template removed at conversion) and a local folder without one.
    """
    from lm_eval_ext.backends.packaged_models import PACKAGED

    pretrained = model_args.get("pretrained")
    if not isinstance(pretrained, str):
        return
    packaged = PACKAGED.get(pretrained)
    base = packaged.base_model if packaged is not None else (
        Path(pretrained).expanduser().is_dir()
        and _has_chat_template(Path(pretrained).expanduser()) is False)
    if base:
        raise PreflightError(f"--apply_chat_template: pretrained={pretrained} has no chat "
                             "template (a base model: its tokenizer defines none), so lm-eval "
                             "cannot apply one; leave --apply_chat_template out (its prompts "
                             "then go as they are)")


def _task_names(args: argparse.Namespace) -> list[str]:
    """The task names of ``--tasks`` (its values split at commas, as lm-eval splits them)."""
    return [name.strip() for value in args.tasks or [] for name in value.split(",")]


def _check_options(args: argparse.Namespace, from_file: Mapping[str, object]) -> None:
    """The checks that need the model, the tasks or the file system."""
    if args.include_path is not None:
        check_include_path(args.include_path, _task_names(args))
    if args.limit is not None and args.samples is not None:
        raise PreflightError("--limit and --samples exclude each other: --samples names the "
                             "items to run, --limit cuts each task; pass one")
    if args.samples is not None:
        check_samples(args.samples, args.tasks or [], args.include_path)
    if args.model:
        check_model_name(args.model)
        model_args = model_args_of(args.model_args)
        check_stock_pretrained(args.model, model_args)
        if args.apply_chat_template is not None:
            check_chat_template_exists(model_args)
        if isinstance(model_args.get("device"), str):
            check_device(model_args["device"], "--model_args device=")
    if args.tasks:
        check_task_list(args.tasks)
        check_task_data(_task_names(args))
    if args.limit is not None:
        check_limit(args.limit)
    if args.batch_size is not None:
        check_batch_size(args.batch_size)
    if args.gen_kwargs:
        check_gen_kwargs(json_object(args.gen_kwargs[0]) or ",".join(args.gen_kwargs))
        if args.tasks:
            check_gen_kwargs_used(_task_names(args), args.include_path)
    if args.num_fewshot is not None:
        check_num_fewshot(args.num_fewshot)
        check_fewshot_pools(args.tasks or [], int(args.num_fewshot))
    if args.output_path is not None:
        check_output_path(args.output_path)
    if args.device is not None:
        check_device(args.device)
    if args.verbosity is not None:
        check_verbosity(args.verbosity)
    if (args.model or args.config) and not args.tasks and not from_file.get("tasks"):
        where = f" (and --config {args.config} names none)" if args.config else ""
        raise PreflightError(f"--tasks is missing{where}: name the tasks to run (e.g. --tasks "
                             "bbq_subset_25pct; `lm-eval ls tasks` lists them)")


def check_task_data(tasks: Sequence[str]) -> None:
    """The benchmark files our tasks read, verified before the model loads.

    (A task whose ``dataset_path`` is a pinned benchmark's repository; lm-eval would read them
    only after the load.)
    """
    from lm_eval_ext.data.sources import BENCHMARKS
    from lm_eval_ext.data.store import benchmark_dir

    by_repo = {benchmark.repo: name for name, benchmark in BENCHMARKS.items()}
    index = our_task_manager().task_index
    wanted = {by_repo.get(str((getattr(index.get(task), "cfg", None) or {}).get("dataset_path")))
              for task in tasks}
    for name in sorted(wanted - {None}):
        benchmark_dir(name)


def scores_by_loglik_only(tasks: Sequence[str], include_path: str | None = None) -> bool:
    """Whether every task is one of ours (or the ``include_path`` folder's) and none generates.

    False where a task is another's (lm-eval's index is not read before the load).
    """
    index = our_task_manager([include_path] if include_path else []).task_index
    if not tasks or not all(name in index and index[name].kind.name == "TASK" for name in tasks):
        return False
    return not any((getattr(index[name], "cfg", None) or {}).get("output_type")
                   == "generate_until" for name in tasks)


def check_gen_kwargs_used(tasks: Sequence[str], include_path: str | None = None,
                          where: str = "--gen_kwargs") -> None:
    """``--gen_kwargs`` for tasks that all score by log-likelihood: lm-eval records and ignores it.

    (Checked where every task is one of ours or the ``include_path`` folder's.)
    """
    if not scores_by_loglik_only(tasks, include_path):
        return
    index = our_task_manager([include_path] if include_path else []).task_index
    generative = [name.removesuffix("_loglik") for name in tasks
                  if name.endswith("_loglik") and name.removesuffix("_loglik") in index]
    fix = f", or run the generative form ({generative[0]})" if generative else ""
    verb = "scores" if len(tasks) == 1 else "score"
    raise PreflightError(f"{where} applies to generation, and {', '.join(tasks)} {verb} by "
                         "log-likelihood (lm-eval would record the setting and use it nowhere): "
                         f"leave {where} out{fix}")


def _subset_hint(name: str) -> str | None:
    """For ``bbq_subset_<membership>[_loglik]`` with no such membership: the ones there are."""
    from lm_eval_ext.data.instrument import N_REPLICATES, REPLICATED, SUBSETS

    match = re.fullmatch(r"bbq_subset_(.+?)(_loglik)?", name)
    if match is None:
        return None
    replicates = ", ".join(f"{m}_r2..{m}_r{N_REPLICATES}" for m in REPLICATED)
    return (f"{name} ({match.group(1)} is not a subset of the BBQ instrument; the subsets are "
            f"{', '.join(m for m, _, _ in sorted(SUBSETS, key=lambda s: s[1]))} and the "
            f"replicates {replicates}, e.g. "
            f"bbq_subset_{SUBSETS[-1][0]}{match.group(2) or ''}; the whole instrument is "
            f"bbq_instrument{match.group(2) or ''})")


def unknown_task_message(missing: str, known: Sequence[str]) -> str:
    """One line for lm-eval's "Tasks not found: a, b", with the closest known names."""
    names = [n.strip() for n in missing.split(",") if n.strip()]
    generative_only = {n: n.removesuffix("_loglik") for n in names
                       if n.endswith("_loglik") and n.removesuffix("_loglik") in known}
    typos = {n: difflib.get_close_matches(n, known, n=1, cutoff=0.9) for n in names}
    hints = {n: typos[n] or difflib.get_close_matches(n, known, n=1) for n in names}
    named = ", ".join(
        (f"{n} ({generative_only[n]} has no log-likelihood form: run {generative_only[n]} on the "
         "generative path, or a task with both, e.g. bbq_subset_25pct)"
         if n in generative_only else None)
        or (not typos[n] and _subset_hint(n))
        or (f"{n} (did you mean {hints[n][0]}?)" if hints[n] else n)
        for n in names)
    return (f"unknown task(s) {named}; `lm-eval ls tasks` lists lm-eval's tasks, docs/tasks.md "
            "this package's")
