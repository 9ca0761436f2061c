"""Linearised (delta-method) paired deltas with cluster-robust standard errors.

A metric that is a function of feature sums (:class:`~lm_eval_ext.analysis.metrics.MetricSpec`)
is linearised at the observed sums; each natural unit's influence total gives a CR1
(``C / (C - 1)``) variance. Used by the group-sequential looks and by claim stability over
Monte Carlo subsets (batched over subsets).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from lm_eval_ext.analysis.metrics import MetricSpec
from lm_eval_ext.analysis.stats.bootstrap import cluster_sums


def linearised_delta(spec: MetricSpec, ref: pd.DataFrame, run: pd.DataFrame,
                     units: Sequence) -> tuple[float, float]:
    """Paired delta (run - reference) and its cluster-robust delta-method standard error.

    The metric is a function of feature sums; its gradient at the observed sums turns each
    item into an influence value, and the variance is that of the natural-unit totals of the
    influence (CR1: ``C / (C - 1)``).
    """
    _, codes = np.unique(np.asarray(units).astype(str), return_inverse=True)
    c = int(codes.max()) + 1 if len(codes) else 0
    delta, se = linearised_deltas(spec, cluster_sums(codes, c, spec.features(ref)),
                                  cluster_sums(codes, c, spec.features(run)), np.ones((1, c)))
    return float(delta[0]), float(se[0])


def gradients(spec: MetricSpec, sums: np.ndarray) -> np.ndarray:
    """Central-difference gradient of ``spec.value`` at each row of ``sums`` (D x k)."""
    grad = np.zeros_like(sums, dtype=float)
    for j in range(sums.shape[1]):
        h = np.maximum(1e-6 * np.abs(sums[:, j]), 1e-6)
        up, down = sums.astype(float).copy(), sums.astype(float).copy()
        up[:, j] += h
        down[:, j] -= h
        grad[:, j] = (spec.value(up) - spec.value(down)) / (2 * h)
    return grad


def cluster_robust_se(sums: np.ndarray, gradient: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """CR1 standard errors of a linearised total, one per row of ``weights``.

    A unit's influence is ``gradient_d . sums[unit]`` (``sums``: C x Q, the stacked parts of a
    contrast, signed; ``gradient``: D x Q, one row per selection or resample); ``weights`` (D x
    C) counts each unit (0/1 for a subset, a bootstrap's counts for a resample). Only ``weights
    @ sums`` and ``weights @ (sums_q sums_r)`` are formed, not the D x C influences:
    ``sum_c w (psi - mean)^2 = g' M g - (g' A)^2 / count``.
    """
    n, q = sums.shape
    count = weights.sum(1)
    first = np.einsum("dq,dq->d", gradient, weights @ sums)
    outer = (weights @ (sums[:, :, None] * sums[:, None, :]).reshape(n, -1)).reshape(-1, q, q)
    second = np.einsum("dq,dr,dqr->d", gradient, gradient, outer)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.maximum(second - first ** 2 / count, 0.0)
        return np.sqrt(count / (count - 1) * spread)


def linearised_deltas(spec: MetricSpec, ref_sums: np.ndarray, run_sums: np.ndarray,
                      selections: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`linearised_delta` for many cluster subsets at once.

    ``ref_sums``/``run_sums`` are the (C x k) natural-unit sums of the metric's features and
    ``selections`` a (D x C) 0/1 matrix, one row per subset of units. Returns the D deltas and
    their cluster-robust standard errors (NaN where fewer than 2 units are selected).
    """
    w = np.asarray(selections, float)
    ref_t, run_t = w @ ref_sums, w @ run_sums
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = spec.value(run_t) - spec.value(ref_t)
        se = cluster_robust_se(np.hstack([run_sums, -ref_sums]),
                               np.hstack([gradients(spec, run_t), gradients(spec, ref_t)]), w)
    bad = (w.sum(1) < 2) | ~np.isfinite(delta)
    return delta, np.where(bad, np.nan, se)
