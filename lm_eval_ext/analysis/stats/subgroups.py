"""Subgroups of paired items, and multiplicity adjustment of their p-values."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

MIN_GROUP_N = 50


def subgroup_masks(items: pd.DataFrame, min_group_n: int = MIN_GROUP_N
                   ) -> Iterator[tuple[str, str, np.ndarray]]:
    """(subgroup_type, subgroup, mask) for every subgroup of the items.

    All, category, context x polarity, demographic group (stereotyped group with at least
    ``min_group_n`` items; groups overlap), and the benchmark's own grouping column when it
    differs from category.
    """
    yield "all", "all", np.ones(len(items), bool)
    if items["category"].notna().any():
        for category in sorted(items["category"].dropna().unique()):
            yield "category", str(category), (items["category"] == category).to_numpy()
    if items["context_condition"].notna().any():  # items of other tasks in the run have none
        cells = (items["context_condition"].map(str, na_action="ignore") + "/"
                 + items["question_polarity"].map(str, na_action="ignore"))
        for cell in sorted(cells.dropna().unique()):
            yield "context_polarity", cell, (cells == cell).to_numpy()
    groups = items["stereotyped_groups"].fillna("").str.split("|")
    counts = pd.Series([g for gs in groups for g in gs if g]).value_counts()
    for group in sorted(counts[counts >= min_group_n].index):
        yield "demographic_group", group, groups.apply(lambda gs, g=group: g in gs).to_numpy()
    if "benchmark_group" in items and not items["benchmark_group"].equals(items["category"]):
        for group in sorted(items["benchmark_group"].dropna().unique()):
            yield "benchmark_group", str(group), (items["benchmark_group"] == group).to_numpy()


def _adjusted(pvalues: np.ndarray, step) -> np.ndarray:
    """Apply ``step(sorted_p, m) -> adjusted`` to the finite p-values; NaN stays NaN."""
    p = np.asarray(pvalues, float)
    out = np.full_like(p, np.nan)
    idx = np.where(np.isfinite(p))[0]
    if idx.size:
        order = idx[np.argsort(p[idx])]
        out[order] = np.minimum(step(p[order], order.size), 1.0)
    return out


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (NaN entries stay NaN and are not counted)."""
    return _adjusted(pvalues, lambda p, m: np.maximum.accumulate((m - np.arange(m)) * p))


def benjamini_hochberg(pvalues: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (NaN entries stay NaN and are not counted)."""
    return _adjusted(pvalues, lambda p, m: np.minimum.accumulate(
        (p * m / np.arange(1, m + 1))[::-1])[::-1])
