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
from lm_eval_ext.metering.meter import OTHER_GPU_PROCESSES, OTHER_PROCESSES
from lm_eval_ext.metering.modes import mode_difference
from lm_eval_ext.metering.uncertainty import Z95, ratio_interval, resolved

#: energy sources that measured nothing, as a note names them
UNMETERED = {None: "none, not a metered model",
             "unavailable": "none, no energy counter was readable"}


def energy_comparability(reference: dict[str, Any], run: dict[str, Any]) -> str | None:
    """Why two runs' joules cannot be compared (None when they can).

    A ratio across energy sources (NVML board energy vs RAPL package energy) or across GPUs
    (different UUIDs: other silicon, other idle power) measures the hardware, not the change.
    """
    sources = reference.get("energy_source"), run.get("energy_source")
    if sources[0] != sources[1]:
        if any(source in UNMETERED for source in sources):
            shown = [UNMETERED.get(source, source) for source in sources]
            return f"energy not measured (reference: {shown[0]}; this run: {shown[1]})"
        return f"different energy sources ({sources[0]} vs {sources[1]})"
    if (reference.get("gpu_uuids") or "") != (run.get("gpu_uuids") or ""):
        return f"different GPUs ({reference.get('gpu_uuids')} vs {run.get('gpu_uuids')})"
    return None


#: (value column, its SE column, ratio column, basis) of the cost ratios in ``runs.csv``
RATIOS = (("energy_joules", "energy_joules_se", "energy_ratio", "raw"),
          ("energy_joules_idle_corrected", "energy_joules_idle_corrected_se",
           "energy_ratio_idle_corrected", "idle-corrected"),
          ("inference_seconds", "inference_seconds_se", "runtime_ratio", "seconds"))


def _number(value: Any) -> float | None:
    number = pd.to_numeric(value, errors="coerce")
    return None if pd.isna(number) else float(number)


def _ratio_columns(table: pd.DataFrame, column: str, se_column: str, ratio: str) -> None:
    """``ratio`` = run / reference, and its 95% interval (log scale, independent runs)."""
    values = pd.to_numeric(table[column], errors="coerce")
    ref = values.iloc[0]
    table[ratio] = values / ref if pd.notna(ref) and ref else np.nan
    ses = table[se_column] if se_column in table else [None] * len(table)
    bounds = [ratio_interval(_number(v), _number(se), _number(ref), _number(ses.iloc[0]))
              if index else (None, None)
              for index, (v, se) in enumerate(zip(values, ses, strict=True))]
    table[f"{ratio}_ci_low"] = [np.nan if low is None else low for low, _ in bounds]
    table[f"{ratio}_ci_high"] = [np.nan if high is None else high for _, high in bounds]


def interval_note(reference: dict[str, Any], run: dict[str, Any]) -> str:
    """Why a run's ratios have no interval, mix execution modes or cover other item counts."""
    notes = []
    sides = (run, reference)
    if run.get("energy_derived") in (True, 1) or reference.get("energy_derived") in (True, 1):
        notes.append("derived energy (a parent run's joules per item): no interval of its own")
    elif any(_number(side.get("energy_joules")) is None for side in sides):
        notes.append("energy not measured (runtime only)")
    elif any(_number(side.get("energy_joules_se")) is None for side in sides):
        notes.append("no energy interval (a window of under 4 slices besides its first)")
    elif not all(resolved(_number(s.get("energy_joules")), _number(s.get("energy_joules_se")))
                 for s in sides):
        notes.append("no energy interval: a side's SE is over half its joules (not resolved)")
    if all(_number(s.get("inference_seconds")) is not None for s in sides) and not all(
            resolved(_number(s.get("inference_seconds")), _number(s.get("inference_seconds_se")))
            for s in sides):
        notes.append("no runtime interval: a side's seconds SE is missing or over half its "
                     "seconds (not resolved)")
    measured = all(_number(side.get("energy_joules")) is not None for side in sides)
    if measured and not all(resolved(_number(s.get("energy_joules_idle_corrected")),
                                     _number(s.get("energy_joules_idle_corrected_se")))
                            for s in sides):
        notes.append("no idle-corrected ratio: a side's idle-corrected energy is null (below "
                     "zero) or not resolved (its SE over half its value)")
    shared = [name for name, side in (("the reference", reference), ("this run", run))
              if _shared_machine(side)]
    if shared:
        notes.append(f"other processes loaded the machine during {' and '.join(shared)} "
                     f"(flag {OTHER_PROCESSES} or {OTHER_GPU_PROCESSES}): no interval, as the "
                     "runs' own slices do not cover that load; rerun on an idle machine")
    modes = mode_difference(reference.get("execution_mode"), run.get("execution_mode"))
    if modes:
        notes.append(modes + ": the ratio measures the mode as well as the change")
    items = _item_count_note(reference, run)
    if items:
        notes.append(items)
    return "; ".join(notes)


def _shared_machine(side: dict[str, Any]) -> bool:
    """Whether a run's metering flagged other processes' load in its windows."""
    flags = str(side.get("energy_flags") or "").split(",")
    return OTHER_PROCESSES in flags or OTHER_GPU_PROCESSES in flags


def _item_count_note(reference: dict[str, Any], run: dict[str, Any]) -> str | None:
    """Where the two runs scored different numbers of items, what their ratios of totals mean."""
    mine, theirs = _number(run.get("n_items")), _number(reference.get("n_items"))
    if mine is None or theirs is None or mine == theirs:
        return None
    return (f"{mine:g} items against the reference's {theirs:g}: the ratios compare totals, "
            "so they include the change in items; joules_per_item compares per item")


def cost_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """The reference-first ``table`` with every cost ratio, its interval and notes added.

    ``table`` holds one row per run with the fields of
    :func:`~lm_eval_ext.analysis.loader.run_info` (energy and seconds with their SEs,
    ``execution_mode``, ``energy_derived``) and ``n_items``; the first row is the reference.
    Each ratio (energy raw and idle-corrected, runtime) gets a 95% interval from the two runs'
    within-run standard errors (:mod:`lm_eval_ext.metering.uncertainty`); ``ratio_note`` says
    where there is none and whether the two runs ran in different execution modes.
    """
    table = table.reset_index(drop=True)
    for column, se_column, ratio, _ in RATIOS:
        _ratio_columns(table, column, se_column, ratio)
    rows = table.to_dict("records")
    unresolved = [not all(resolved(_number(side.get("energy_joules_idle_corrected")),
                                   _number(side.get("energy_joules_idle_corrected_se")))
                          for side in (rows[0], r)) for r in rows]
    table.loc[unresolved, "energy_ratio_idle_corrected"] = np.nan
    table.loc[0, "energy_ratio_idle_corrected"] = 1.0 if not unresolved[0] else np.nan
    shared = [_shared_machine(rows[0]) or _shared_machine(r) for r in rows]
    for _, _, ratio, _ in RATIOS:  # within-run SEs say nothing of another process's load
        table.loc[shared, [f"{ratio}_ci_low", f"{ratio}_ci_high"]] = np.nan
    table["modes_differ"] = [mode_difference(rows[0].get("execution_mode"),
                                             r.get("execution_mode")) is not None for r in rows]
    table["ratio_note"] = [""] + [interval_note(rows[0], r) for r in rows[1:]]
    table["energy_saving_pct"] = 100 * (1 - table["energy_ratio"])
    table["runtime_saving_pct"] = 100 * (1 - table["runtime_ratio"])
    items = pd.to_numeric(table["n_items"], errors="coerce")
    table["joules_per_item"] = pd.to_numeric(table["energy_joules"], errors="coerce") / items
    se = pd.to_numeric(table["energy_joules_se"], errors="coerce") / items
    table["joules_per_item_ci_low"] = table["joules_per_item"] - Z95 * se
    table["joules_per_item_ci_high"] = table["joules_per_item"] + Z95 * se
    return table


def run_table(reference: Run, runs: list[Run]) -> pd.DataFrame:
    """One row per run, the reference first: its settings, item count and cost ratios.

    The ratios and their intervals: :func:`cost_ratios`. A ratio across energy sources or GPUs
    is not reported (``energy_ratio_note`` says why).
    """
    table = pd.DataFrame([{**r.info, "is_reference": r is reference, "n_items": len(r.items)}
                          for r in [reference, *runs]]).drop(columns=["task_settings"])
    notes = [energy_comparability(reference.info, r.info) for r in [reference, *runs]]
    table["energy_ratio_note"] = [n or "" for n in notes]
    table = cost_ratios(table)
    refused = np.array([n is not None for n in notes])
    if refused.any():
        warnings.warn("energy ratio not reported for " + "; ".join(
            f"{run_id}: {note}" for run_id, note in zip(table["run"], notes, strict=True) if note),
            DegenerateDataWarning, stacklevel=2)
        for _, _, ratio, basis in RATIOS:
            if basis != "seconds":
                table.loc[refused, [ratio, f"{ratio}_ci_low", f"{ratio}_ci_high"]] = np.nan
        table["energy_saving_pct"] = 100 * (1 - table["energy_ratio"])
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

