"""``--grid``: runs of models x configurations -> cells -> rank flips, rankings, shares, orderings."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.loader import Run, load_runs
from lm_eval_ext.analysis.metrics import ACCURACY
from lm_eval_ext.analysis.stats.rank_flips import (
    FACTORS,
    condition_orderings,
    rank_flip_intervals,
    rank_flip_table,
    ranking_summary,
    same_partition,
    variance_shares,
)


def _membership_names() -> dict[str, str]:
    """The frozen memberships' fingerprints -> their names (``12p5pct``, ``instrument``, ...)."""
    from lm_eval_ext.data.instrument import load_manifest

    return {rec["membership_sha256"]: name for name, rec in load_manifest()["memberships"].items()}


def grid_cells(grid_runs: list[Run], metric) -> tuple[pd.DataFrame, dict[int, pd.DataFrame]]:
    """One row per run x task, and each row's per-unit correct counts (for resampling).

    The benchmark key includes the item set (a frozen membership's name, else the first 12
    characters of its fingerprint): runs over different item sets are different benchmarks
    here, so a rank is never compared across item sets; two runs in one cell are an error
    (see ``cell_matrix``).
    """
    rows, unit_sums = [], {}
    known = _membership_names()
    for run in grid_runs:
        for task, items in run.items.groupby("task"):
            setting = run.info["task_settings"][task]
            benchmark = task.split("_subset")[0].split("_instrument")[0]
            membership = setting.get("membership_sha256")
            label = known.get(membership) or (membership or "")[:12]
            row = {"benchmark": f"{benchmark}[{label}]" if membership else benchmark,
                   "model": run.info["model"], "precision": run.info["precision"],
                   "batch_size": str(run.info["batch_size"]), **setting,
                   "value": metric.compute(items), "run": run.run_id}
            unit_sums[len(rows)] = (items.assign(correct=items["correct"].astype(float))
                                    .groupby(items["unit_id"].astype(str))["correct"]
                                    .agg(correct="sum", n="size"))
            rows.append(row)
    cells = pd.DataFrame(rows)
    cells["config"] = ""
    for _, index in cells.groupby("benchmark").groups.items():
        group = cells.loc[index]
        # a factor that only relabels the model (precision variants as "models") is no config
        factors = [f for f in FACTORS if f != "model" and not (
            group[f].astype(str).nunique() > 1 and same_partition(group["model"], group[f]))]
        cells.loc[index, "config"] = group[factors].astype(str).apply(
            lambda row, fs=factors: "|".join(f"{f}={row[f]}" for f in fs), axis=1)
    return cells, unit_sums


def core_mask(cells: pd.DataFrame, core: dict[str, list[str]]) -> pd.Series:
    """Which grid cells lie in the core sub-envelope; an error for a factor or level no cell has."""
    inside = pd.Series(True, index=cells.index)
    for factor, levels in core.items():
        factors = [c for c in cells.columns if c not in {"value", "run", "config", "benchmark"}]
        if factor not in factors:
            hint = difflib.get_close_matches(factor, factors, n=1)
            raise AnalysisInputError(
                f"--core {factor}=...: the grid has no factor {factor!r} "
                + (f"(did you mean {hint[0]!r}?)" if hint else f"(it has {', '.join(factors)})"))
        present = sorted(set(cells[factor].astype(str)))
        missing = [level for level in levels if level not in present]
        if missing:
            raise AnalysisInputError(f"--core {factor}={','.join(levels)}: no grid run has {factor} "
                              f"{', '.join(missing)} (its runs have {', '.join(present)})")
        inside &= cells[factor].astype(str).isin(levels)
    return inside


def grid_analysis(grid: Sequence[str | Path], core: dict[str, list[str]] | None,
                   n_resamples: int, rng, level: float
                   ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Rank flips, rankings (full envelope, plus the core one), shares and orderings.

    The last two: variance shares over the grid factors, and each condition's ordering of
    the models against the consensus. The full envelope's rho_flip and mean tau carry
    natural-unit cluster-bootstrap intervals and each pair's ordering noise.
    """
    cells, unit_sums = grid_cells(load_runs(grid, one_per_entry=False), ACCURACY)
    models = sorted(set(cells["model"].astype(str)))
    if len(models) < 2:
        raise AnalysisInputError(f"--grid: every run is of model {models[0]}, so there is no "
                                 "ordering of models to flip; give runs of two or more models")
    if core:
        cells = cells.assign(in_core=core_mask(cells, core))
    pair_ci, tau_ci = rank_flip_intervals(cells, unit_sums, n_resamples, rng, level)
    flips = rank_flip_table(cells).merge(pair_ci, on=["benchmark", "model_a", "model_b"],
                                         how="left").assign(envelope="full")
    rankings = ranking_summary(cells).merge(tau_ci, on="benchmark", how="left").assign(
        envelope="full")
    if core:
        inner = cells[cells["in_core"]]
        flips = pd.concat([flips, rank_flip_table(inner).assign(envelope="core")])
        rankings = pd.concat([rankings, ranking_summary(inner).assign(envelope="core")])
    return flips, rankings, variance_shares(cells), condition_orderings(cells)

