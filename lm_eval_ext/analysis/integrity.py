"""Do a run's samples belong to its results file? Checked before anything reads them.

lm-eval writes a run as ``results_<stamp>.json`` plus one ``samples_<task>_<stamp>.jsonl`` per
task. Every reader (``analyze``, ``mde``, ``compare-harness``, ``judge``, ``recommend``'s pilots,
``sequential``, campaigns) loads runs through :mod:`.loader`, which calls :func:`check_samples`
on each task's lines:

* each (doc_id, filter) once: a repeated line names its line number; as many lines as the
  results file's ``n-samples`` (per filter);
* the lines are the task's: every line logs the task's metrics (a line of another task is
  named);
* each line's own hashes (lm-eval's ``doc_hash``, ``prompt_hash``, ``target_hash``) match its
  ``doc``, prompt and ``target`` (lm-eval's recipe, checked on real runs): an edited line is
  named;
* lm-eval's ``task_hashes`` (a hash over every line's three hashes, in order) matches: lines of
  another subset, or reordered, are caught;
* the answers (``resps``) are the ones the metered model recorded giving
  (:mod:`lm_eval_ext.answers`, ``config.responses``): a bf16 run's lines under an fp32 run's
  results file are caught even where every aggregate agrees;
* the aggregate metrics the results report are what the lines give: every ``mean`` metric of the
  task's ``metric_list`` recomputed from the lines (and, through :func:`check_item_metrics`,
  every metric the analysis recomputes from the items, e.g. BBQ's bias scores): lines of another
  run of the same items (a bf16 line in an fp32 file) change them.

The loader fingerprints each file it reads (SHA-256, for ``runs.csv``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.answers import CONFIG_KEY, samples_fingerprint

#: relative tolerance of a recomputed aggregate (lm-eval sums floats in another order)
TOLERANCE = 1e-9


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _mixed(samples_file: Path, what: str) -> AnalysisInputError:
    return AnalysisInputError(
        f"{samples_file}: {what}; the samples file is not the one its results file was written "
        "with (lines cut, edited or mixed from another run): rerun the evaluation with "
        "--log_samples, or pass the run's own files")


def line_hashes(doc: Any, prompt: Any, target: Any) -> dict[str, str]:
    """lm-eval's three hashes of a samples line (``evaluator.evaluate``'s recipe).

    Every real lm-eval run the tests load is checked with it.
    """
    return {"doc_hash": _hash(json.dumps(doc, indent=2, ensure_ascii=False, default=str)),
            "prompt_hash": _hash(str(prompt)), "target_hash": _hash(str(target))}


def task_hash(samples: Sequence[Mapping[str, Any]]) -> str:
    """lm-eval's ``task_hashes`` entry: one hash over every line's three, in order."""
    return _hash("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in samples))


def _line_hashes_agree(sample: Mapping[str, Any]) -> bool:
    """Whether a line's logged hashes match its own doc, prompt and target (when logged)."""
    if not {"doc_hash", "prompt_hash", "target_hash"} <= set(sample):
        return True
    try:
        prompt = sample["arguments"][0][0]
    except (KeyError, IndexError, TypeError):
        return True
    if isinstance(prompt, dict):  # lm-eval logs some arguments as {"arg_0": ...}
        prompt = next(iter(prompt.values()), "")
    expected = line_hashes(sample.get("doc"), prompt, sample.get("target"))
    return all(sample[key] == value for key, value in expected.items())


def check_samples(results: Mapping[str, Any], task: str, samples: Sequence[Mapping[str, Any]],
                  samples_file: Path) -> None:
    """Raise one clear error where ``samples`` are not the lines ``results`` was made from."""
    seen: dict[tuple[Any, Any], int] = {}
    for line, sample in enumerate(samples, start=1):
        if "doc_id" not in sample:
            raise _mixed(samples_file, f"line {line} has no doc_id (every line lm-eval writes "
                                       "has one)")
        key = (sample.get("doc_id"), sample.get("filter"))
        if key in seen:
            raise _mixed(samples_file, f"line {line} repeats doc_id {key[0]} of line "
                                       f"{seen[key]} (a duplicated line)")
        seen[key] = line
    expected = ((results.get("n-samples") or {}).get(task) or {}).get("effective")
    reported = (results.get("results") or {}).get(task) or {}
    if expected == 0 and samples and reported.get("sample_len") == 0 and not any(
            "," in str(key) for key in reported):
        raise AnalysisInputError(
            f"{samples_file}: the run was made with --predict_only (its results file reports no "
            "metric and 0 scored samples), so its answers were never scored; analyze compares "
            "scored answers: rerun the evaluation without --predict_only (with --log_samples)")
    filters = len({s.get("filter") for s in samples})
    if expected is not None and len(samples) != int(expected) * filters:
        raise AnalysisInputError(
            f"{samples_file} holds {len(samples)} samples but its results file reports "
            f"{expected} (n-samples.effective): the file was cut or mixed with another run. "
            "Rerun the evaluation with --log_samples")
    config = (results.get("configs") or {}).get(task) or {}
    names = [m.get("metric") for m in config.get("metric_list") or [] if isinstance(m, dict)]
    for line, sample in enumerate(samples, start=1):
        logged = sample.get("metrics")
        if names and logged is not None and sorted(logged) != sorted(names):
            raise _mixed(samples_file, f"line {line} logs the metrics {', '.join(logged)}, not "
                                       f"{task}'s ({', '.join(names)}): a line of another task")
    bad = next((n for n, s in enumerate(samples, 1) if not _line_hashes_agree(s)), None)
    if bad is not None:
        raise _mixed(samples_file, f"line {bad}'s hashes do not match its own doc, prompt or "
                                   "target (an edited line)")
    stored = (results.get("task_hashes") or {}).get(task)
    if stored and all("doc_hash" in s for s in samples):
        if task_hash(samples) != stored:
            raise _mixed(samples_file, "its items, prompts or their order differ from those the "
                                       "results file hashed (task_hashes)")
    _check_means(results, task, config, samples, samples_file)
    _check_answers(results, task, samples, samples_file)
    _check_numbers(config, samples, samples_file)


def _check_numbers(config: Mapping[str, Any], samples: Sequence[Mapping[str, Any]],
                   samples_file: Path) -> None:
    """Log-likelihood answers are numbers: a NaN one (an overflow, e.g. fp16) chose nothing."""
    if config.get("output_type") not in ("multiple_choice", "loglikelihood"):
        return
    undefined = [line for line, sample in enumerate(samples, start=1)
                 if any(_is_nan(entry) for entry in sample.get("filtered_resps") or [])]
    if undefined:
        first = samples[undefined[0] - 1]
        raise AnalysisInputError(
            f"{samples_file}: {len(undefined)} of {len(samples)} items have a NaN "
            f"log-likelihood (first: line {undefined[0]}, doc_id {first.get('doc_id')}): the "
            "model's numbers overflowed (e.g. precision=fp16) and the argmax over NaN picked "
            "an answer no model gave; rerun that run at precision=bf16 or fp32")


def _is_nan(entry: Any) -> bool:
    value = entry[0] if isinstance(entry, (list, tuple)) and entry else entry
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def _check_answers(results: Mapping[str, Any], task: str, samples: Sequence[Mapping[str, Any]],
                   samples_file: Path) -> None:
    """The answers in the lines are the ones the model recorded (``config.responses``).

    Only where the model saw every answer (the counts agree): answers from lm-eval's request
    cache, or another rank's share of a data-parallel run, never reached it. A run of selected
    items (``--samples``) recorded them by position (:func:`samples_fingerprint`).
    """
    recorded = ((results.get("config") or {}).get(CONFIG_KEY) or {}).get(task)
    if not isinstance(recorded, Mapping):
        return
    found = samples_fingerprint(samples)
    if found["responses"] == recorded.get("responses") and recorded.get("sha256") not in (
            found["sha256"], samples_fingerprint(samples, by_position=True)["sha256"]):
        raise _mixed(samples_file, "its answers are not the ones the model gave in the run "
                                   "that wrote the results file (config.responses)")


def _check_means(results: Mapping[str, Any], task: str, config: Mapping[str, Any],
                 samples: Sequence[Mapping[str, Any]], samples_file: Path) -> None:
    reported = (results.get("results") or {}).get(task) or {}
    for spec in config.get("metric_list") or []:
        if not isinstance(spec, dict) or spec.get("aggregation") != "mean":
            continue
        metric = spec.get("metric")
        by_filter: dict[str, list[float]] = {}
        for sample in samples:
            value = sample.get(metric)
            if isinstance(value, bool | int | float):
                by_filter.setdefault(str(sample.get("filter", "none")), []).append(float(value))
        for filter_key, values in by_filter.items():
            expected = reported.get(f"{metric},{filter_key}")
            if not isinstance(expected, int | float) or len(values) != len(samples) // max(
                    len(by_filter), 1):
                continue
            _compare(metric, math.fsum(values) / len(values), expected, samples_file)


def check_item_metrics(results: Mapping[str, Any], task: str,
                       recomputed: Mapping[str, float], samples_file: Path) -> None:
    """Metrics recomputed from the items against the results file's ``METRIC,none`` values."""
    reported = (results.get("results") or {}).get(task) or {}
    for metric, value in recomputed.items():
        expected = reported.get(f"{metric},none")
        if (isinstance(expected, int | float) and math.isfinite(float(expected))
                and math.isfinite(value)):
            _compare(metric, value, expected, samples_file)


def _compare(metric: str, value: float, expected: float, samples_file: Path) -> None:
    """A metric recomputed from the lines against the results file's, within the tolerance."""
    if not math.isclose(value, float(expected), rel_tol=TOLERANCE, abs_tol=TOLERANCE):
        raise _mixed(samples_file, f"its lines give {metric} = {value:.6g} but the results "
                                   f"file reports {float(expected):.6g}")
