"""After the cells: the campaign's energy table, each condition relative to the reference.

The paper's energy columns (its Table 1: energy and runtime relative to M0) from the cells'
records: per cell its joules, joules per item and seconds, each ratio to the reference cell
with a 95% interval (the two cells' within-run errors; none for a derived cell), the execution
mode of each side and a note where the modes differ. Outputs under ``OUT/analysis/<model>/``:
``energy.csv``, ``energy.md`` and ``energy_savings.png`` (runtime saving against energy saving,
with the equal-savings diagonal).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from lm_eval_ext.campaign.spec import CampaignSpec, Cell
from lm_eval_ext.campaign.store import CampaignFolder
from lm_eval_ext.campaign.subsets import energy_derived

#: the columns of ``energy.md`` (``energy.csv`` has every one)
SHOWN = ("condition", "task", "n_items", "execution_mode", "energy_joules", "joules_per_item",
         "energy ratio", "energy ratio (idle-corrected)", "runtime ratio", "ratio_note")


def reference_condition(spec: CampaignSpec) -> str:
    """The condition energy is relative to: the first comparison's reference, else the first."""
    if spec.comparisons:
        return spec.comparisons[0].reference
    return spec.cells[0].condition


def _row(cell: Cell, record: Mapping[str, Any]) -> dict[str, Any]:
    return {"run": cell.condition, "condition": cell.condition, "task": cell.task,
            "n_items": record.get("n_items"), "energy_derived": energy_derived(record),
            "derived_from": record.get("derived_from"),
            **{key: record.get(key) for key in (
                "execution_mode", "energy_joules", "energy_joules_se",
                "energy_joules_idle_corrected", "energy_joules_idle_corrected_se",
                "inference_seconds", "inference_seconds_se")},
            "energy_flags": ",".join(record.get("energy_flags") or []),
            "gpu_uuids": ",".join(record.get("gpu_uuids") or [])}


def energy_table(spec: CampaignSpec, records: Mapping[str, Mapping[str, Any]],
                 model: str) -> pd.DataFrame | None:
    """Every finished cell of ``model`` against its reference cell (None: none is done).

    A cell's reference is the reference condition's cell of its task, else (one task in the
    reference condition: the subsets of the instrument) its only cell, as the comparisons
    pair them; a cell with neither has no ratio, ``ratio_note`` says why.
    """
    from lm_eval_ext.analysis.run_table import cost_ratios

    condition = reference_condition(spec)
    refs = spec.cell(model, condition)
    if not any(ref.cell_id in records for ref in refs):
        return None
    done = [c for c in spec.cells if c.model_label == model and c.cell_id in records
            and c not in refs]
    reference = {c.cell_id: next((r for r in refs if r.task == c.task),
                                 refs[0] if len(refs) == 1 else None) for c in done}
    groups = []
    for ref in (r for r in refs if r.cell_id in records):
        members = [c for c in done if reference[c.cell_id] is ref]
        table = pd.DataFrame([_row(c, records[c.cell_id]) for c in (ref, *members)])
        table["is_reference"] = [True] + [False] * len(members)
        groups.append(cost_ratios(table))
    alone = [c for c in done if reference[c.cell_id] is None
             or reference[c.cell_id].cell_id not in records]
    if alone:
        groups.append(pd.DataFrame([_row(c, records[c.cell_id]) for c in alone]).assign(
            is_reference=False, ratio_note=[f"its task {c.task} has no finished {condition} "
                                            "cell to compare with" for c in alone]))
    return pd.concat(groups, ignore_index=True)


def _interval(row: pd.Series, ratio: str) -> str:
    value, low, high = row[ratio], row[f"{ratio}_ci_low"], row[f"{ratio}_ci_high"]
    if row["is_reference"]:
        return "reference"
    if pd.isna(value):
        return "n/a"
    return f"{value:.3g}" + (f" [{low:.3g}, {high:.3g}]" if pd.notna(low) else "")


def energy_markdown(table: pd.DataFrame, model: str) -> str:
    """``energy.md``: the table with each ratio and its interval, and what the ratios mean."""
    from lm_eval_ext.analysis.report_markdown import markdown_table

    shown = table.assign(**{
        "energy ratio": [_interval(r, "energy_ratio") for _, r in table.iterrows()],
        "energy ratio (idle-corrected)": [_interval(r, "energy_ratio_idle_corrected")
                                          for _, r in table.iterrows()],
        "runtime ratio": [_interval(r, "runtime_ratio") for _, r in table.iterrows()]})
    reference = table.iloc[0]
    mixed = table[table["modes_differ"].astype(bool)]
    lines = [f"# Energy relative to {reference['condition']} ({model})\n",
             "Each ratio is the cell's total over the reference cell's, with a 95% interval "
             "from the two cells' standard errors (within-run and run-to-run; docs/energy.md: "
             "what they cover, as measured against repeated runs). Raw: the GPU's energy in the inference "
             "windows; idle-corrected: less the idle baseline sampled before and after the "
             "work. A derived cell's energy is its parent's joules per item times its items: "
             "no interval of its own.\n",
             markdown_table(shown, list(SHOWN))]
    if not mixed.empty:
        lines.append(f"\n**Execution modes differ** from the reference's "
                     f"({reference['execution_mode']}) for "
                     + ", ".join(f"{r['condition']} ({r['execution_mode']})"
                                 for _, r in mixed.iterrows())
                     + ": those ratios measure the execution mode as well as the change. "
                     "`--execution lm-eval` runs every cell in lm-eval's own mode.\n")
    return "\n".join(lines) + "\n"


def summarize_energy(spec: CampaignSpec, folder: CampaignFolder,
                     records: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """``energy.csv``, ``energy.md`` and the savings figure of every model; the ``.md`` paths."""
    from lm_eval_ext.analysis import figures

    written = []
    for model in spec.model_labels:
        table = energy_table(spec, records, model)
        if table is None:
            continue
        page = folder.write_model_table(model, "energy", table, energy_markdown(table, model))
        figures.save(figures.savings(table), page.with_name("energy_savings.png"))
        written.append(page)
    return written
