"""The parent of a derived run (model arg ``answers_from``): its answers by request strings, checked.

At batch 1 a log-likelihood answer depends only on the model, its precision and engine
settings, and the request's strings (context, continuation); so does a greedy generation's text
(context, generation kwargs): at batch 1 each item is decoded alone. An hf-metered run written
with ``--log_samples`` holds those answers: :func:`load_parent` reads them beside its results
file and checks, before any model load, that this run may take them (each problem one line with
the fix). What can only be known once the model is loaded (the weights) is
:meth:`ParentRun.check_weights`.

    parent = load_parent("runs/m0/results_2026-12-01T10-00-00.json", "hf-metered",
                         {"precision": "bf16"}, {"batch_size": 1})
    parent.covering([(context, continuation), ...], "loglikelihood")   # the task holding them
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval_ext.backends.engine_key import METERING_ARGS, answer_differences, at_batch_one
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.outputs import RESULTS_NAME, samples_path

#: task output types whose answers may be derived -> their request type
DERIVABLE_OUTPUTS = {"multiple_choice": "loglikelihood", "loglikelihood": "loglikelihood",
                     "generate_until": "generate_until"}
_BOOLS = {"True": True, "False": False}

#: a log-likelihood answer (log-likelihood, is-greedy) or a generation's text
Answer = tuple[float, bool] | str
#: (context, continuation) or (context, the generation kwargs as sorted JSON)
Key = tuple[str, str]


def request_key(request_type: str, args: Any) -> Key | None:
    """A request's strings as a key (None: not a request whose answer can be derived).

    ``args``: the request's arguments (lm-eval's ``Instance.args``, or ``(arg_0, arg_1)`` as
    its samples file logs them): two strings for a log-likelihood, a context and its
    generation kwargs (a mapping) for a generation.
    """
    if not isinstance(args, tuple | list) or len(args) != 2 or not isinstance(args[0], str):
        return None
    if request_type == "loglikelihood" and isinstance(args[1], str):
        return args[0], args[1]
    if request_type == "generate_until" and isinstance(args[1], Mapping):
        return args[0], json.dumps(args[1], sort_keys=True, default=str)
    return None


def answer_of(request_type: str, value: Any) -> Answer:
    """An answer as compared with the parent's: (float, bool), or the generated text.

    Raises:
        ValueError: ``value`` is not an answer of ``request_type``.
    """
    if request_type == "generate_until":
        if not isinstance(value, str):
            raise ValueError(f"answer {value!r} is not a generated text")
        return value
    if len(value) != 2:
        raise ValueError(f"answer {value!r} is not (log-likelihood, is-greedy)")
    flag = _BOOLS.get(value[1], value[1]) if isinstance(value[1], str) else value[1]
    if not isinstance(flag, bool):
        raise ValueError(f"answer {value!r} is not (log-likelihood, is-greedy)")
    return float(value[0]), flag


@dataclass(frozen=True)
class ParentTask:
    """One derivable task of the parent: its answers by request strings (:func:`request_key`).

    Attributes:
        name: The task name.
        request_type: ``loglikelihood`` or ``generate_until``.
        items: Items (docs) the parent evaluated.
        answers: Each request's answer; a key the parent answered two ways is left out.
        metering: The task's ``config.metering.per_task`` entry (None: not metered).
    """

    name: str
    request_type: str
    items: int
    answers: Mapping[Key, Answer]
    metering: Mapping[str, Any] | None


@dataclass(frozen=True)
class ParentRun:
    """A parent results file's derivable answers and what they were computed on."""

    path: Path
    tasks: tuple[ParentTask, ...]
    devices: tuple[str, ...]
    transformers_version: str | None
    weights: Mapping[str, Any]
    #: how the parent's answers were computed (its ``config.metering.execution_mode``)
    execution_mode: str | None = None

    def covering(self, keys: Iterable[Key], request_type: str) -> ParentTask | None:
        """The first parent task of ``request_type`` answering every key (None: none does)."""
        wanted = list(keys)
        return next((t for t in self.tasks if t.request_type == request_type
                     and all(k in t.answers for k in wanted)), None)

    def known(self, key: Key, request_type: str) -> bool:
        """Whether any parent task of ``request_type`` answered ``key``."""
        return any(key in t.answers for t in self.tasks if t.request_type == request_type)

    def check_weights(self, model: str, weights: Mapping[str, Any]) -> None:
        """The loaded weights' provenance (embedded or packaged model) must be the parent's."""
        differences = _differences(dict(self.weights), dict(weights))
        if differences:
            shown = "; ".join(f"{key}: {parent!r} (parent) vs {mine!r} (this run)"
                              for key, parent, mine in differences[:3])
            raise ConfigError(f"{model}: answers_from={self.path}: the parent ran other weights "
                              f"({shown}); rerun the parent with these weights, or run without "
                              "answers_from")


def _differences(parent: Any, mine: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """Each (dotted key, parent's value, this run's value) where two records differ."""
    if isinstance(parent, Mapping) and isinstance(mine, Mapping):
        return [d for key in sorted(parent.keys() | mine.keys(), key=str)
                for d in _differences(parent.get(key, "<not recorded>"),
                                      mine.get(key, "<not recorded>"),
                                      f"{where}.{key}" if where else str(key))]
    return [] if parent == mine else [(where, parent, mine)]


def load_parent(path: str | Path, model: str, model_args: Mapping[str, Any],
                lm_args: Mapping[str, Any]) -> ParentRun:
    """Read and check the parent results file ``path`` for a run with ``model_args``.

    ``model_args``: this run's model args (the constructor's); ``lm_args``: the lm-eval model's
    (its ``batch_size``).

    Raises:
        ConfigError: The first problem, with the fix.
    """
    where = f"{model}: answers_from={path}"
    results_path, results = read_parent_results(Path(path).expanduser(), where)
    config = results["config"]
    wrapper = config.get("hf_metered") or {}
    if wrapper.get("model_class") != model:
        raise ConfigError(f"{where}: the parent ran {config.get('model')!r}, not {model}; "
                          f"take answers only from a {model} run")
    metering = config.get("metering") or {}
    derived = [d.get("from_results") for d in (metering.get("derived") or {}).values()
               if d.get("derived")]
    if derived:
        raise ConfigError(f"{where}: the parent's answers were themselves derived; pass "
                          f"answers_from={derived[0]} (the measured run)")
    if not at_batch_one(str(metering.get("batch_size"))):
        raise ConfigError(f"{where}: the parent ran at batch size {metering.get('batch_size')}; "
                          "answers are batch-independent only at batch 1: derive from a "
                          "batch-1 run")
    if not at_batch_one(lm_args.get("batch_size")):
        raise ConfigError(f"{model}: answers_from needs --batch_size 1 (this run: "
                          f"{lm_args.get('batch_size')}); remove answers_from to run at "
                          f"{lm_args.get('batch_size')}")
    _check_same_args(where, config.get("model_args"), model_args)
    tasks = tuple(_parent_task(results_path, name, DERIVABLE_OUTPUTS[output], metering)
                  for name, output in sorted((name, task_config.get("output_type")) for
                                             name, task_config in
                                             (results.get("configs") or {}).items())
                  if output in DERIVABLE_OUTPUTS)
    if not tasks:
        raise ConfigError(f"{where}: the parent ran no log-likelihood or generation task; derive "
                          "only such tasks")
    return ParentRun(results_path, tasks,
                     tuple(str(d.get("name")) for d in metering.get("devices") or []),
                     results.get("transformers_version"),
                     {"embedded_model": wrapper.get("embedded_model"),
                      "packaged_model": wrapper.get("packaged_model")},
                     metering.get("execution_mode"))


def read_parent_results(path: Path, where: str) -> tuple[Path, dict[str, Any]]:
    """The parent's results file (resolved) and its content; a wrong path is one line."""
    if not path.exists():
        raise ConfigError(f"{where}: no such file; pass the parent run's results_*.json "
                          "(written by hf-metered with --log_samples)")
    if not path.is_file() or not RESULTS_NAME.match(path.name):
        raise ConfigError(f"{where}: not an lm-eval results_*.json file; pass the parent run's "
                          "results file (written by hf-metered with --log_samples)")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: not readable ({exc}); pass the parent run's results "
                          "file as lm-eval wrote it") from None
    if not isinstance(results, dict) or not isinstance(results.get("config"), dict) \
            or "configs" not in results:
        raise ConfigError(f"{where}: not an lm-eval results file (no config and configs); "
                          "pass the parent run's results_*.json")
    blocks = {"configs": results["configs"], "config.hf_metered": results["config"].get(
        "hf_metered"), "config.metering": results["config"].get("metering")}
    metering = blocks["config.metering"]
    if isinstance(metering, dict):
        blocks["config.metering.derived"] = metering.get("derived")
    for name, block in blocks.items():
        if block is not None and not isinstance(block, dict):
            raise ConfigError(f"{where}: {name} is a {type(block).__name__}, not the block "
                              "hf-metered writes: the file was damaged after the run; pass the "
                              "parent's own results file, or run the parent again")
    return path.resolve(), results


def _check_same_args(where: str, parent_args: Any, model_args: Mapping[str, Any]) -> None:
    """The parent's model args (config.model_args) give the same answers as this run's.

    The rule: :func:`~lm_eval_ext.backends.engine_key.answer_differences`.
    """
    if isinstance(parent_args, str):
        from lm_eval.utils import simple_parse_args_string

        parent_args = simple_parse_args_string(parent_args)
    differing = answer_differences(parent_args or {}, model_args)
    if differing:
        shown = ", ".join(f"{k}: {a or '<absent>'} (parent) vs {b or '<absent>'} (this run)"
                          for k, (a, b) in differing.items())
        why = ("; a derived run's joules are its parent's, measured with the parent's metering "
               "args" if set(differing) & set(METERING_ARGS) else "")
        raise ConfigError(f"{where}: model args differ from the parent's ({shown}{why}); run "
                          "with the parent's model args, or without answers_from")


def _parent_task(results_path: Path, task: str, request_type: str,
                 metering: Mapping[str, Any]) -> ParentTask:
    samples = samples_path(results_path, task)
    where = f"answers_from={results_path}: task {task}"
    if not samples.is_file():
        raise ConfigError(f"{where}: no samples file {samples.name} beside it; rerun the parent "
                          "with --log_samples")
    answers: dict[Key, Answer] = {}
    conflicting: set[Key] = set()
    docs: set[Any] = set()
    for number, line in enumerate(samples.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
            if sample["doc_id"] in docs:  # the same doc under another filter
                continue
            docs.add(sample["doc_id"])
            pairs = _requests(sample, request_type)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {samples.name} line {number} is not an lm-eval "
                              f"{request_type} sample ({type(exc).__name__}: {exc}); rerun the "
                              "parent with --log_samples") from None
        for key, answer in pairs:
            if answers.setdefault(key, answer) != answer:
                conflicting.add(key)
    for key in conflicting:
        del answers[key]
    return ParentTask(task, request_type, len(docs), answers,
                      (metering.get("per_task") or {}).get(task))


def _requests(sample: Mapping[str, Any], request_type: str) -> list[tuple[Key, Answer]]:
    """A sample's key (:func:`request_key`) and answer per request, as lm-eval logged them."""
    arguments = sample["arguments"]
    ordered = [arguments[k] for k in sorted(arguments, key=lambda k: int(k.rsplit("_", 1)[1]))]
    out = []
    for args, resps in zip(ordered, sample["resps"], strict=True):
        key = request_key(request_type, (args["arg_0"], args["arg_1"]))
        if key is None:
            raise ValueError(f"arguments {str(args)[:80]!r} are not a {request_type} request's")
        out.append((key, answer_of(request_type, resps[0])))
    return out
