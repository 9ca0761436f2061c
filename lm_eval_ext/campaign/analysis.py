"""After the cells: the campaign's comparisons through ``analyze``, and the subset-size summary.

Outputs under ``OUT/analysis/``: ``<model>/<comparison>/`` (one ``analyze`` report each: the
reference condition against the others, paired per task, on shared items when the tasks
differ) and ``<model>/subsets.csv`` + ``subsets.json`` (each subset run's metrics against the
reference's full-set estimate, energy against items with R^2, and the spread of the
memberships at the smallest size).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lm_eval_ext.campaign.spec import CampaignSpec, Cell, Comparison
from lm_eval_ext.campaign.store import CampaignFolder
from lm_eval_ext.errors import ConfigError


@dataclass(frozen=True)
class FinishedCells:
    """Every finished cell's record, read once from the campaign folder and passed down."""

    root: Path
    records: dict[str, dict[str, Any]]  # cell id -> cell.json

    @classmethod
    def read(cls, spec: CampaignSpec, folder: CampaignFolder) -> FinishedCells:
        """The records of the spec's cells that are done (one read of each cell.json)."""
        found = {c.cell_id: folder.record(c) for c in spec.cells}
        return cls(folder.root, {k: v for k, v in found.items() if v is not None})

    def done(self, cell: Cell) -> bool:  # noqa: D102
        return cell.cell_id in self.records

    def record(self, cell: Cell) -> dict[str, Any]:
        """A finished cell's record (an error naming the cell where it is not done)."""
        if cell.cell_id not in self.records:
            raise ConfigError(f"campaign analysis: cell {cell.cell_id} is not done; run the "
                              "campaign (or its missing shards) first")
        return self.records[cell.cell_id]

    def results(self, cell: Cell) -> str:
        """The lm-eval results file of a finished cell."""
        return str(self.root / self.record(cell)["output_path"])


def _pairs(spec: CampaignSpec, model: str, comparison: Comparison) -> list[tuple[Cell, list[Cell]]]:
    """(reference cell, run cells) per reference task: same task, else the run's only task."""
    pairs = []
    for ref in spec.cell(model, comparison.reference):
        runs = []
        for condition in comparison.runs:
            cells = spec.cell(model, condition)
            same = [c for c in cells if c.task == ref.task]
            runs += same or (cells if len(cells) == 1 else [])
        if runs:
            pairs.append((ref, runs))
    return pairs


def run_comparisons(spec: CampaignSpec, folder: CampaignFolder, *, n_resamples: int,
                    mc_draws: int, seed: int, progress: bool) -> list[Path]:
    """``analyze`` for every comparison of every model; the report paths."""
    from lm_eval_ext.analysis.report import analyze_to_folder

    finished = FinishedCells.read(spec, folder)
    reports = []
    for model in dict.fromkeys(c.model_label for c in spec.cells):
        for comparison in spec.comparisons:
            for ref, runs in _pairs(spec, model, comparison):
                missing = [c.cell_id for c in (ref, *runs) if not finished.done(c)]
                if missing:
                    print(f"[campaign] analysis {model}/{comparison.name} skipped: cells not "
                          f"done: {', '.join(missing)}", flush=True)
                    continue
                out = finished.root / "analysis" / model / comparison.name
                if len({c.task for c in spec.cell(model, comparison.reference)}) > 1:
                    out = out / ref.task
                _, paths = analyze_to_folder(
                    f"{ref.condition}={finished.results(ref)}",
                    [f"{c.condition}={finished.results(c)}" for c in runs], out,
                    overwrite=True, intersection=any(c.task != ref.task for c in runs),
                    n_resamples=n_resamples, mc_draws=mc_draws, seed=seed, progress=progress)
                reports.append(paths["report_md"])
        if spec.subsets is not None and finished.done(spec.cell(model, spec.subsets.reference)[0]):
            reports.append(subset_summary(spec, finished, model))
    return reports


def _fit(x: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    from scipy import stats

    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 3 or np.ptp(x[keep]) == 0:
        return {"slope": None, "intercept": None, "r_squared": None, "n": int(keep.sum())}
    fit = stats.linregress(x[keep], y[keep])
    return {"slope": float(fit.slope), "intercept": float(fit.intercept),
            "r_squared": float(fit.rvalue ** 2), "n": int(keep.sum())}


def subset_summary(spec: CampaignSpec, finished: FinishedCells, model: str) -> Path:
    """Per subset run: metrics, their difference from the reference, energy; fit and spread."""
    from lm_eval_ext.analysis.loader import load_run
    from lm_eval_ext.analysis.metrics import metrics_for

    if spec.subsets is None or not spec.cell(model, spec.subsets.reference):
        raise ConfigError(f"campaign analysis: {spec.name} has no subsets reference for "
                          f"{model}; add `subsets: {{reference: ..., runs: [...]}}`")
    ref_cell = spec.cell(model, spec.subsets.reference)[0]
    ref_run = load_run(Path(finished.results(ref_cell)), ref_cell.condition)
    specs = metrics_for(ref_run.items)
    ref_values = {m.name: m.compute(ref_run.items) for m in specs}
    ref_answers = ref_run.items.set_index("item_key")["answer"]
    rows = []
    subset_cells = [c for name in spec.subsets.runs for c in spec.cell(model, name)]
    missing = [c.cell_id for c in subset_cells if not finished.done(c)]
    for cell in [ref_cell, *[c for c in subset_cells if c.cell_id not in missing]]:
        run = load_run(Path(finished.results(cell)), cell.condition)
        record = finished.record(cell)
        answers = run.items.set_index("item_key")["answer"]
        shared = answers.index.intersection(ref_answers.index)
        row: dict[str, Any] = {
            "condition": cell.condition, "task": cell.task, "n_items": len(run.items),
            "energy_joules": record.get("energy_joules"),
            "energy_joules_idle_corrected": record.get("energy_joules_idle_corrected"),
            "inference_seconds": record.get("inference_seconds"),
            "answers_equal_reference": float((answers[shared] == ref_answers[shared]).mean()),
        }
        for metric in specs:
            value = metric.compute(run.items)
            row[metric.name] = value
            row[f"{metric.name}_minus_reference_pp"] = metric.scale * (value - ref_values[metric.name])
        rows.append(row)
    table = pd.DataFrame(rows)
    numeric = {c: pd.to_numeric(table[c], errors="coerce").to_numpy(float)
               for c in ("n_items", "energy_joules", "energy_joules_idle_corrected")}
    smallest = table[table["n_items"] == table["n_items"].min()]
    spread = {m.name: {"n_memberships": len(smallest),
                       "range_pp": m.scale * float(smallest[m.name].max() - smallest[m.name].min()),
                       "sd_pp": m.scale * float(smallest[m.name].std(ddof=1))
                       if len(smallest) > 1 else None}
              for m in specs}
    summary = {"reference": ref_cell.condition, "reference_values": ref_values,
               "energy_vs_items": _fit(numeric["n_items"], numeric["energy_joules"]),
               "idle_corrected_energy_vs_items": _fit(numeric["n_items"],
                                                      numeric["energy_joules_idle_corrected"]),
               "smallest_size": int(table["n_items"].min()), "spread_at_smallest": spread,
               "gpu_uuids": sorted({u for c in [ref_cell, *subset_cells] if finished.done(c)
                                    for u in finished.record(c).get("gpu_uuids") or []}),
               "missing_cells": missing}
    out = finished.root / "analysis" / model
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "subsets.csv", index=False)
    (out / "subsets.json").write_text(json.dumps(summary, indent=2, default=str) + "\n",
                                      encoding="utf-8")
    return out / "subsets.csv"


def run_grid_analysis(spec: CampaignSpec, folder: CampaignFolder, *, n_resamples: int,
                      mc_draws: int, seed: int, progress: bool) -> list[Path]:
    """``analyze --grid`` over every cell; the paired part compares the models in the first cell.

    Reference: the first model's first cell; runs: the other models on the same condition and
    task (the same items), so the report's paired deltas are model differences.
    """
    from lm_eval_ext.analysis.report import analyze_to_folder

    finished = FinishedCells.read(spec, folder)
    done = [c for c in spec.cells if finished.done(c)]
    first = done[0] if done else None
    others = [c for c in done if first and c.condition == first.condition
              and c.task == first.task and c.model_label != first.model_label]
    if not others:
        print("[grid] analysis skipped: no configuration has two models done yet", flush=True)
        return []
    _, paths = analyze_to_folder(
        f"{first.model_label}={finished.results(first)}",
        [f"{c.model_label}={finished.results(c)}" for c in others],
        finished.root / "analysis" / "grid", overwrite=True,
        grid=[finished.results(c) for c in done],
        n_resamples=n_resamples, mc_draws=mc_draws, seed=seed, progress=progress)
    return [paths["report_md"]]
