"""The runs beside the reference, apart from their answers: settings and costs, card differences.

One row per run (its settings, item count, energy and runtime ratios against the reference)
and one per run and task (the disclosure-card axes that differ from the reference's card).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from lm_eval_ext.analysis.errors import DegenerateDataWarning
from lm_eval_ext.analysis.loader import Run
from lm_eval_ext.cards import describe_difference, differing_axes, differing_factors


def energy_comparability(reference: dict[str, Any], run: dict[str, Any]) -> str | None:
    """Why two runs' joules cannot be compared (None when they can).

    A ratio across energy sources (NVML board energy vs RAPL package energy) or across GPUs
    (different UUIDs: other silicon, other idle power) measures the hardware, not the change.
    """
    if reference.get("energy_source") != run.get("energy_source"):
        return (f"different energy sources ({reference.get('energy_source')} vs "
                f"{run.get('energy_source')})")
    if (reference.get("gpu_uuids") or "") != (run.get("gpu_uuids") or ""):
        return f"different GPUs ({reference.get('gpu_uuids')} vs {run.get('gpu_uuids')})"
    return None


def run_table(reference: Run, runs: list[Run]) -> pd.DataFrame:
    """One row per run, the reference first: its settings, item count and cost ratios."""
    table = pd.DataFrame([{**r.info, "is_reference": r is reference, "n_items": len(r.items)}
                          for r in [reference, *runs]]).drop(columns=["task_settings"])
    ref = table.iloc[0]
    notes = [energy_comparability(reference.info, r.info) for r in [reference, *runs]]
    table["energy_ratio_note"] = [n or "" for n in notes]
    for column, ratio in (("energy_joules", "energy_ratio"),
                          ("inference_seconds", "runtime_ratio")):
        values = pd.to_numeric(table[column], errors="coerce")
        table[ratio] = values / values.iloc[0] if pd.notna(ref[column]) and ref[column] else np.nan
    refused = np.array([n is not None for n in notes])
    if refused.any():
        warnings.warn("energy ratio not reported for " + "; ".join(
            f"{run_id}: {note}" for run_id, note in zip(table["run"], notes, strict=True) if note),
            DegenerateDataWarning, stacklevel=2)
        table.loc[refused, "energy_ratio"] = np.nan
    table["energy_saving_pct"] = 100 * (1 - table["energy_ratio"])
    table["runtime_saving_pct"] = 100 * (1 - table["runtime_ratio"])
    table["joules_per_item"] = pd.to_numeric(table["energy_joules"], errors="coerce") / table["n_items"]
    return table


def card_differences(reference: Run, runs: list[Run]) -> pd.DataFrame:
    """Per run and task: the card axes that differ from the reference's card.

    Tasks are matched by name, or by position for single-task runs (a subset task against the
    full instrument), so a comparison that changes two things at once shows both.
    """
    rows = []
    ref_cards = list(reference.cards.items())
    for run in runs:
        for position, (task, card) in enumerate(run.cards.items()):
            ref = reference.cards.get(task) or (ref_cards[position][1]
                                                 if position < len(ref_cards) else {})
            factors = differing_factors(ref, card)
            rows.append({"run": run.run_id, "task": task, "n_factors": len(factors),
                         "factors": ",".join(factors),
                         "axes": ",".join(differing_axes(ref, card)),
                         "differences": describe_difference(ref, card)})
    return pd.DataFrame(rows, columns=["run", "task", "n_factors", "factors", "axes",
                                       "differences"])

