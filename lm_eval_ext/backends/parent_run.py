"""The parent of a derived run (model arg ``answers_from``): its answers by request strings, checked.

At batch 1 a log-likelihood answer depends only on the model, its precision and engine
settings, and the request's strings (context, continuation). An hf-metered run written with
``--log_samples`` holds those answers: :func:`load_parent` reads them beside its results file and
checks, before any model load, that this run may take them (each problem one line with the
fix). What can only be known once the model is loaded (the weights) is
:meth:`ParentRun.check_weights`.

    parent = load_parent("runs/m0/results_2026-12-01T10-00-00.json", "hf-metered",
                         {"precision": "bf16"}, {"batch_size": 1})
    parent.covering([(context, continuation), ...])   # the parent task holding them all
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval_ext.errors import ConfigError
from lm_eval_ext.outputs import RESULTS_NAME, samples_path

#: model args that may differ from the parent's: the derivation's own, and lm-eval's run flags
#: (batch size and device are checked on their own)
NOT_COMPARED = ("answers_from", "recheck", "recheck_seed", "batch_size", "max_batch_size", "device")
#: task output types whose requests are log-likelihoods
LOGLIK_OUTPUTS = ("multiple_choice", "loglikelihood")
_BOOLS = {"True": True, "False": False}

Answer = tuple[float, bool]
Key = tuple[str, str]


@dataclass(frozen=True)
class ParentTask:
    """One log-likelihood task of the parent: its answers by (context, continuation).

    Attributes:
        name: The task name.
        items: Items (docs) the parent evaluated.
        answers: Each request's answer; a key the parent answered two ways is left out.
        metering: The task's ``config.metering.per_task`` entry (None: not metered).
    """

    name: str
    items: int
    answers: Mapping[Key, Answer]
    metering: Mapping[str, Any] | None


@dataclass(frozen=True)
class ParentRun:
    """A parent results file's log-likelihood answers and what they were computed on."""

    path: Path
    tasks: tuple[ParentTask, ...]
    devices: tuple[str, ...]
    transformers_version: str | None
    weights: Mapping[str, Any]
    #: how the parent's answers were computed (its ``config.metering.execution_mode``)
    execution_mode: str | None = None

    def covering(self, keys: Iterable[Key]) -> ParentTask | None:
        """The first parent task that holds an answer for every key (None: none does)."""
        wanted = list(keys)
        return next((t for t in self.tasks if all(k in t.answers for k in wanted)), None)

    def known(self, key: Key) -> bool:
        """Whether any parent task answered ``key``."""
        return any(key in t.answers for t in self.tasks)

    def check_weights(self, model: str, weights: Mapping[str, Any]) -> None:
        """The loaded weights' provenance (embedded or packaged model) must be the parent's."""
        if dict(weights) != dict(self.weights):
            raise ConfigError(f"{model}: answers_from={self.path}: the parent ran other weights "
                              f"({self.weights}) than this run ({dict(weights)}); rerun the "
                              "parent with these weights, or run without answers_from")


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
    if str(metering.get("batch_size")) != "1":
        raise ConfigError(f"{where}: the parent ran at batch size {metering.get('batch_size')}; "
                          "answers are batch-independent only at batch 1: derive from a "
                          "batch-1 run")
    if str(lm_args.get("batch_size", 1)) != "1":
        raise ConfigError(f"{model}: answers_from needs --batch_size 1 (this run: "
                          f"{lm_args.get('batch_size')}); remove answers_from to run at "
                          f"{lm_args.get('batch_size')}")
    _check_same_args(where, config.get("model_args"), model_args)
    tasks = tuple(_parent_task(results_path, name, metering) for name, task_config
                  in sorted((results.get("configs") or {}).items())
                  if task_config.get("output_type") in LOGLIK_OUTPUTS)
    if not tasks:
        raise ConfigError(f"{where}: the parent ran no log-likelihood task; derive only "
                          "log-likelihood tasks")
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
    return path.resolve(), results


def _canonical(value: Any) -> str:
    """A model arg's value as text, so that ``0`` and ``0.0``, ``True`` and ``true`` agree."""
    text = str(value).strip()
    if text.lower() in ("true", "false"):
        return text.lower()
    try:
        return repr(float(text))
    except ValueError:
        return text


def _compared(args: Any) -> dict[str, str]:
    if isinstance(args, str):
        from lm_eval.utils import simple_parse_args_string

        args = simple_parse_args_string(args)
    return {str(k): _canonical(v) for k, v in (args or {}).items() if k not in NOT_COMPARED}


def _check_same_args(where: str, parent_args: Any, model_args: Mapping[str, Any]) -> None:
    """The parent's model args (config.model_args) equal this run's, but :data:`NOT_COMPARED`."""
    parent, this = _compared(parent_args), _compared(dict(model_args))
    differing = sorted(k for k in set(parent) | set(this) if parent.get(k) != this.get(k))
    if differing:
        shown = ", ".join(f"{k}: {parent.get(k, '<absent>')} (parent) vs "
                          f"{this.get(k, '<absent>')} (this run)" for k in differing)
        raise ConfigError(f"{where}: model args differ from the parent's ({shown}); run with "
                          "the parent's model args, or without answers_from")


def _parent_task(results_path: Path, task: str, metering: Mapping[str, Any]) -> ParentTask:
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
            pairs = _requests(sample)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {samples.name} line {number} is not an lm-eval "
                              f"log-likelihood sample ({type(exc).__name__}: {exc}); rerun the "
                              "parent with --log_samples") from None
        for key, answer in pairs:
            if answers.setdefault(key, answer) != answer:
                conflicting.add(key)
    for key in conflicting:
        del answers[key]
    return ParentTask(task, len(docs), answers, (metering.get("per_task") or {}).get(task))


def _requests(sample: Mapping[str, Any]) -> list[tuple[Key, Answer]]:
    """A sample's (context, continuation) and answer per request, as lm-eval logged them."""
    arguments = sample["arguments"]
    ordered = [arguments[k] for k in sorted(arguments, key=lambda k: int(k.rsplit("_", 1)[1]))]
    out = []
    for args, resps in zip(ordered, sample["resps"], strict=True):
        logged = resps[0]
        if len(logged) != 2 or logged[1] not in _BOOLS:
            raise ValueError(f"answer {logged!r} is not (log-likelihood, is-greedy)")
        out.append(((str(args["arg_0"]), str(args["arg_1"])),
                    (float(logged[0]), _BOOLS[logged[1]])))
    return out
