"""Subset-membership sensitivity: frozen memberships vs Monte Carlo natural-unit draws.

From the reference run's items (no new inference), for each subset size: ``n_draws``
stratified draws of natural units (the frozen instrument's category quotas, uniform units
within a category, seeded), the metric on each draw, its SD, the share of draws within
0.5/1/2 points of the full-reference value, the binomial and hypergeometric reference SDs of an
item-level simple random sample of the same size, and where each frozen membership falls
among the draws (percentile of its absolute deviation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lm_eval_ext.analysis.metrics import MetricSpec
from lm_eval_ext.analysis.stats.bootstrap import as_rng, cluster_sums
from lm_eval_ext.analysis.stats.power import binomial_sd
from lm_eval_ext.data.instrument import SEED, balanced_quotas, category_order

FRACTIONS = (0.75, 0.5, 0.375, 0.25, 0.125)
TOLERANCES_PP = (0.5, 1.0, 2.0)


@dataclass(frozen=True)
class MembershipResult:
    """Per-size summary, every draw's value, and the frozen memberships' placement."""

    summary: pd.DataFrame
    draws: pd.DataFrame
    frozen: pd.DataFrame


def cluster_categories(unit_ids: pd.Series, codes: np.ndarray) -> tuple[pd.Series, np.ndarray]:
    """The unit id of each cluster and its category (the part before ``:``)."""
    unit_of_cluster = pd.Series(unit_ids.astype(str).to_numpy()).groupby(codes).first()
    return unit_of_cluster, unit_of_cluster.str.split(":").str[0].to_numpy()


def draw_matrix(cluster_categories: np.ndarray, n_units: int, n_draws: int, rng) -> np.ndarray:
    """(n_draws x C) 0/1 matrix: each row a category-stratified draw of ``n_units`` clusters."""
    rng = as_rng(rng)
    categories = sorted(set(cluster_categories))
    quotas = balanced_quotas(n_units, category_order(SEED, categories))
    draws = np.zeros((n_draws, len(cluster_categories)), dtype=np.float32)
    for category in categories:
        members = np.flatnonzero(cluster_categories == category)
        quota = min(quotas[category], members.size)
        picks = np.argsort(rng.random((n_draws, members.size)), axis=1)[:, :quota]
        rows = np.repeat(np.arange(n_draws), quota)
        draws[rows, members[picks.ravel()]] = 1.0
    return draws


def _item_level_sds(spec: MetricSpec, items: pd.DataFrame, n_items: int) -> tuple[float, float]:
    """Binomial / hypergeometric SD (points) for proportion metrics; NaN for others."""
    if spec.name not in ("accuracy", "parse_failure_rate", "bias_s_dis"):
        return np.nan, np.nan
    features = spec.features(items).sum(axis=0)
    p = features[0] / features[1] if features[1] else np.nan
    population = len(items)
    if spec.name == "bias_s_dis":  # 2p - 1 over the counted disambiguated items
        share = features[1] / population
        n_eff = max(int(round(n_items * share)), 1)
        return (2 * spec.scale * binomial_sd(p, n_eff),
                2 * spec.scale * binomial_sd(p, n_eff, int(features[1])))
    return spec.scale * binomial_sd(p, n_items), spec.scale * binomial_sd(p, n_items, population)


def membership_sensitivity(spec: MetricSpec, items: pd.DataFrame, codes: np.ndarray,
                           *, n_draws: int = 1000, rng=None,
                           frozen: Mapping[str, set[str]] | None = None,
                           sizes: list[int] | None = None) -> MembershipResult:
    """Monte Carlo and frozen-membership deviations of ``spec`` from the full reference."""
    rng = as_rng(rng)
    n_clusters = int(codes.max()) + 1
    sums = cluster_sums(codes, n_clusters, spec.features(items))
    full = float(spec.value(sums.sum(0)))
    unit_of_cluster, categories = cluster_categories(items["unit_id"], codes)
    items_per_cluster = np.bincount(codes, minlength=n_clusters)
    # each subset size once, and no empty subset (a few units round several fractions alike);
    # one unit has no proper subset: its single empty row keeps the tables' shape
    sizes = sizes or ([n for n in dict.fromkeys(int(f * n_clusters) for f in FRACTIONS)
                       if n > 0] or [0])
    summaries, draw_rows = [], []
    for n_units in sizes:
        selection = draw_matrix(categories, n_units, n_draws, rng)
        values = spec.value(selection @ sums)
        deviation = spec.scale * (values - full)
        n_items = int(round(float(np.mean(selection @ items_per_cluster))))
        binom, hyper = _item_level_sds(spec, items, n_items)
        finite = deviation[np.isfinite(deviation)]
        summaries.append({
            "metric": spec.name, "size_units": n_units, "size_items": n_items,
            "n_draws": n_draws, "full_value": full,
            "mean_deviation_pp": float(np.mean(finite)) if finite.size else np.nan,
            "sd_pp": float(np.std(finite, ddof=1)) if finite.size > 1 else np.nan,
            **{f"within_{t:g}pp": float(np.mean(np.abs(finite) <= t)) if finite.size else np.nan
               for t in TOLERANCES_PP},
            "binomial_sd_pp": binom, "hypergeometric_sd_pp": hyper,
        })
        draw_rows.append(pd.DataFrame({"metric": spec.name, "size_units": n_units,
                                       "draw": np.arange(n_draws), "value": values,
                                       "deviation_pp": deviation}))
    draws = pd.concat(draw_rows, ignore_index=True)
    frozen_rows = []
    for name, unit_ids in (frozen or {}).items():
        chosen = unit_of_cluster.isin(unit_ids).to_numpy()
        if chosen.sum() != len(unit_ids) or chosen.all():
            continue  # membership not inside the reference, or the whole reference
        value = float(spec.value(chosen.astype(float) @ sums))
        deviation = spec.scale * (value - full)
        same_size = draws[draws["size_units"] == int(chosen.sum())]["deviation_pp"].abs()
        frozen_rows.append({
            "metric": spec.name, "membership": name, "size_units": int(chosen.sum()),
            "value": value, "deviation_pp": deviation,
            "percentile_among_draws": float(100 * np.mean(same_size <= abs(deviation)))
            if len(same_size) else np.nan,
        })
    return MembershipResult(pd.DataFrame(summaries), draws, pd.DataFrame(frozen_rows))
