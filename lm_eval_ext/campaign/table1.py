"""After the cells: the seed paper's Table 1, one row per condition.

Per condition of one model: accuracy, S_DIS and S_AMB (the cell's own metrics), the judge's
mean Bias Score and Reasoning Quality where the cell was judged (with the items scored and a
95% interval clustered by natural unit: the 4 items of a BBQ template instance), and energy
and runtime relative to the reference with their 95% intervals and both execution modes
(:func:`~lm_eval_ext.campaign.energy.energy_table`). Conditions named ``PREFIX_...`` that share
a prefix (the preset's 13 ``M4_*`` memberships) also get one summary row: the mean +- SD over
them. Outputs under ``OUT/analysis/<model>/``: ``table1.csv`` (every number) and ``table1.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lm_eval_ext.campaign.spec import CampaignSpec
from lm_eval_ext.campaign.store import CampaignFolder

#: the cell metrics of the table (lm-eval's ``metric,filter`` keys of the BBQ tasks' first filter)
METRICS = {"accuracy": "acc", "bias_s_dis": "bias_s_dis", "bias_s_amb": "bias_s_amb"}
#: column endings of item counts (a mean over memberships sums them)
COUNTS = ("_n", "_judged_items")
#: the judge's per-item scores (``judge_<task>_<stamp>.jsonl``)
JUDGED = {"judge_bias_score": "judge_bias_score",
          "judge_reasoning_quality": "judge_reasoning_quality"}
#: the energy table's columns carried over
RATIOS = ("energy_ratio", "runtime_ratio")
Z95 = 1.959964


def _metric(metrics: Mapping[str, Any], name: str) -> float | None:
    """A cell metric by name, whatever its filter (``acc,parsed``); None if absent or NaN."""
    for key, value in metrics.items():
        if key.split(",")[0] == name and isinstance(value, int | float) and not math.isnan(value):
            return float(value)
    return None


def clustered_mean(values: pd.Series, units: pd.Series) -> dict[str, float | int | None]:
    """Mean of the scored values, n, and a 95% interval from the cluster-robust SE by unit.

    SE = sqrt(sum over units of (sum of the unit's deviations)^2) / n, the linearised
    standard error of a mean under clustering; None where fewer than 2 units were scored.
    """
    scored = pd.DataFrame({"x": values, "unit": units}).dropna(subset=["x"])
    n = len(scored)
    if n == 0:
        return {"mean": None, "n": 0, "ci_low": None, "ci_high": None}
    mean = float(scored["x"].mean())
    sums = (scored["x"] - mean).groupby(scored["unit"]).sum()
    se = math.sqrt(float((sums ** 2).sum())) / n if len(sums) >= 2 else None
    return {"mean": mean, "n": n, "ci_low": None if se is None else mean - Z95 * se,
            "ci_high": None if se is None else mean + Z95 * se}


def judge_columns(cell_dir: Path, task: str) -> dict[str, Any]:
    """The judge's means of one cell (empty where it was not judged)."""
    from lm_eval_ext.analysis.loader import judge_scores_path, read_samples, samples_path

    found = sorted(cell_dir.rglob("results_*.json")) if cell_dir.is_dir() else []
    if len(found) != 1 or not judge_scores_path(found[0], task).is_file():
        return {}
    scores = pd.read_json(judge_scores_path(found[0], task), lines=True)
    units = {s["doc_id"]: (s.get("doc") or {}).get("unit_id", s["doc_id"])
             for s in read_samples(samples_path(found[0], task))}
    out: dict[str, Any] = {}
    for column, key in JUDGED.items():
        if key not in scores:
            continue
        stats = clustered_mean(pd.to_numeric(scores[key], errors="coerce"),
                               scores["doc_id"].map(units))
        out.update({f"{column}{'' if k == 'mean' else '_' + k}": v for k, v in stats.items()})
        out[f"{column}_judged_items"] = len(scores)
    return out


def table1(spec: CampaignSpec, folder: CampaignFolder, records: Mapping[str, Mapping[str, Any]],
           model: str) -> pd.DataFrame | None:
    """One row per finished condition of ``model`` (None: the reference is not done)."""
    from lm_eval_ext.campaign.energy import energy_table

    energy = energy_table(spec, records, model)
    if energy is None:
        return None
    rows = []
    for _, ratio in energy.iterrows():
        [cell] = [c for c in spec.cells if c.model_label == model
                  and c.condition == ratio["condition"] and c.task == ratio["task"]]
        record = records[cell.cell_id]
        metrics = record.get("metrics") or {}
        rows.append({
            "condition": cell.condition, "task": cell.task, "n_items": record.get("n_items"),
            **{column: _metric(metrics, name) for column, name in METRICS.items()},
            **judge_columns(folder.cell_dir(cell), cell.task),
            **{k: ratio.get(k) for r in RATIOS for k in (r, f"{r}_ci_low", f"{r}_ci_high")},
            "execution_mode": ratio.get("execution_mode"),
            "reference_execution_mode": energy.iloc[0].get("execution_mode"),
            "derived_from": record.get("derived_from"), "ratio_note": ratio.get("ratio_note")})
    table = pd.DataFrame(rows)
    return pd.concat([table, *group_rows(table)], ignore_index=True)


def group_rows(table: pd.DataFrame) -> list[pd.DataFrame]:
    """Per prefix shared by 2+ conditions (``M4_75pct``, ``M4_50pct_r1``, ...): mean and SD."""
    prefixes = table["condition"].str.split("_").str[0]
    out = []
    for prefix, members in table.groupby(prefixes, sort=False):
        if len(members) < 2 or not (members["condition"] != prefix).all():
            continue
        numbers = members.select_dtypes("number").drop(columns=["n_items"], errors="ignore")
        counts = [k for k in numbers if k.endswith(COUNTS)]  # items: summed, not averaged
        row = {"condition": f"{prefix} (mean over {len(members)})", "task": "",
               "n_items": int(members["n_items"].sum()),
               **{k: v for k, v in numbers.mean().items()
                  if not k.endswith(("_low", "_high", *COUNTS))},
               **{k: numbers[k].sum(min_count=1) for k in counts},
               **{f"{k}_sd": v for k, v in numbers.std(ddof=1).items()
                  if not k.endswith(("_low", "_high", *COUNTS))},
               "execution_mode": ",".join(sorted(set(members["execution_mode"].dropna()))),
               "derived_from": ",".join(sorted(set(members["derived_from"].dropna())))}
        out.append(pd.DataFrame([row]))
    return out


def _judged(row: pd.Series, column: str) -> str:
    """A judge mean with its interval and the items it scored of those it judged."""
    text, scored, judged = _shown(row, column), row.get(f"{column}_n"), row.get(
        f"{column}_judged_items")
    if scored is None or pd.isna(scored) or judged is None or pd.isna(judged):
        return text
    return f"{text} (n={scored:.0f} of {judged:.0f})"


def _shown(row: pd.Series, column: str, scale: float = 1.0) -> str:
    value = row.get(column)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "n/a"
    sd, low, high = (row.get(f"{column}_{k}") for k in ("sd", "ci_low", "ci_high"))
    text = f"{value * scale:.3g}"
    if sd is not None and not pd.isna(sd):
        return f"{text} +- {sd * scale:.2g}"
    if low is not None and not pd.isna(low):
        return f"{text} [{low * scale:.3g}, {high * scale:.3g}]"
    return text


def table1_markdown(table: pd.DataFrame, model: str) -> str:
    """``table1.md``: the paper's columns, each with its interval or SD, and what they are."""
    from lm_eval_ext.analysis.report_markdown import markdown_table

    reference = table.iloc[0]["condition"]
    # a condition of several tasks (two benchmarks) has a row per task: named by its task
    tasks = {"task": table["task"]} if table["condition"].duplicated().any() else {}
    shown = pd.DataFrame({
        "condition": table["condition"], **tasks, "items": table["n_items"],
        "accuracy %": [_shown(r, "accuracy", 100) for _, r in table.iterrows()],
        "S_DIS": [_shown(r, "bias_s_dis") for _, r in table.iterrows()],
        "S_AMB": [_shown(r, "bias_s_amb") for _, r in table.iterrows()],
        "Bias Score (judge)": [_judged(r, "judge_bias_score") for _, r in table.iterrows()],
        "Reasoning Quality (judge)": [_judged(r, "judge_reasoning_quality")
                                      for _, r in table.iterrows()],
        f"energy / {reference}": [_shown(r, "energy_ratio") for _, r in table.iterrows()],
        f"runtime / {reference}": [_shown(r, "runtime_ratio") for _, r in table.iterrows()],
        "mode": table["execution_mode"].fillna(""),
        "derived from": table["derived_from"].fillna("").str.split("__").str[1].fillna("")})
    return "\n".join([
        f"# Table 1 ({model}): every condition, energy and runtime relative to {reference}\n",
        *_other_items_line(table),
        "Accuracy, S_DIS and S_AMB are the cells' metrics. The judge's columns are means over "
        "the items it scored (n of the items judged: a parse failure or null score is not "
        "scored) with a 95% interval clustered by natural unit. Ratios carry their 95% "
        "intervals (docs/energy.md) where both sides were measured; a derived cell's energy is "
        "its parent's per item. A `mean over N` row is the mean +- SD over the memberships. "
        f"Execution modes: the reference ran {table.iloc[0]['execution_mode']}; a ratio between "
        "different modes measures the mode as well as the condition.\n",
        markdown_table(shown, list(shown.columns)), *_bare_ratio_lines(table)]) + "\n"


def _bare_ratio_lines(table: pd.DataFrame) -> list[str]:
    """Why a ratio shown without its interval has none (the cell's ``ratio_note``)."""
    def why(note: object) -> str:  # the idle-corrected ratio is energy.md's, not shown here
        return "; ".join(p for p in note.split("; ") if p and not p.startswith(
            "no idle-corrected")) if isinstance(note, str) else ""

    bare = [r for _, r in table.iloc[1:].iterrows() if why(r.get("ratio_note"))
            and any(pd.notna(r.get(k)) and pd.isna(r.get(f"{k}_ci_low")) for k in RATIOS)]
    if not bare:
        return []
    return ["\n**Ratios without an interval**: " + "; ".join(
        f"{r['condition']} ({r['task']}): {why(r['ratio_note'])}" for r in bare) + ".\n"]


def _other_items_line(table: pd.DataFrame) -> list[str]:
    """The line naming conditions of other item counts than the reference (none: no line)."""
    items = pd.to_numeric(table["n_items"], errors="coerce")
    other = table[(items != items.iloc[0]) & items.notna()
                  & ~table["condition"].str.contains(" (mean over", regex=False)]
    if other.empty:
        return []
    return [f"**Other item counts**: the reference scored {items.iloc[0]:g} items, and "
            + ", ".join(f"{r['condition']} {r['n_items']:g}" for _, r in other.iterrows())
            + ". Their ratios compare totals, so they include the change in items; "
            "`energy.md` has joules per item.\n"]


def summarize_table1(spec: CampaignSpec, folder: CampaignFolder,
                     records: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """``table1.csv`` and ``table1.md`` of every model whose reference is done; the ``.md``s."""
    written = []
    for model in spec.model_labels:
        table = table1(spec, folder, records, model)
        if table is not None:
            written.append(folder.write_model_table(model, "table1", table,
                                                    table1_markdown(table, model)))
    return written
