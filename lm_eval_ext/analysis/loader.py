"""Read lm-eval output folders into runs: run-level info plus one row per evaluated item.

A *run* is one ``results_<timestamp>.json`` with its ``samples_<task>_<timestamp>.jsonl``
files (lm-eval's layout: ``<output_path>/<model>/results_*.json``). A path given to the loader
may be that file, its folder, or any folder above it; every results file found is one run.
lm-eval writes bare ``NaN`` and stringifies many leaves; both are tolerated.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.integrity import check_item_metrics, check_samples
from lm_eval_ext.analysis.items import SampleError, extract_items
from lm_eval_ext.analysis.metrics import metrics_for
from lm_eval_ext.backends.card_fields import model_card_fields
from lm_eval_ext.backends.packaged_models import model_identity_of
from lm_eval_ext.cards import CARD_FILE, batch_size_of, sampled, task_card
from lm_eval_ext.data.store import sha256_of
from lm_eval_ext.files import path_error
from lm_eval_ext.metering.derived import DERIVED_FLAG
from lm_eval_ext.metering.idle import physical_or_none
from lm_eval_ext.metering.plausibility import run_cost
from lm_eval_ext.outputs import RESULTS_NAME as _RESULTS
from lm_eval_ext.outputs import results_stamp, samples_path  # also imported from here


@dataclass
class Run:
    """One lm-eval run: identity, configuration, cost, and its items."""

    run_id: str
    results_path: Path
    info: dict[str, Any]
    items: pd.DataFrame = field(repr=False)
    cards: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)  # task -> card


def read_json(path: Path) -> dict[str, Any]:
    """Parse a results file (bare NaN allowed), with an error that names the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise path_error(path, exc, "read") from None
    except json.JSONDecodeError as exc:
        raise AnalysisInputError(
            f"{path} is not readable JSON ({exc}); the run may have been interrupted while "
            "writing it: rerun the evaluation"
        ) from exc


def read_results(path: Path) -> dict[str, Any]:
    """A results file, checked for lm-eval's shape (a mapping with its tasks' results)."""
    results = read_json(path)
    if not (isinstance(results, dict) and isinstance(results.get("results"), dict)
            and isinstance(results.get("configs"), dict) and results["configs"]
            and all(isinstance(c, dict) for c in results["configs"].values())
            and isinstance(results.get("config", {}), dict)):
        kind = type(results).__name__ if not isinstance(results, dict) else "mapping without tasks"
        raise AnalysisInputError(
            f"{path} is JSON but not an lm-eval results file (a {kind}; lm-eval writes a "
            "mapping with \"results\" and \"configs\" per task): pass the results file lm-eval "
            "wrote, or rerun the evaluation with --log_samples")
    return results


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Parse a samples JSONL file; a truncated or broken line is an error naming its number."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError) as exc:
        raise path_error(path, exc, "read") from None
    samples = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as exc:
            cut = line_no == len(lines) and not line.endswith("\n")
            raise AnalysisInputError(
                f"{path} line {line_no} is not valid JSON ({exc.msg}): "
                + ("the file was cut while lm-eval wrote it (a full disk or a killed run), so "
                   "items are missing. Rerun the evaluation with --log_samples" if cut else
                   "the line was damaged after lm-eval wrote it. Pass the run's own file, or "
                   "rerun the evaluation with --log_samples")
            ) from exc
        if not isinstance(sample, dict):
            raise AnalysisInputError(
                f"{path} line {line_no} is a JSON {type(sample).__name__}, not a sample (lm-eval "
                "writes one mapping per line): the line was damaged after lm-eval wrote it. Pass "
                "the run's own file, or rerun the evaluation with --log_samples")
        samples.append(sample)
    if not samples:
        raise AnalysisInputError(f"{path} holds no samples; rerun with --log_samples")
    return samples


def find_results(paths: Iterable[str | Path]) -> list[Path]:
    """Every ``results_*.json`` under the given files or folders, sorted."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            if not _RESULTS.match(path.name):
                raise AnalysisInputError(f"{path} is not an lm-eval results_*.json file")
            found.append(path)
        elif path.is_dir():
            hits = sorted(p for p in path.rglob("*.json") if _RESULTS.match(p.name))
            if not hits:
                raise AnalysisInputError(_no_results(path))
            found.extend(hits)
        else:
            raise AnalysisInputError(f"{path} does not exist")
    return found


def _no_results(folder: Path) -> str:
    """Why ``folder`` holds no run, and the fix."""
    samples = next(folder.rglob("samples_*.jsonl"), None)
    if samples is not None:
        return (f"{samples.parent} holds lm-eval samples files but no results_*.json: lm-eval "
                "writes the results file beside them, so the run stopped before writing it or "
                "the file was moved; pass the folder that holds both, or rerun the evaluation")
    return (f"no lm-eval results_*.json under {folder}; pass the --output_path of an lm_eval "
            "run (run with --log_samples)")


def judge_scores_path(results_path: Path, task: str) -> Path:
    """The judge's per-item scores of ``task`` beside a results file (its ``.json``: summary)."""
    return results_path.parent / f"judge_{task}_{results_stamp(results_path)}.jsonl"


def _task_setting(results: dict[str, Any], task: str) -> dict[str, Any]:
    cfg = results.get("configs", {}).get(task, {})
    meta = cfg.get("metadata") or {}
    gen = cfg.get("generation_kwargs") or {}
    run_gen = results.get("config", {}).get("gen_kwargs") or {}
    merged = {**gen, **run_gen}
    temperature = merged.get("temperature", 1.0)
    seed = results.get("config", {}).get("torch_seed")
    return {
        "scoring_path": "generative" if cfg.get("output_type") == "generate_until" else "loglik",
        "membership_sha256": meta.get("membership_sha256") or meta.get("sample_sha256"),
        "template_tier": meta.get("template_tier", "default"),
        "shots": results.get("n-shot", {}).get(task, cfg.get("num_fewshot", 0)),
        "decoding": f"T={temperature},torch_seed={seed}" if sampled(merged) else "greedy",
    }


def campaign_card(results_path: Path) -> dict[str, Any]:
    """The ``card.json`` a campaign wrote beside this results file ({} for other runs)."""
    path = results_path.parent / CARD_FILE
    if not path.is_file():
        return {}
    try:
        card = read_json(path)
    except AnalysisInputError:
        card = None
    if not isinstance(card, dict):
        raise AnalysisInputError(f"{path} (the campaign's card of this cell) is damaged: rerun "
                                 "the campaign, which runs a damaged cell again")
    return card


def read_judge_scores(results_path: Path, task: str) -> tuple[pd.DataFrame | None,
                                                             dict[str, str]]:
    """Judge scores written beside the samples (``judge_<task>_<stamp>.jsonl``) and rubrics."""
    path = judge_scores_path(results_path, task)
    if not path.is_file():
        return None, {}
    try:
        rows = read_samples(path)
    except AnalysisInputError:  # the judge's file: judging again restores it
        raise AnalysisInputError(f"{path} (the judge's scores) is damaged or cut: "
                                 f"{_judge_again(results_path)}") from None
    summary_path = path.with_suffix(".json")
    summary = read_judge_summary(summary_path, results_path) if summary_path.is_file() else {}
    judged = summary.get("samples_sha256")  # (a judging before it was recorded: not checked)
    samples = samples_path(results_path, task)
    if judged is not None and samples.is_file() and judged != sha256_of(samples):
        raise AnalysisInputError(f"{path} (the judge's scores) judged another samples file than "
                                 f"{samples} (its SHA-256 differs: copied from another run, or "
                                 f"the samples changed since): {_judge_again(results_path)}")
    columns = ["doc_id", *[c for c in rows[0] if c.startswith("judge_")]]
    frame = pd.DataFrame(rows)[columns].astype(float).astype({"doc_id": int})
    return frame, dict(summary.get("rubric_sha256") or {})


def read_judge_summary(path: Path, results_path: Path) -> dict[str, Any]:
    """The judge's summary (``judge_<task>_<stamp>.json``); damaged: one line, judge again."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else f"not valid JSON: {exc}"
        raise AnalysisInputError(f"{path} (the judge's summary) cannot be read ({reason}): "
                                 f"{_judge_again(results_path)}") from None
    if not isinstance(summary, dict):
        raise AnalysisInputError(f"{path} (the judge's summary) holds a JSON "
                                 f"{type(summary).__name__}, not a summary: "
                                 f"{_judge_again(results_path)}")
    return summary


def _judge_again(results_path: Path) -> str:
    return (f"judge the run again (`lm-eval-ext judge {results_path.parent} --overwrite`), or "
            "remove the judge's files to analyse the run unjudged")


def _list(value: object) -> list:
    """A list as written, else none (a damaged block's string is not a list of entries)."""
    return value if isinstance(value, list) else []


def _number_or_none(value: object) -> float | None:
    """lm-eval's ``total_evaluation_time_seconds`` (written as text) as a number, if it is one."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def run_info(results: dict[str, Any], results_path: Path, run_id: str) -> dict[str, Any]:
    """Run-level identity, configuration and cost (from ``config.metering`` when present)."""
    config = results.get("config", {})
    metering = config.get("metering") or {}
    blocks = {"config.metering": metering, **{f"config.{key}": config[key] for key in
                                              ("hf_metered", "vllm_metered") if key in config}}
    for name, block in blocks.items():
        if not isinstance(block, dict):
            raise AnalysisInputError(
                f"{results_path}: {name} is a {type(block).__name__}, not the block "
                "hf-metered writes: the file was damaged after the run; pass the run's own "
                "file, or rerun the evaluation")
    flags = [str(f) for f in _list(metering.get("flags"))]
    # a written value that no run can measure (metering/plausibility.py) is none, flagged
    wall = _number_or_none(results.get("total_evaluation_time_seconds"))
    cost = run_cost(metering, wall, derived=DERIVED_FLAG in flags)
    flags += [f"{key}_impossible" for key in cost.impossible]
    tasks = sorted(results.get("configs", {}))
    settings = {t: _task_setting(results, t) for t in tasks}
    first = settings[tasks[0]] if tasks else {}
    # written before the check: an impossible idle-corrected energy or share is no number
    corrected, idle_share = physical_or_none(metering.get("energy_joules_idle_corrected"),
                                             metering.get("idle_share"))
    precision = metering.get("precision")
    if precision is None and isinstance(config.get("model_args"), str):
        match = re.search(r"(?:precision|dtype)=([\w.]+)", config["model_args"])
        precision = match.group(1) if match else None
    return {
        "run": run_id,
        "model": (campaign_card(results_path).get("model_label")
                  or model_identity_of(results.get("config", {}))[0]),
        "tasks": ",".join(tasks),
        "precision": precision or str(config.get("model_dtype", "unknown")),
        "batch_size": batch_size_of(config, any(s["scoring_path"] == "generative"
                                                for s in settings.values())),
        "scoring_path": first.get("scoring_path"),
        "membership_sha256": first.get("membership_sha256"),
        "template_tier": first.get("template_tier"),
        "shots": first.get("shots"),
        "decoding": first.get("decoding"),
        "inference_seconds": cost.inference_seconds,
        "inference_seconds_se": cost.inference_seconds_se,
        "energy_joules": cost.energy_joules,
        "energy_joules_se": cost.energy_joules_se,
        "energy_joules_idle_corrected": corrected,
        "energy_joules_idle_corrected_se": metering.get("energy_joules_idle_corrected_se")
        if corrected is not None else None,
        "execution_mode": metering.get("execution_mode"),
        "energy_derived": DERIVED_FLAG in flags,
        "energy_source": metering.get("energy_source"),
        "gpu_uuids": ",".join(sorted(str(g.get("uuid")) for g in _list(metering.get("gpus"))
                                     if isinstance(g, dict))),
        "idle_share": idle_share,
        "forward_share": cost.forward_share,
        "energy_flags": ",".join(flags + (
            ["idle_corrected_below_zero"] if corrected is None and (
                metering.get("energy_joules_idle_corrected") or 0) < 0 else [])),
        "total_evaluation_seconds": math.nan if wall is None else wall,
        "results_path": str(results_path),
        "task_settings": settings,
    }


def _subset_of(task: str) -> str:
    name = task.removesuffix("_loglik")
    if name.startswith("bbq_subset_"):
        return name.removeprefix("bbq_subset_")
    return "instrument" if name == "bbq_instrument" else name


def short_label(info: dict[str, Any]) -> str:
    """A run's default label: ``model@precision/bsN/subset`` (tasks joined by ``+``)."""
    subsets = sorted({_subset_of(t) for t in info["tasks"].split(",") if t})
    return (f"{info['model']}@{info['precision']}/bs{info['batch_size']}/"
            f"{'+'.join(subsets) or 'none'}")


def distinct_labels(runs: list[Run]) -> list[Run]:
    """The runs, where two share a label, the later ones renamed ``label#2``, ``label#3``..."""
    seen: dict[str, int] = {}
    for run in runs:
        count = seen.get(run.run_id, 0) + 1
        seen[run.run_id] = count
        if count > 1:
            run.run_id = f"{run.run_id}#{count}"
            run.info["run"] = run.run_id
            run.items["run"] = run.run_id
    return runs


#: the cost of a run whose metered requests are fewer than its samples' (one flag, no numbers)
COST_FIELDS = ("inference_seconds", "inference_seconds_se", "energy_joules", "energy_joules_se",
               "energy_joules_idle_corrected", "energy_joules_idle_corrected_se",
               "forward_share", "idle_share")
REQUESTS_NOT_ALL_METERED = "requests_not_all_metered"


def _unmetered_requests(results: dict[str, Any], task: str,
                        samples: list[dict[str, Any]]) -> list[str]:
    """``["task: M of N"]`` where the model metered fewer requests than the samples hold.

    (lm-eval's request cache, ``--use_cache``, answers the others without the model.)
    """
    entry = ((((results.get("config") or {}).get("metering") or {}).get("per_task") or {})
             .get(task) or {})
    metered = entry.get("n_requests") if isinstance(entry, dict) else None
    seen: set[Any] = set()
    logged = 0
    for sample in samples:
        if sample.get("doc_id") not in seen:
            seen.add(sample.get("doc_id"))
            logged += len(sample.get("arguments") or [])
    if isinstance(metered, int) and not isinstance(metered, bool) and metered < logged:
        return [f"{task}: {metered} of {logged}"]
    return []


def load_run(results_path: Path, run_id: str | None = None) -> Run:
    """Load one run and its items (every task of the run); unnamed: :func:`short_label`."""
    results = read_results(results_path)
    info = run_info(results, results_path, run_id or "")
    run_id = run_id or short_label(info)
    info["run"] = run_id
    frames, cards, fingerprints, unmetered = [], {}, [], []
    for task, setting in info["task_settings"].items():
        samples_file = samples_path(results_path, task)
        if not samples_file.is_file():
            raise AnalysisInputError(
                f"{results_path} has no samples file for task {task} (expected "
                f"{samples_file.name} beside it); the analysis needs per-item outputs: where "
                "the run wrote that file elsewhere, put it beside its results file; otherwise "
                "rerun lm_eval with --log_samples")
        samples = read_samples(samples_file)
        check_samples(results, task, samples, samples_file)
        unmetered += _unmetered_requests(results, task, samples)
        fingerprints.append(f"{task}:{sha256_of(samples_file)}")
        try:
            items = extract_items(task, results["configs"][task], samples)
        except SampleError as exc:
            raise AnalysisInputError(f"{samples_file}: {exc}; rerun lm_eval with --log_samples "
                                     "or repair the line") from exc
        check_item_metrics(results, task, {spec.name: spec.compute(items)
                                           for spec in metrics_for(items)}, samples_file)
        judged, rubrics = read_judge_scores(results_path, task)
        if judged is not None:
            items = items.drop(columns=[c for c in judged if c.startswith("judge_")
                                        and c in items]).merge(judged, on="doc_id", how="left")
        for key, value in setting.items():
            items[key] = value
        frames.append(items)
        cards[task] = task_card(results, task, samples, rubrics,
                                model_fields=model_card_fields(results.get("config") or {}))
    items = pd.concat(frames, ignore_index=True)
    duplicated = items["item_key"].duplicated()
    if duplicated.any():  # a run's items are paired by item: one task per item
        key = items["item_key"][duplicated].iloc[0]
        first, second = items.loc[items["item_key"] == key, "task"].iloc[:2]
        raise AnalysisInputError(
            f"{results_path}: tasks {first} and {second} evaluated the same item {key}, and "
            "analyze pairs a run's items by item, so one run cannot hold both: run each in an "
            f"lm_eval call of its own (--tasks {first}, then --tasks {second}) and analyse "
            "those as separate runs")
    if unmetered:  # answers that never reached the model (lm-eval's request cache): no cost
        info.update(dict.fromkeys(COST_FIELDS), energy_flags=",".join(
            [*filter(None, info["energy_flags"].split(",")), REQUESTS_NOT_ALL_METERED]))
    info["results_sha256"] = sha256_of(results_path)
    info["samples_sha256"] = ",".join(fingerprints)
    items.insert(0, "run", run_id)
    items.insert(1, "model", info["model"])
    for key in ("precision", "batch_size"):
        items[key] = info[key]
    return Run(run_id, results_path, info, items, cards)


_RUN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.+-]*")


def split_run_argument(raw: str | Path) -> tuple[str | None, str]:
    """``NAME=PATH`` -> (NAME, PATH) when NAME is a bare identifier and PATH exists; else a path.

    So ``out/precision=int8`` stays a path, and a name that is not an identifier is never cut
    off a path.
    """
    text = str(raw)
    name, sep, path = text.partition("=")
    if sep and _RUN_NAME.fullmatch(name) and Path(path).exists():
        return name, path
    if sep and not name.strip() and Path(path).exists() and not Path(text).exists():
        raise AnalysisInputError(f"{text}: the NAME before = is empty; write NAME={path} "
                                 f"(e.g. base={path}), or the path alone")
    if sep and Path(path).exists() and not Path(text).exists():  # a name of other characters
        raise AnalysisInputError(f"{text}: the NAME {name!r} {RUN_NAME_RULE}; write e.g. "
                                 f"{usable_run_name(name)}={path}")
    return None, text


#: what a run name may hold (it is written in tables and named again in RUN=W options)
RUN_NAME_RULE = ("is not a run name (letters, digits and _ . + -, not starting with a digit or "
                 "one of . + -)")


def usable_run_name(name: str) -> str:
    """``name`` made a run name: other characters replaced by ``_``."""
    usable = re.sub(r"[^A-Za-z0-9_.+-]", "_", name.strip())
    return usable if _RUN_NAME.fullmatch(usable) else f"run_{usable}"


def check_run_name(name: str, where: str) -> None:
    """A run name given directly (``--label``) follows the ``NAME=PATH`` rule."""
    if not _RUN_NAME.fullmatch(name):
        raise AnalysisInputError(f"{where} {name!r} {RUN_NAME_RULE}; write e.g. "
                                 f"{usable_run_name(name)}")


def load_runs(paths: Iterable[str | Path], *, one_per_entry: bool = True,
              labels: Sequence[str | None] | None = None) -> list[Run]:
    """Load every run under ``paths``; ``NAME=PATH`` (or ``labels``, in order) names a run.

    With ``one_per_entry`` (reference and ``--runs``), an entry holding several runs is an
    error that lists them: silently taking the first would compare the wrong run. Unnamed
    runs get :func:`short_label`; two unnamed runs with one label are told apart by ``#2``.
    """
    runs = []
    paths = list(paths)
    labels = list(labels) if labels is not None else [None] * len(paths)
    if len(labels) != len(paths):
        raise AnalysisInputError(f"{len(labels)} labels for {len(paths)} runs; give one label "
                                 "per run, in order")
    names: set[str] = set()
    for raw, given in zip(paths, labels, strict=True):
        name, path = split_run_argument(raw)
        name = given or name
        names |= {name} if name else set()
        files = find_results([path])
        if one_per_entry and len(files) > 1:
            listed = "\n  ".join(str(f) for f in files)
            raise AnalysisInputError(
                f"{raw} holds {len(files)} runs:\n  {listed}\npass one results_*.json file per "
                "run (a folder only where it holds one run)")
        for index, results_path in enumerate(files):
            label = name if name and len(files) == 1 else f"{name}#{index}" if name else None
            runs.append(load_run(results_path, label))
    named = [r.run_id for r in runs if r.run_id in names]
    if len(set(named)) != len(named):
        raise AnalysisInputError(f"two runs share a name ({named}); give each its own NAME=PATH")
    return distinct_labels(runs)
