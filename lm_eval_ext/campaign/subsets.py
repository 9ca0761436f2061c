"""After the cells: the subset-size summary of a campaign with ``subsets``.

Outputs ``OUT/analysis/<model>/subsets.csv`` + ``subsets.json``: each subset run's metrics
against the reference's full-set estimate, energy against items with R^2, and the spread of
the memberships at the smallest size. A subset run that differs from the reference in more than
its items (``also_differs``: e.g. precision, where a condition lacks the reference's model
args) is listed under ``confounded_conditions``: its difference is not the subset's alone.

A cell whose answers were taken from its parent has derived energy (the parent's joules per
item x items): proportional to items by construction. The energy fit is over measured cells
only, and is reported as not measured (nulls and a note) when fewer than 3 are measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lm_eval_ext.campaign.spec import CampaignSpec
from lm_eval_ext.campaign.store import CampaignFolder
from lm_eval_ext.cards import differing_factors
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.metering.derived import DERIVED_FLAG


def summarize_subsets(spec: CampaignSpec, folder: CampaignFolder,
                      records: dict[str, dict[str, Any]]) -> list[Path]:
    """The subset summary of every model whose subsets reference is done.

    ``records``: the finished cells' records (:meth:`CampaignFolder.records`, read once).
    """
    if spec.subsets is None:
        return []
    results = folder.results(records)
    summaries = []
    for model in spec.model_labels:
        refs = spec.cell(model, spec.subsets.reference)
        if refs and refs[0].cell_id in records:
            summaries.append(subset_summary(spec, records, results, model,
                                            folder.root / "analysis" / model))
    return summaries


def energy_derived(record: dict[str, Any]) -> bool:
    """Whether a cell record's energy was derived from a parent cell (not measured)."""
    return bool(record.get("derived_from")) or DERIVED_FLAG in (record.get("energy_flags") or [])


def _fit(x: np.ndarray, y: np.ndarray, measured: np.ndarray) -> dict[str, Any]:
    """Least squares of ``y`` on ``x`` over the measured, finite points (at least 3)."""
    from scipy import stats

    keep = np.isfinite(x) & np.isfinite(y) & measured
    n = int(keep.sum())
    if n < 3 or np.ptp(x[keep]) == 0:
        return {"slope": None, "intercept": None, "r_squared": None, "n": n,
                "note": f"not measured: {n} cell(s) with measured energy, a fit needs 3 with "
                        f"different sizes{_why_unmeasured(y, measured, n)}"}
    fit = stats.linregress(x[keep], y[keep])
    return {"slope": float(fit.slope), "intercept": float(fit.intercept),
            "r_squared": float(fit.rvalue ** 2), "n": n, "note": None}


def _why_unmeasured(y: np.ndarray, measured: np.ndarray, n: int) -> str:
    """Why cells are left out of the fit: derived (the fix: --measure-all), or no reading."""
    derived, unread = int((~measured).sum()), int((measured & ~np.isfinite(y)).sum())
    reasons = [*([f"{derived} derived: proportional by construction (run the campaign with "
                  "--measure-all to measure every cell)"] if derived else []),
               *([f"{unread} with no energy reading (this machine has no counter the run "
                  "could read: docs/energy.md)"] if unread else [])]
    if reasons:
        return f" ({'; '.join(reasons)})"
    return " (they are all of one size)" if n >= 3 else ""


def subset_summary(spec: CampaignSpec, records: dict[str, dict[str, Any]],
                   results: dict[str, str], model: str, out: Path) -> Path:
    """Per subset run: metrics, their difference from the reference, energy; fit and spread.

    ``records`` and ``results``: the finished cells' records and results files, by cell id.
    """
    from lm_eval_ext.analysis.loader import load_run
    from lm_eval_ext.analysis.metrics import metrics_for

    if spec.subsets is None or not spec.cell(model, spec.subsets.reference):
        raise ConfigError(f"campaign analysis: {spec.name} has no subsets reference for "
                          f"{model}; add `subsets: {{reference: ..., runs: [...]}}`")
    ref_cell = spec.cell(model, spec.subsets.reference)[0]
    if ref_cell.cell_id not in records:
        raise ConfigError(f"campaign analysis: cell {ref_cell.cell_id} is not done; run the "
                          "campaign (or its missing shards) first")
    ref_run = load_run(Path(results[ref_cell.cell_id]), ref_cell.condition)
    ref_card = ref_run.cards.get(ref_cell.task, {})
    specs = metrics_for(ref_run.items)
    ref_values = {m.name: m.compute(ref_run.items) for m in specs}
    ref_answers = ref_run.items.set_index("item_key")["answer"]
    rows = []
    subset_cells = [c for name in spec.subsets.runs for c in spec.cell(model, name)]
    missing = [c.cell_id for c in subset_cells if c.cell_id not in records]
    for cell in [ref_cell, *[c for c in subset_cells if c.cell_id not in missing]]:
        run = load_run(Path(results[cell.cell_id]), cell.condition)
        record = records[cell.cell_id]
        answers = run.items.set_index("item_key")["answer"]
        shared = answers.index.intersection(ref_answers.index)
        row: dict[str, Any] = {
            "condition": cell.condition, "task": cell.task, "n_items": len(run.items),
            "energy_joules": record.get("energy_joules"),
            "energy_joules_idle_corrected": record.get("energy_joules_idle_corrected"),
            "energy_derived": energy_derived(record),
            "derived_from": record.get("derived_from"),
            "inference_seconds": record.get("inference_seconds"),
            "answers_equal_reference": float((answers[shared] == ref_answers[shared]).mean()),
            # a subset run differs from its reference in its items only; anything else too
            # (precision: a condition without the reference's model args) confounds the size
            "also_differs": ", ".join(f for f in differing_factors(
                ref_card, run.cards.get(cell.task, {})) if f != "items"),
        }
        for metric in specs:
            value = metric.compute(run.items)
            row[metric.name] = value
            row[f"{metric.name}_minus_reference_pp"] = metric.scale * (value - ref_values[metric.name])
        rows.append(row)
    table = pd.DataFrame(rows)
    numeric = {c: pd.to_numeric(table[c], errors="coerce").to_numpy(float)
               for c in ("n_items", "energy_joules", "energy_joules_idle_corrected")}
    measured = ~table["energy_derived"].to_numpy(bool)
    smallest = table[table["n_items"] == table["n_items"].min()]
    spread = {m.name: {"n_memberships": len(smallest),
                       "range_pp": m.scale * float(smallest[m.name].max() - smallest[m.name].min()),
                       "sd_pp": m.scale * float(smallest[m.name].std(ddof=1))
                       if len(smallest) > 1 else None}
              for m in specs}
    summary = {"reference": ref_cell.condition, "reference_values": ref_values,
               "energy_vs_items": _fit(numeric["n_items"], numeric["energy_joules"], measured),
               "idle_corrected_energy_vs_items": _fit(
                   numeric["n_items"], numeric["energy_joules_idle_corrected"], measured),
               "derived_energy_conditions": table.loc[~measured, "condition"].tolist(),
               "confounded_conditions": {row["condition"]: row["also_differs"] for row in rows
                                         if row["also_differs"]},
               "smallest_size": int(table["n_items"].min()), "spread_at_smallest": spread,
               "gpu_uuids": sorted({u for c in [ref_cell, *subset_cells] if c.cell_id in records
                                    for u in records[c.cell_id].get("gpu_uuids") or []}),
               "missing_cells": missing}
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "subsets.csv", index=False)
    (out / "subsets.json").write_text(json.dumps(summary, indent=2, default=str) + "\n",
                                      encoding="utf-8")
    return out / "subsets.csv"


