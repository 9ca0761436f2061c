"""After the cells: the campaign's comparisons (or its grid) through ``analyze``.

Outputs under ``OUT/analysis/``: ``<model>/<comparison>/`` (one ``analyze`` report each: the
reference condition against the others, paired per task, on shared items when the tasks
differ), or ``grid/``. The subset-size summary: :mod:`~lm_eval_ext.campaign.subsets`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lm_eval_ext.campaign.spec import CampaignSpec
from lm_eval_ext.campaign.store import CampaignFolder


def run_comparisons(spec: CampaignSpec, folder: CampaignFolder,
                    records: Mapping[str, Mapping[str, Any]], *, n_resamples: int,
                    mc_draws: int, seed: int, progress: bool) -> list[Path]:
    """``analyze`` for every comparison of every model whose cells are done; the report paths.

    ``records``: the finished cells' records (:meth:`CampaignFolder.records`, read once); the
    jobs are planned from them in one pass (:meth:`CampaignSpec.analysis_jobs`).
    """
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.analysis.report import analyze_to_folder

    jobs, skipped = spec.analysis_jobs(folder.results(records))
    for line in skipped:
        print(f"[campaign] {line}", flush=True)
    reports, failed = [], []
    for job in jobs:
        try:
            result, paths = analyze_to_folder(
                job.reference, list(job.runs), folder.root / job.out, overwrite=True,
                intersection=job.intersection, n_resamples=n_resamples, mc_draws=mc_draws,
                seed=seed, progress=progress)
        except AnalysisInputError as exc:  # the other comparisons and summaries go on
            failed.append(f"{job.out}: {exc}")
            continue
        if any(result.dropped.values()):  # conditions of other limits or subsets
            print(f"[campaign] {job.out}: compared on the {result.n_items} items every run "
                  f"holds (left out: {result.dropped})", flush=True)
        reports.append(paths["report_md"])
    if failed:
        raise ComparisonsFailed(reports, failed)
    return reports


class ComparisonsFailed(Exception):
    """Comparisons that could not be analysed (``failed``), after the others (``reports``)."""

    def __init__(self, reports: list[Path], failed: list[str]):
        super().__init__("; ".join(failed))
        self.reports, self.failed = reports, failed


def run_grid_analysis(spec: CampaignSpec, folder: CampaignFolder,
                      records: Mapping[str, Mapping[str, Any]], *, n_resamples: int,
                      mc_draws: int, seed: int, progress: bool) -> list[Path]:
    """``analyze --grid`` over every cell; the paired part compares the models in the first cell.

    Reference: the first model's first cell; runs: the other models on the same condition and
    task (the same items), so the report's paired deltas are model differences.
    """
    from lm_eval_ext.analysis.report import analyze_to_folder

    results = folder.results(records)
    done = [c for c in spec.cells if c.cell_id in results]
    first = done[0] if done else None
    others = [c for c in done if first and c.condition == first.condition
              and c.task == first.task and c.model_label != first.model_label]
    if not others:
        print("[grid] analysis skipped: no configuration has two models done yet", flush=True)
        return []
    _, paths = analyze_to_folder(
        f"{first.model_label}={results[first.cell_id]}",
        [f"{c.model_label}={results[c.cell_id]}" for c in others],
        folder.root / "analysis" / "grid", overwrite=True,
        grid=[results[c.cell_id] for c in done],
        n_resamples=n_resamples, mc_draws=mc_draws, seed=seed, progress=progress)
    return [paths["report_md"]]
