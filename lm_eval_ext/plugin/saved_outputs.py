"""lm-eval's results and samples files, checked as soon as lm-eval has written them.

lm-eval's ``EvaluationTracker`` catches every error while it saves a run (a path it cannot
create, a full disk, a quota) and only logs a warning, so the command exits 0 with its results
lost or its samples file cut. :func:`check_saved_results` and :func:`check_saved_samples`
wrap its two public save methods: after each, the file it was asked to write must exist and be
whole (the results parse as JSON; the samples file holds one complete line per sample).
Otherwise :class:`OutputsLost` says what was lost and why, and the command exits non-zero (1:
the machine failed, not the command).
"""

from __future__ import annotations

import functools
import json
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lm_eval_ext.errors import EnvironmentProblem, LmEvalExtError
from lm_eval_ext.files import path_error, probe_writable
from lm_eval_ext.plugin.wrapping import wrap_once


class OutputsLost(EnvironmentProblem):
    """A results or samples file lm-eval was asked to write is missing or incomplete."""


def _folder(tracker: Any) -> Path:
    """The folder lm-eval writes a run's files into (its own rule, from public attributes)."""
    path = Path(tracker.output_path)
    if path.suffix == ".json":
        return path.parent
    return path / str(tracker.general_config_tracker.model_name_sanitized)


def _why(folder: Path, size: int = 0) -> tuple[str, str]:
    """The reason for a failed write and its fix (``size``: the bytes the cut file holds).

    The file size limit (``ulimit -f``) where the file reached it, else the file system's
    reason, found by writing there.
    """
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and size >= limit:
        return (f"the file size limit of {limit:,} bytes was reached (ulimit -f)",
                "raise it (ulimit -f unlimited) and rerun")
    try:
        probe_writable(folder)
    except LmEvalExtError as exc:
        return getattr(exc, "cause", str(exc)), getattr(exc, "fix", "rerun")
    return "lm-eval could not write it (its log says why at INFO level)", "rerun"


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def results_file(tracker: Any) -> Path | None:
    """The results file lm-eval's last save named, or None when it failed before naming one."""
    date_id = getattr(tracker, "date_id", None)
    if date_id is None:
        return None
    path = Path(tracker.output_path)
    if path.suffix == ".json":
        return path.with_name(f"{path.stem}_{date_id}.json")
    return _folder(tracker) / f"results_{date_id}.json"


def check_results(tracker: Any) -> None:
    """The results file of the save just made exists and parses (else :class:`OutputsLost`)."""
    path = results_file(tracker)
    problem, named = None, None
    try:
        if path is None or not path.is_file():
            problem = "was not written"
    except OSError as exc:  # the name itself fails (e.g. too long, through the Python API)
        problem, named = "was not written", path_error(path, exc)
    if problem is None:
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            problem = f"was cut at {_size(path):,} bytes and is removed"
    if problem:
        where = path or _folder(tracker)
        cause, fix = ((named.cause, named.fix) if named is not None
                      else _why(where.parent, _size(path)))
        if path is not None and named is None:
            path.unlink(missing_ok=True)
        raise OutputsLost(f"the results file {where} {problem} ({cause}): nothing of this run "
                          f"was kept; {fix}")


def check_samples(tracker: Any, task: str, expected: int) -> None:
    """The samples file of ``task`` holds ``expected`` complete lines (else :class:`OutputsLost`)."""
    path = _folder(tracker) / f"samples_{task}_{tracker.date_id}.jsonl"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        text = None
    lines = text.count("\n") if text is not None else 0
    if text is not None and lines == expected and (not text or text.endswith("\n")):
        return
    state = ("was not written" if text is None else
             f"was cut at {len(text.encode('utf-8')):,} bytes ({lines} of {expected} lines)")
    cause, fix = _why(path.parent, _size(path))
    raise OutputsLost(f"the samples file {path} {state} ({cause}): the run's per-item outputs "
                      f"are incomplete, so it cannot be analysed; {fix}")


@wrap_once("lm_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_aggregated")
def check_saved_results(save: Callable) -> Callable:
    """``EvaluationTracker.save_results_aggregated`` checks the results file it wrote."""
    @functools.wraps(save)
    def save_results_aggregated(self, results: dict, samples: dict | None = None) -> None:
        save(self, results, samples)
        if self.output_path:
            check_results(self)
    return save_results_aggregated


@wrap_once("lm_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_samples")
def check_saved_samples(save: Callable) -> Callable:
    """``EvaluationTracker.save_results_samples`` checks the samples file it wrote."""
    @functools.wraps(save)
    def save_results_samples(self, task_name: str, samples: Any) -> None:
        save(self, task_name, samples)
        if self.output_path:
            check_samples(self, task_name, len(samples))
    return save_results_samples
