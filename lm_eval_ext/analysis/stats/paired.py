"""Paired comparison of a run against the reference on the same items."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from lm_eval_ext.analysis.errors import DegenerateDataWarning
from lm_eval_ext.analysis.metrics import MetricSpec
from lm_eval_ext.analysis.stats.bootstrap import (
    ClusterDesign,
    ConfidenceInterval,
    percentile_intervals,
    permutation_pvalues,
    resampled,
)

#: The primary paired test of every metric (see :class:`PairedDelta`).
PRIMARY_TEST = "cluster_permutation"


@dataclass(frozen=True)
class McNemarResult:
    """Exact McNemar test: ``statistic`` = min(b, c), ``pvalue`` two-sided binomial."""

    statistic: float
    pvalue: float
    b: int  # reference correct, run wrong
    c: int  # reference wrong, run correct


def mcnemar_exact(ref_correct: np.ndarray, run_correct: np.ndarray) -> McNemarResult:
    """Exact McNemar test on paired binary outcomes (statsmodels ``mcnemar(exact=True)``).

    Notes:
        With no discordant pairs the test is undefined: NaN with a DegenerateDataWarning.
    """
    ref, run = np.asarray(ref_correct, bool), np.asarray(run_correct, bool)
    b, c = int(np.sum(ref & ~run)), int(np.sum(~ref & run))
    if b + c == 0:
        warnings.warn("no discordant pairs: McNemar p-value undefined", DegenerateDataWarning,
                      stacklevel=2)
        return McNemarResult(0.0, np.nan, b, c)
    pvalue = min(1.0, 2 * stats.binom.cdf(min(b, c), b + c, 0.5))
    return McNemarResult(float(min(b, c)), float(pvalue), b, c)


def transitions(ref_correct: np.ndarray, run_correct: np.ndarray) -> dict[str, int]:
    """Counts of correctness transitions from reference to run."""
    ref, run = np.asarray(ref_correct, bool), np.asarray(run_correct, bool)
    return {"correct_to_correct": int(np.sum(ref & run)), "correct_to_wrong": int(np.sum(ref & ~run)),
            "wrong_to_correct": int(np.sum(~ref & run)), "wrong_to_wrong": int(np.sum(~ref & ~run))}


def answer_agreement(ref_answers: pd.Series, run_answers: pd.Series) -> float:
    """Share of items with the same answer (two parse failures count as the same answer)."""
    ref = ref_answers.fillna("<none>").to_numpy()
    run = run_answers.fillna("<none>").to_numpy()
    return float(np.mean(ref == run)) if len(ref) else np.nan


@dataclass(frozen=True)
class PairedDelta:
    """Run minus reference for one metric on one set of paired items.

    ``statistic`` is the delta in metric units (x ``scale`` for points). ``pvalue`` is the
    two-sided natural-unit cluster permutation p for every metric (``test`` names it): the
    same unit of analysis as the cluster-bootstrap ``ci``. BBQ's four rows of a template
    instance are correlated, so an item-level test is anti-conservative there (an exact McNemar
    rejected 6.6% and 10.1% of null datasets at alpha = 0.05 with unit-level effects, the
    cluster permutation 4.5% and 4.6%: ``tests/test_analysis_statistics.py``).
    ``pvalue_mcnemar`` (binary metrics only, else NaN) is the item-level exact McNemar, valid
    only when items are independent; it is kept as a secondary column.
    """

    metric: str
    reference: float
    value: float
    statistic: float
    n: int
    n_clusters: int
    ci: ConfidenceInterval
    pvalue: float
    test: str
    pvalue_mcnemar: float
    scale: float = 100.0
    bootstrap_distribution: np.ndarray = field(default=None, repr=False)
    #: share of resamples where the delta is undefined (left out of ``ci``; NaN ``ci`` > 0.1)
    undefined_resample_share: float = 0.0
    #: percentile cluster-bootstrap intervals of the run's and the reference's own values
    #: (metric units, the same resamples as ``ci``)
    value_ci: ConfidenceInterval | None = None
    reference_ci: ConfidenceInterval | None = None


def valid_in_both(spec: MetricSpec, ref: pd.DataFrame, run: pd.DataFrame) -> np.ndarray:
    """Items a paired comparison keeps: valid in both runs (judge scores), else all."""
    if spec.valid_column is None:
        return np.ones(len(ref), bool)
    return ref[spec.valid_column].notna().to_numpy() & run[spec.valid_column].notna().to_numpy()


def paired_deltas(spec: MetricSpec, ref: pd.DataFrame, run: pd.DataFrame, design: ClusterDesign,
                  masks: np.ndarray, level: float = 0.95, keep_draws: bool = False
                  ) -> list[PairedDelta]:
    """Deltas of ``spec`` (run - reference) for several item subsets at once.

    ``ref`` and ``run`` are aligned row by row (same items, same order); ``masks`` is an
    (n x G) boolean matrix, one column per subgroup. All subgroups share the cluster design,
    so every resample is one matrix product for all of them.
    """
    masks = np.asarray(masks, bool).reshape(len(ref), -1) & valid_in_both(spec, ref, run)[:, None]
    ref_x, run_x = spec.features(ref), spec.features(run)
    ref_sums = design.sums(ref_x[:, None, :] * masks[:, :, None])  # (C, G, k)
    run_sums = design.sums(run_x[:, None, :] * masks[:, :, None])
    reference, value = spec.value(ref_sums.sum(0)), spec.value(run_sums.sum(0))
    run_draws = resampled(spec.value, design.weights, run_sums)
    ref_draws = resampled(spec.value, design.weights, ref_sums)
    draws = run_draws - ref_draws
    n = masks.sum(0)
    clusters = np.array([len(np.unique(design.codes[m])) for m in masks.T])
    degenerate = (n < 2) | (clusters < 2)
    if degenerate.any():
        warnings.warn(f"{spec.name}: {int(degenerate.sum())} subgroup(s) with < 2 items or "
                      "clusters; no interval", DegenerateDataWarning, stacklevel=2)
        for matrix in (draws, run_draws, ref_draws):
            matrix[:, degenerate] = np.nan
    low, high, undefined = percentile_intervals(draws, level)
    with warnings.catch_warnings():  # the delta's interval already warned about these
        warnings.simplefilter("ignore", DegenerateDataWarning)
        run_low, run_high, _ = percentile_intervals(run_draws, level)
        ref_low, ref_high, _ = percentile_intervals(ref_draws, level)
    pvalues = permutation_pvalues(spec.value, design, ref_sums, run_sums)
    results = []
    for g in range(masks.shape[1]):
        pvalue_mcnemar = np.nan
        if spec.binary:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegenerateDataWarning)
                keep = masks[:, g]
                pvalue_mcnemar = mcnemar_exact(ref_x[keep, 0] > 0, run_x[keep, 0] > 0).pvalue
        results.append(PairedDelta(
            spec.name, float(reference[g]), float(value[g]), float(value[g] - reference[g]),
            int(n[g]), int(clusters[g]), ConfidenceInterval(float(low[g]), float(high[g])),
            float(pvalues[g]), PRIMARY_TEST, float(pvalue_mcnemar), spec.scale,
            draws[:, g].copy() if keep_draws else None,
            undefined_resample_share=float(undefined[g]),
            value_ci=ConfidenceInterval(float(run_low[g]), float(run_high[g])),
            reference_ci=ConfidenceInterval(float(ref_low[g]), float(ref_high[g]))))
    return results


def paired_delta(spec: MetricSpec, ref: pd.DataFrame, run: pd.DataFrame, design: ClusterDesign,
                 mask: np.ndarray | None = None, level: float = 0.95) -> PairedDelta:
    """Delta of ``spec`` (run - reference) on one item subset, with its bootstrap draws."""
    mask = np.ones(len(ref), bool) if mask is None else np.asarray(mask, bool)
    return paired_deltas(spec, ref, run, design, mask[:, None], level, keep_draws=True)[0]
