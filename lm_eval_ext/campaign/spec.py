"""A campaign: models x conditions x tasks, each cell one ``lm_eval --model <backend>`` run.

The YAML form (``lm-eval-ext campaign CAMPAIGN.yaml``)::

    name: my-study
    models:                     # label -> hf-metered model_args ("" = the embedded model);
      smollm2: ""               #   left out: the embedded model alone
    tasks: [bbq_instrument_loglik]
    lm_eval: {limit: 100}       # lm_eval options for every cell (CLI names, no dashes)
    conditions:                 # label -> lm_eval options of this condition
      M0: {model_args: "precision=bf16", batch_size: 1}
      M4_25pct: {tasks: [bbq_subset_25pct_loglik], batch_size: 1}
    compare:                    # optional; default: the first condition vs the others
      interventions: {reference: M0, runs: [M1]}
    subsets: {reference: M0, runs: [M4_25pct]}   # optional: subset-size summary
    execution: lm-eval          # optional: every cell in lm-eval's own mode (default: fast)
    backend: hf-metered         # optional: or vllm-metered (every cell's lm-eval model)

A condition's ``tasks`` replaces the campaign's ``tasks`` for that condition. Every cell is
resolved to one plain configuration (model args merged, options sorted) whose SHA-256 keys the
campaign folder: a rerun with a changed configuration is refused with the differing keys.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from lm_eval_ext.backends.engine_key import (
    RUN_ARGS,
    load_key,
    with_load_options,
    without_idle_derivation_args,
)
from lm_eval_ext.campaign.yaml_file import read_yaml
from lm_eval_ext.command_preflight import (
    PreflightError,
    check_gen_kwargs,
    check_limit,
    check_num_fewshot,
)
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.lm_eval_inputs import check_config_value_types

MODEL = "hf-metered"
#: ``backend:`` -> ``execution:`` -> the model args it sets on every cell (``fast``: the
#: models' defaults; vLLM's engine is its own in both)
BACKENDS = {MODEL: {"fast": {}, "lm-eval": {"cuda_graphs": "false", "generation": "standard",
                                            "mc_scoring": "standard"}},
            "vllm-metered": {"fast": {}, "lm-eval": {}}}
#: lm_eval options the campaign sets itself (one task per cell, its own output folder)
MANAGED = ("model", "tasks", "output_path", "log_samples", "config", "predict_only")
#: lm_eval ``run`` options a cell may set (lm-eval 0.4.13's CLI, without dashes)
LM_EVAL_OPTIONS = (
    "apply_chat_template", "limit", "use_cache", "num_fewshot", "batch_size", "max_batch_size",
    "device", "gen_kwargs", "samples", "cache_requests", "check_integrity", "system_instruction",
    "fewshot_as_multiturn", "include_path", "verbosity", "write_out", "show_config", "seed",
    "trust_remote_code", "confirm_run_unsafe_code", "metadata",
)
#: lm_eval options whose values are checked when the campaign file is read (no model loads)
_VALUE_CHECKS = {"limit": check_limit, "num_fewshot": check_num_fewshot,
                 "gen_kwargs": lambda value, where: check_gen_kwargs(value, where,
                                                                     complete=False)}
_TOP_KEYS = ("name", "models", "tasks", "lm_eval", "conditions", "compare", "subsets",
             "execution", "backend")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


@dataclass(frozen=True)
class Cell:
    """One lm_eval run of a campaign."""

    cell_id: str
    model_label: str
    condition: str
    task: str
    model_args: str
    options: Mapping[str, Any] = field(hash=False)
    #: the lm-eval model every run of the campaign uses (``backend:``)
    backend: str = MODEL

    def config(self) -> dict[str, Any]:
        """The resolved configuration (what a rerun must reproduce exactly)."""
        return {"model": self.backend, "model_label": self.model_label, "condition": self.condition,
                "task": self.task, "model_args": self.model_args,
                "options": dict(sorted(self.options.items()))}

    def config_sha256(self) -> str:
        """SHA-256 of the canonical JSON of :meth:`config`."""
        text = json.dumps(self.config(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def items(self) -> tuple[str, str, str]:
        """What decides the items this cell evaluates: its task, ``limit`` and ``samples``."""
        return (self.task, str(self.options.get("limit")), str(self.options.get("samples")))

    @cached_property
    def engine_args(self) -> dict[str, Any]:
        """The model args as lm-eval hands them to the model (``model_args`` parsed once).

        With the batch size and the load options (``device``, ``trust_remote_code``) the
        cell's options set.
        """
        args = parse_model_args(self.model_args, self.cell_id)
        batch = {k: self.options[k] for k in RUN_ARGS if self.options.get(k) is not None}
        return with_load_options({**batch, **args}, self.options)

    def load_key(self) -> str:
        """What the loaded model depends on: one key, one worker, one load.

        :func:`~lm_eval_ext.backends.engine_key.load_key`; the worker reuses the loaded model.
        """
        return load_key(self.backend, self.engine_args)

    def model_args_for(self, answers_from: str | Path | None) -> str:
        """The model args a run of this cell passes.

        ``answers_from`` added, or else the re-check's args left out (derived runs only).
        """
        if answers_from is None:
            if self.backend != MODEL:  # re-checks are hf-metered's: its check names them
                return self.model_args
            return without_idle_derivation_args(self.model_args)
        return ",".join(a for a in (self.model_args, f"answers_from={answers_from}") if a)

    def lm_eval_argv(self, output_path: str | Path,
                     answers_from: str | Path | None = None) -> list[str]:
        """The ``lm_eval run`` arguments of this cell, writing into ``output_path``.

        ``answers_from``: a parent cell's results file, added to the model args here only (the
        configuration and its SHA-256 stay the cell's).
        """
        argv = ["--model", self.backend, "--tasks", self.task, "--output_path", str(output_path),
                "--log_samples"]
        model_args = self.model_args_for(answers_from)
        if model_args:
            argv += ["--model_args", model_args]
        for key, value in sorted(self.options.items()):
            if value is None or value is False:
                continue
            argv.append(f"--{key}")
            if value is True:
                continue
            if isinstance(value, Mapping):
                argv.append(json.dumps(dict(value), sort_keys=True))
            elif isinstance(value, (list, tuple)):
                argv.append(",".join(str(v) for v in value))
            else:
                argv.append(str(value))
        return argv


@dataclass(frozen=True)
class Comparison:
    """A paired analysis of a campaign: one reference condition against others."""

    name: str
    reference: str
    runs: tuple[str, ...]


@dataclass(frozen=True)
class AnalysisJob:
    """One ``analyze`` run of a campaign: a reference cell against run cells, into ``out``.

    ``reference`` and ``runs`` are ``LABEL=RESULTS_FILE`` as ``analyze`` takes them; ``out`` is
    relative to the campaign folder; ``intersection``: the cells' items differ (task, limit or
    samples), so only shared items are paired.
    """

    model: str
    comparison: str
    reference: str
    runs: tuple[str, ...]
    out: Path
    intersection: bool


@dataclass(frozen=True)
class CampaignSpec:
    """A validated campaign: its cells in a fixed order, and what to analyse."""

    name: str
    cells: tuple[Cell, ...]
    comparisons: tuple[Comparison, ...]
    subsets: Comparison | None
    source: Mapping[str, Any] = field(hash=False)

    @property
    def model_labels(self) -> list[str]:
        """The models' labels, in the order their cells first appear."""
        return list(dict.fromkeys(c.model_label for c in self.cells))

    def cell(self, model_label: str, condition: str, task: str | None = None) -> list[Cell]:
        """The cells of one model and condition (optionally one task)."""
        return [c for c in self.cells if c.model_label == model_label and c.condition == condition
                and (task is None or c.task == task)]

    def analysis_jobs(self, results: Mapping[str, str]) -> tuple[list[AnalysisJob], list[str]]:
        """Every comparison of every model as ``analyze`` jobs, from the finished cells.

        ``results``: cell id -> results file of each finished cell (the campaign folder's table,
        read once). Per reference task, a run cell on the same task, else a condition's only
        cell. Cells of other items (another task, ``limit`` or ``samples``) are compared on
        their shared items by design. Returns the jobs whose cells are all done, and one line
        per comparison skipped for cells not done.
        """
        jobs, skipped = [], []
        for model in self.model_labels:
            for comparison in self.comparisons:
                pairs = self.compared_cells(model, comparison)
                for ref, runs in pairs:
                    missing = [c.cell_id for c in (ref, *runs) if c.cell_id not in results]
                    if missing:
                        skipped.append(f"analysis {model}/{comparison.name} skipped: cells not "
                                       f"done: {', '.join(missing)}")
                    elif runs:
                        out = Path("analysis", model, comparison.name)
                        jobs.append(AnalysisJob(
                            model, comparison.name, f"{ref.condition}={results[ref.cell_id]}",
                            tuple(f"{c.condition}={results[c.cell_id]}" for c in runs),
                            out / ref.task if len(pairs) > 1 else out,
                            any(c.items() != ref.items() for c in runs)))
        return jobs, skipped

    def compared_cells(self, model: str, comparison: Comparison) -> list[tuple[Cell, list[Cell]]]:
        """Each reference cell of ``model`` with the run cells it is analysed against.

        Per reference task, a run condition's cell on the same task, else its only cell.
        """
        pairs = []
        for ref in self.cell(model, comparison.reference):
            runs: list[Cell] = []
            for condition in comparison.runs:
                cells = self.cell(model, condition)
                runs += ([c for c in cells if c.task == ref.task]
                         or (cells if len(cells) == 1 else []))
            pairs.append((ref, runs))
        return pairs

    def resolved(self) -> dict[str, Any]:
        """Name and every cell's configuration: the campaign folder's identity."""
        return {"name": self.name, "cells": {c.cell_id: c.config() for c in self.cells}}


def parse_model_args(text: str | Mapping[str, Any] | None, where: str) -> dict[str, str]:
    """``k=v,k2=v2`` (or a mapping) -> ordered dict of strings."""
    if text is None or text == "":
        return {}
    if isinstance(text, Mapping):
        return {str(k): _scalar_text(v) for k, v in text.items()}
    out = {}
    for part in str(text).split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{where}: model_args part {part!r} is not KEY=VALUE "
                              "(e.g. precision=bf16,batch_size=1)")
        out[key.strip()] = value.strip()
    return out


def _scalar_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _join_model_args(args: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in args.items())


def _with_execution(args: dict[str, str], forced: Mapping[str, str], execution: str,
                    where: str) -> dict[str, str]:
    """The model args with those ``execution`` sets; a clash with the cell's own is an error."""
    clash = {k: v for k, v in args.items() if k in forced and v.lower() != forced[k]}
    if clash:
        key, value = next(iter(clash.items()))
        raise ConfigError(f"{where}: model arg {key}={value} contradicts execution: {execution} "
                          f"(which sets {key}={forced[key]}); remove it, or use execution: fast")
    return {**args, **forced}


def _check_label(kind: str, label: Any) -> str:
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise ConfigError(f"{kind} label {label!r}: use letters, digits and _.+- only "
                          "(it names folders)")
    return label


def _model_arg_names() -> set[str]:
    """The metered models' own model args (``precision``, ``idle_seconds``, ...)."""
    from lm_eval_ext.backends.model_args import HFMeteredArgs

    return set(HFMeteredArgs.names())


#: lm_eval options holding key=value pairs: a condition's add to (and override) the campaign's
MERGED_OPTIONS = ("gen_kwargs", "metadata")


def _pairs(value: Any) -> dict[str, Any]:
    """A key=value option as a mapping: a mapping as it is, JSON text, else ``k=v,k=v`` text."""
    if isinstance(value, Mapping):
        return dict(value)
    text = str(value).strip()
    if text.startswith("{"):
        return dict(json.loads(text))  # checked as JSON by the option checks
    from lm_eval.utils import simple_parse_args_string  # lm-eval's own reading (types too)

    return simple_parse_args_string(text)


def _merged_options(common: Mapping[str, Any], own: Mapping[str, Any],
                    where: str) -> dict[str, Any]:
    """A condition's lm_eval options over the campaign's, key=value options merged by key.

    (A condition's ``gen_kwargs: {do_sample: false}`` keeps the campaign's ``max_gen_toks``.)
    """
    options = {**common, **own}
    merged = [key for key in MERGED_OPTIONS
              if common.get(key) is not None and own.get(key) is not None]
    for key in merged:
        options[key] = {**_pairs(common[key]), **_pairs(own[key])}
    if options.get("gen_kwargs") is not None:  # what the cell's run gets, checked as a whole
        try:
            check_gen_kwargs(options["gen_kwargs"], "gen_kwargs:")
        except PreflightError as exc:
            raise ConfigError(f"{where}{' with lm_eval' if 'gen_kwargs' in merged else ''}: "
                              f"{exc}") from None
    return options


def _options(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping of lm_eval options, got {raw!r}")
    out = {}
    for key, value in raw.items():
        if key in MANAGED:
            raise ConfigError(f"{where}: {key!r} is set by the campaign itself (one task per "
                              "cell, its own --output_path, --log_samples always); remove it")
        if key not in LM_EVAL_OPTIONS and key in _model_arg_names():
            raise ConfigError(f"{where}: {key} is a model arg, not an lm_eval option; write "
                              f"model_args: \"{key}={value}\"")
        if key not in LM_EVAL_OPTIONS:
            hint = ", ".join(o for o in LM_EVAL_OPTIONS if o[:3] == str(key)[:3]) or \
                ", ".join(LM_EVAL_OPTIONS)
            raise ConfigError(f"{where}: unknown lm_eval option {key!r}; valid: {hint}")
        check = _VALUE_CHECKS.get(key)
        try:
            if check is not None and value is not None:
                check(value, f"{key}:")
            check_config_value_types({key: value})  # a switch true/false, a name text
        except PreflightError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        out[key] = value
    return out


def _tasks(raw: Any, where: str) -> list[str]:
    tasks = [raw] if isinstance(raw, str) else raw
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise ConfigError(f"{where}: tasks must be a task name or a non-empty list of names")
    return tasks


def _comparison(name: str, raw: Any, conditions: list[str],
                where: str | None = None) -> Comparison:
    """A ``compare`` entry (or the ``subsets`` block: ``where`` names it) checked."""
    where = where or f"compare.{name}"
    if not isinstance(raw, Mapping) or "reference" not in raw or not raw.get("runs"):
        raise ConfigError(f"{where}: give reference: CONDITION and runs: [CONDITION, ...]")
    runs = tuple(_tasks(raw["runs"], f"{where}.runs"))
    for label in (raw["reference"], *runs):
        if label not in conditions:
            raise ConfigError(f"{where}: condition {label!r} is not defined; defined: "
                              f"{', '.join(conditions)}")
    if raw["reference"] in runs:
        others = [c for c in conditions if c != raw["reference"]]
        raise ConfigError(f"{where}: {raw['reference']} is the reference and one of its "
                          "runs, so it would be compared with itself; list other conditions "
                          f"in runs (e.g. runs: [{others[0] if others else 'M1'}])")
    twice = next((label for label in runs if runs.count(label) > 1), None)
    if twice is not None:
        raise ConfigError(f"{where}: {twice} is listed twice in runs; list each "
                          f"condition once (runs: [{', '.join(dict.fromkeys(runs))}])")
    return Comparison(name, raw["reference"], runs)


def _check_cell_ids(cells: list[Cell]) -> None:
    """Each cell its own id (and folder): a clash is named as what it is."""
    seen: dict[str, Cell] = {}
    for cell in cells:
        other = seen.setdefault(cell.cell_id, cell)
        if other is cell:
            continue
        if (other.model_label, other.condition) == (cell.model_label, cell.condition):
            raise ConfigError(f"task {cell.task!r} is listed twice in the tasks of condition "
                              f"{cell.condition} (its own tasks:, else the campaign's); list "
                              "each task once")
        raise ConfigError(
            f"model {other.model_label!r} with condition {other.condition!r} and model "
            f"{cell.model_label!r} with condition {cell.condition!r} both make cell "
            f"{cell.cell_id!r} (labels are joined with '__'); rename a label so that it "
            "holds no '__'")


def build_spec(raw: Mapping[str, Any]) -> CampaignSpec:
    """Validate a campaign mapping (from YAML or a preset) and expand its cells."""
    if not isinstance(raw, Mapping):
        raise ConfigError("a campaign file holds a mapping with models, tasks and conditions")
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    if unknown:
        raise ConfigError(f"unknown campaign keys {unknown}; valid: {', '.join(_TOP_KEYS)}")
    models = raw.get("models", {"embedded": ""})  # left out: the embedded model alone
    if models in (None, {}):
        raise ConfigError("models: names no model; give label: model_args (\"\" = the embedded "
                          "model), or leave models out for the embedded model alone")
    if not isinstance(models, Mapping):
        raise ConfigError("models: a mapping of label -> model_args (\"\" = the embedded model)")
    conditions = raw.get("conditions") or {"default": {}}
    if not isinstance(conditions, Mapping):
        raise ConfigError("conditions: a mapping of label -> lm_eval options")
    common = _options(raw.get("lm_eval"), "lm_eval")
    default_tasks = _tasks(raw["tasks"], "tasks") if "tasks" in raw else None
    backend = raw.get("backend") or MODEL
    if backend not in BACKENDS:
        raise ConfigError(f"backend: {backend!r} is not a metered model; use "
                          f"{' or '.join(BACKENDS)} (the default: {MODEL})")
    execution = raw.get("execution") or "fast"
    if execution not in BACKENDS[backend]:
        raise ConfigError(f"execution: {execution!r} is not a mode; use fast (the default: "
                          "replayed scoring, the fast generation path) or lm-eval (lm-eval's own "
                          "forward and generation loop, as the paper ran)")
    cells = []
    for model_label, model_args in models.items():
        _check_label("model", model_label)
        base_args = parse_model_args(model_args, f"models.{model_label}")
        for condition, settings in conditions.items():
            _check_label("condition", condition)
            where = f"conditions.{condition}"
            if settings is not None and not isinstance(settings, Mapping):
                raise ConfigError(f"{where}: expected a mapping of lm_eval options (e.g. "
                                  f"{condition}: {{batch_size: 8}}), got {settings!r}")
            settings = dict(settings or {})
            tasks = _tasks(settings.pop("tasks"), where) if "tasks" in settings else default_tasks
            if tasks is None:
                raise ConfigError(f"{where}: no tasks (set campaign tasks: or the condition's)")
            args = _with_execution(
                {**base_args, **parse_model_args(settings.pop("model_args", None), where)},
                BACKENDS[backend][execution], execution, f"models.{model_label} with {where}")
            options = _merged_options(common, _options(settings, where), where)
            for task in tasks:
                cell_id = f"{model_label}__{condition}__{task}"
                cells.append(Cell(cell_id, model_label, condition, task,
                                  _join_model_args(args), options, backend))
    _check_cell_ids(cells)
    labels = list(conditions)
    compare = raw.get("compare")
    if compare is None:
        comparisons = ((Comparison("all", labels[0], tuple(labels[1:])),)
                       if len(labels) > 1 else ())
    else:
        if not isinstance(compare, Mapping):
            raise ConfigError("compare: a mapping of name -> {reference, runs}")
        comparisons = tuple(_comparison(_check_label("comparison", n), v, labels)
                            for n, v in compare.items())
    subsets = (_comparison("subsets", raw["subsets"], labels, "subsets") if raw.get("subsets")
               else None)
    name = str(raw.get("name") or "campaign")
    spec = CampaignSpec(name, tuple(cells), comparisons, subsets, dict(raw))
    _check_one_benchmark_per_comparison(spec)
    return spec


def _check_one_benchmark_per_comparison(spec: CampaignSpec) -> None:
    """A comparison pairs cells of one benchmark (two share no items).

    Found only at the analysis, the mismatch failed the campaign after every cell had run.
    """
    from lm_eval_ext.tasks import benchmark_of_task

    blocks = [(f"compare.{c.name}", c) for c in spec.comparisons]
    blocks += [("subsets", spec.subsets)] if spec.subsets is not None else []
    for where, comparison in blocks:
        for model in spec.model_labels:
            for ref, runs in spec.compared_cells(model, comparison):
                for run in runs:
                    ours, theirs = benchmark_of_task(ref.task), benchmark_of_task(run.task)
                    if None not in (ours, theirs) and ours != theirs:
                        raise ConfigError(
                            f"{where}: {ref.condition} ({ref.task}) and {run.condition} "
                            f"({run.task}) are of two benchmarks ({ours}, {theirs}), which "
                            "share no items to compare: compare conditions of one benchmark "
                            "(a compare block names them)")


def load_spec(path: str | Path) -> CampaignSpec:
    """Read and validate a campaign YAML file."""
    raw = read_yaml(path)
    try:
        return build_spec(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def parse_shard(text: str) -> tuple[int, int]:
    """``i/n`` (1-based) -> (i, n)."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise ConfigError(f"--shard {text!r}: use I/N with 1 <= I <= N (e.g. --shard 1/2)")
    return int(match.group(1)), int(match.group(2))


def shard_cells(cells: tuple[Cell, ...] | list[Cell], index: int, count: int) -> list[Cell]:
    """Cells of shard ``index`` of ``count``: round robin over the campaign order.

    Deterministic from the spec alone, so shards started anywhere partition the cells.
    """
    if index > len(cells):
        raise ConfigError(f"--shard {index}/{count}: the campaign has {len(cells)} cell(s), so "
                          f"shard {index} would run nothing; use at most {len(cells)} shards")
    return [c for position, c in enumerate(cells) if position % count == index - 1]
