"""Align the items of runs by their stable item key."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.loader import Run


@dataclass(frozen=True)
class Alignment:
    """Item keys shared by the reference and every run, in reference order."""

    keys: pd.Index
    reference_items: int
    dropped: dict[str, int]  # run id -> items of that run (or reference) left out

    @property
    def n(self) -> int:  # noqa: D102
        return len(self.keys)


def align(reference: Run, runs: list[Run], *, intersection: bool = False) -> Alignment:
    """Check that all runs evaluated the same items (or take their intersection).

    Raises:
        AnalysisInputError: Item sets differ and ``intersection`` is False, or nothing is shared.
    """
    ref_keys = pd.Index(reference.items["item_key"])
    shared = ref_keys
    for run in runs:
        keys = pd.Index(run.items["item_key"])
        if not intersection and (len(keys) != len(ref_keys) or not keys.isin(ref_keys).all()):
            only_ref = len(ref_keys.difference(keys))
            only_run = len(keys.difference(ref_keys))
            shared_now = len(ref_keys) - only_ref
            raise AnalysisInputError(
                f"run {run.run_id} ({run.info['tasks']}, {len(keys)} items) and the reference "
                f"{reference.run_id} ({reference.info['tasks']}, {len(ref_keys)} items) evaluated "
                f"different items ({only_ref} only in the reference, {only_run} only in the run). "
                + (f"Evaluate the same task/--limit, or pass --intersection to compare the "
                   f"{shared_now} shared items." if shared_now else
                   f"They share no item, so no option can pair them: "
                   f"{_apart_fix(reference, runs)}."))
        shared = shared[shared.isin(keys)]
    if len(shared) == 0:
        tasks = {r.run_id: r.info["tasks"] for r in [reference, *runs]}
        one = len(_benchmarks(reference, runs)) == 1
        raise AnalysisInputError(
            f"the runs share no items (tasks: {tasks}); " + (
                "they are of one benchmark, but their items (each task's membership and --limit "
                "slice) do not overlap: " if one else "") + _apart_fix(reference, runs))
    dropped = {reference.run_id: len(ref_keys) - len(shared)}
    dropped.update({r.run_id: len(r.items) - len(shared) for r in runs})
    return Alignment(shared, len(ref_keys), dropped)


def _benchmarks(reference: Run, runs: list[Run]) -> set[str]:
    """The benchmarks of the runs' items (an item key starts with its benchmark)."""
    return {str(k).split(":")[0] for r in [reference, *runs] for k in r.items["item_key"]}


def _apart_fix(reference: Run, runs: list[Run]) -> str:
    """What to do about runs that share no item: one benchmark's, or several."""
    if len(_benchmarks(reference, runs)) == 1:
        return ("evaluate them on shared items (one task, or a --limit or --samples that "
                "reaches the same items)")
    return "compare runs of the same benchmark"


def aligned_items(run: Run, alignment: Alignment) -> pd.DataFrame:
    """A run's items restricted to and ordered by the aligned keys."""
    return run.items.set_index("item_key").loc[alignment.keys].reset_index()


def refuse_repeated_runs(runs: Sequence[Run]) -> None:
    """One error where two of the runs are one run (the same files, by their SHA-256)."""
    seen: dict[tuple[str, str], Run] = {}
    for run in runs:
        key = (run.info["results_sha256"], run.info["samples_sha256"])
        if key in seen:
            first = seen[key]
            same = ("the same folder" if first.results_path.resolve() == run.results_path.resolve()
                    else "copies of one run (identical results and samples files)")
            raise AnalysisInputError(
                f"runs {first.run_id} ({first.results_path}) and {run.run_id} "
                f"({run.results_path}) are {same}; a comparison needs two different runs")
        seen[key] = run


def how_runs_differ(reference: Run, run: Run) -> str | None:
    """What makes two runs not one paired design (tasks, scoring path), or None."""
    differences = [f"{key} {reference.info[key]} vs {run.info[key]}"
                   for key in ("tasks", "scoring_path") if reference.info[key] != run.info[key]]
    return "; ".join(differences) or None
