"""Vectorised natural-unit cluster bootstrap and cluster permutation for paired deltas.

All resamples of one analysis share one cluster-weight matrix ``W`` (B x C, multinomial
counts: a cluster bootstrap of the natural units) and one sign matrix ``F`` (B x C, which
clusters swap reference and run: the paired permutation null). For a metric with per-item
features ``X``, per-cluster sums ``S = cluster_sums(X)`` give every resampled statistic as
``value(W @ S)``: one matrix product instead of B loops. Subgroups use the same ``W`` with
features zeroed outside the subgroup, i.e. a subgroup statistic over the resampled population.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lm_eval_ext.analysis.errors import DegenerateDataWarning


@dataclass(frozen=True)
class ConfidenceInterval:
    """An interval (scipy's field names)."""

    low: float
    high: float


def as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    """Accept a Generator, a seed, or None (fresh entropy)."""
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def cluster_sums(codes: np.ndarray, n_clusters: int, features: np.ndarray) -> np.ndarray:
    """Per-cluster sums over the first axis: (n, ...) -> (n_clusters, ...)."""
    out = np.zeros((n_clusters, *features.shape[1:]))
    np.add.at(out, codes, features)
    return out


def bootstrap_counts(n_clusters: int, n_resamples: int, rng) -> np.ndarray:
    """(B x C) multinomial counts: how often each of ``n_clusters`` is drawn per resample."""
    return as_rng(rng).multinomial(n_clusters, np.full(n_clusters, 1.0 / max(n_clusters, 1)),
                                   size=n_resamples).astype(float)


@dataclass(frozen=True)
class ClusterDesign:
    """Items grouped into natural-unit clusters, with shared resampling matrices."""

    codes: np.ndarray  # cluster index per item
    n_clusters: int
    weights: np.ndarray  # (B, C) float32 bootstrap counts
    flips: np.ndarray  # (B, C) float32, 1 = swap reference and run in this cluster

    @classmethod
    def build(cls, units: Sequence, n_resamples: int, rng) -> ClusterDesign:
        """Cluster codes for ``units`` and ``n_resamples`` bootstrap/permutation draws."""
        rng = as_rng(rng)
        _, codes = np.unique(np.asarray(units, dtype=object).astype(str), return_inverse=True)
        n_clusters = int(codes.max()) + 1 if len(codes) else 0
        weights = bootstrap_counts(n_clusters, n_resamples, rng).astype(np.float32)
        flips = rng.integers(0, 2, size=(n_resamples, n_clusters)).astype(np.float32)
        return cls(codes, n_clusters, weights, flips)

    def sums(self, features: np.ndarray) -> np.ndarray:
        """Per-cluster sums over the first axis: (n, ...) -> (C, ...)."""
        return cluster_sums(self.codes, self.n_clusters, features)


def percentile_intervals(draws: np.ndarray, level: float = 0.95
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column-wise percentile intervals of (B x G) draws and each column's undefined share.

    Draws that are not finite are undefined (e.g. a ratio with no item in a resample). A column
    with more than 10% undefined draws gets NaN limits; one with fewer gets limits from the
    defined draws. Both are flagged (DegenerateDataWarning), and the share is returned so that
    callers report it beside the interval.
    """
    draws = np.asarray(draws, float)
    finite = np.isfinite(draws)
    tail = (1 - level) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(draws, [tail, 1 - tail], axis=0)
    undefined = 1.0 - finite.mean(axis=0) if draws.shape[0] else np.ones(draws.shape[1:])
    bad = undefined > 0.1
    if bad.any():
        warnings.warn(f"{int(bad.sum())} interval(s) with >10% undefined resamples not reported",
                      DegenerateDataWarning, stacklevel=3)
        low, high = np.where(bad, np.nan, low), np.where(bad, np.nan, high)
    some = (undefined > 0) & ~bad
    if some.any():
        warnings.warn(f"{int(some.sum())} interval(s) from the defined resamples only (up to "
                      f"{100 * undefined[some].max():.1f}% undefined; see "
                      "undefined_resample_share)", DegenerateDataWarning, stacklevel=3)
    return low, high, undefined


def resampled(value, matrix: np.ndarray, cluster_sums: np.ndarray,
              dtype: type = np.float32) -> np.ndarray:
    """``value`` under every row of a (B x C) resampling matrix; sums are (C x G x k).

    float32 is exact for the bootstrap's integer counts times 0/1 features and halves the
    memory; the permutation null asks for float64 (its ties with the observed delta must
    be exact, judge scores are not integers).
    """
    flat = cluster_sums.reshape(cluster_sums.shape[0], -1).astype(dtype)
    return value((matrix.astype(dtype, copy=False) @ flat).reshape(matrix.shape[0],
                                                                   *cluster_sums.shape[1:]))


def permutation_pvalues(value, design: ClusterDesign, ref_sums: np.ndarray,
                        run_sums: np.ndarray, *, mid_p: bool = True) -> np.ndarray:
    """Two-sided paired permutation p-values, one per subgroup (sums: C x G x k).

    Under H0 (reference and run outputs exchangeable within each natural unit) every cluster
    may swap its two runs. Over the B' finite resamples, with the observed delta counted as one
    of them, the mid-p (default) is ``(#{|d*| > |d|} + (#{|d*| = |d|} + 1) / 2) / (B' + 1)``;
    ``mid_p=False`` gives the conventional ``(1 + #{|d*| >= |d|}) / (B' + 1)``. When every
    resample ties with the observed delta (no discordant pair) the p is 1.

    The null distribution of a paired binary delta is discrete (with independent items it is the
    sign test over the discordant pairs), so the conventional p rejects less often than alpha:
    with 500 independent items at 10% discordance, 3.8% at alpha 5% and 75% power at the Wald
    MDE. The mid-p's size and power are near those the MDE formula assumes
    (``benchmarks/results/primary_test_characteristics_2026-12-01.json``).
    """
    ref_total, run_total = ref_sums.sum(0), run_sums.sum(0)
    observed = np.abs(value(run_total) - value(ref_total))
    shift = resampled(lambda s: s, design.flips, ref_sums - run_sums, np.float64)
    null = np.abs(value(run_total + shift) - value(ref_total - shift))
    finite = np.isfinite(null)
    tol = 1e-9 * np.maximum(1.0, observed)
    above = ((null > observed + tol) & finite).sum(0)
    tied = ((np.abs(null - observed) <= tol) & finite).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = ((above + (tied + 1) / 2) if mid_p else (above + tied + 1)) / (finite.sum(0) + 1)
    # every resample ties with the observed delta (e.g. no discordant pair): no evidence, p = 1
    p = np.where(tied == finite.sum(0), 1.0, p)
    return np.where(np.isfinite(observed) & (finite.sum(0) > 0), p, np.nan)
