"""Group-sequential paired comparisons on nested item sets: stop when the claim is settled.

At look ``k`` (information fraction ``t_k``: the share of the instrument's natural units
evaluated so far) the paired delta of a pre-registered metric is estimated with a
cluster-robust, linearised standard error (natural units are the clusters), and:

* **changed** when the two-sided ``1 - alpha_k`` interval excludes 0;
* **equivalent** when the ``1 - 2 alpha_k`` interval lies inside ``(-margin, +margin)`` (TOST);
* otherwise the next look; after the last one **unresolved** (with the MDE reached).

``alpha_k`` is the increment of the Lan-DeMets O'Brien-Fleming spending function
``alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` between looks. Each look's test spends its
own increment (a union bound, so the overall false "changed" rate is at most ``alpha`` without
computing correlated boundaries; slightly conservative), and the same increments bound the
false "equivalent" rate. ``simulate`` checks both on clustered data with known truth
(``tests/test_sequential.py`` pins the rates).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy import stats

from lm_eval_ext.analysis.bootstrap import cluster_sums
from lm_eval_ext.analysis.metrics import MetricSpec

CHANGED, EQUIVALENT, CONTINUE, UNRESOLVED = "changed", "equivalent", "continue", "unresolved"


def obrien_fleming_spent(t: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming alpha spent by information fraction ``t`` (two-sided)."""
    if t <= 0:
        return 0.0
    return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / np.sqrt(min(t, 1.0))))


@dataclass(frozen=True)
class SequentialPlan:
    """The pre-registered design: metric, margin, error rates and the looks."""

    metric: str
    margin: float  # in metric units (0.02 = 2 pp for a proportion)
    fractions: tuple[float, ...]  # information fraction of each look, increasing, last 1.0
    alpha: float = 0.05
    beta: float = 0.20
    spending: str = "lan_demets_obrien_fleming"

    def __post_init__(self) -> None:
        f = self.fractions
        if not f or any(b <= a for a, b in zip(f, f[1:], strict=False)) or abs(f[-1] - 1) > 1e-9:
            raise ValueError(f"looks must increase to 1.0 (the whole instrument), got {f}")
        if not 0 < self.alpha < 1 or not 0 < self.beta < 1 or self.margin <= 0:
            raise ValueError("alpha and beta must lie in (0, 1) and the margin must be > 0")

    def look_alphas(self) -> list[float]:
        """The alpha each look spends (they sum to ``alpha``)."""
        spent = [obrien_fleming_spent(t, self.alpha) for t in self.fractions]
        return [b - a for a, b in zip([0.0, *spent[:-1]], spent, strict=True)]


@dataclass(frozen=True)
class LookResult:
    """One look: the estimate, its interval and the decision."""

    look: int
    n_items: int
    n_clusters: int
    delta: float
    se: float
    alpha_spent: float
    ci: tuple[float, float]  # two-sided 1 - alpha_k (the "changed" test)
    tost_ci: tuple[float, float]  # two-sided 1 - 2 alpha_k (the equivalence test)
    decision: str


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


def _gradients(spec: MetricSpec, sums: np.ndarray) -> np.ndarray:
    """Central-difference gradient of ``spec.value`` at each row of ``sums`` (D x k)."""
    grad = np.zeros_like(sums, dtype=float)
    for j in range(sums.shape[1]):
        h = np.maximum(1e-6 * np.abs(sums[:, j]), 1e-6)
        up, down = sums.astype(float).copy(), sums.astype(float).copy()
        up[:, j] += h
        down[:, j] -= h
        grad[:, j] = (spec.value(up) - spec.value(down)) / (2 * h)
    return grad


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
        influence = run_sums @ _gradients(spec, run_t).T - ref_sums @ _gradients(spec, ref_t).T
        c = w.sum(1)
        mean = np.einsum("dc,cd->d", w, influence) / c
        spread = np.einsum("dc,cd->d", w, influence ** 2) - c * mean ** 2
        se = np.sqrt(np.maximum(c / (c - 1) * spread, 0.0))
    bad = (c < 2) | ~np.isfinite(delta)
    return delta, np.where(bad, np.nan, se)


@lru_cache(maxsize=64)
def _critical_values(plan: SequentialPlan) -> tuple[tuple[float, float, float], ...]:
    """Per look: (alpha_k, two-sided z, one-sided z)."""
    return tuple((a, float(stats.norm.ppf(1 - a / 2)), float(stats.norm.ppf(1 - a)))
                 for a in plan.look_alphas())


def decide(plan: SequentialPlan, look: int, n_items: int, n_clusters: int, delta: float,
           se: float) -> LookResult:
    """The decision at ``look`` (0-based) for an estimate and its standard error."""
    a, z_two, z_one = _critical_values(plan)[look]
    ci = (delta - z_two * se, delta + z_two * se)
    tost = (delta - z_one * se, delta + z_one * se)
    last = look == len(plan.fractions) - 1
    if not np.isfinite(se):
        decision = UNRESOLVED if last else CONTINUE
    elif ci[0] > 0 or ci[1] < 0:
        decision = CHANGED
    elif -plan.margin < tost[0] and tost[1] < plan.margin:
        decision = EQUIVALENT
    else:
        decision = UNRESOLVED if last else CONTINUE
    return LookResult(look, n_items, n_clusters, delta, se, a, ci, tost, decision)


def final_mde(plan: SequentialPlan, se_full: float) -> float:
    """Smallest effect the last look detects with power ``1 - beta`` (metric units)."""
    a = plan.look_alphas()[-1]
    return float((stats.norm.ppf(1 - a / 2) + stats.norm.ppf(1 - plan.beta)) * se_full)


# -- simulation with known truth ---------------------------------------------------------------
@dataclass(frozen=True)
class SimulationResult:
    """Operating characteristics of a plan at one true effect."""

    effect: float
    n_datasets: int
    decisions: dict[str, float]  # share of datasets per final decision
    expected_items: float
    mean_look: float
    looks_taken: dict[int, float] = field(default_factory=dict)


def simulate_paired_units(n_units: int, effect: float, rng: np.random.Generator,
                          unit_size: int = 4, base: float = 0.55, flip: float = 0.12,
                          spread: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
    """Paired 0/1 correctness of ``n_units`` natural units of ``unit_size`` items.

    Units differ in difficulty (logit-normal with SD ``spread``) and in how often the
    candidate flips an answer (gamma-distributed around ``flip``): both cluster within units
    as BBQ's 4-row templates do. The candidate's expected accuracy is the reference's plus
    ``effect`` in every unit.
    """
    logit = np.log(base / (1 - base)) + rng.normal(0, spread, n_units)
    p = 1 / (1 + np.exp(-logit))
    q_down = np.clip(rng.gamma(2.0, flip / 2.0, n_units), 0, 0.9)
    q_up = np.clip((effect + p * q_down) / np.maximum(1 - p, 1e-9), 0, 1)
    p_i = np.repeat(p, unit_size)
    ref = rng.random(p_i.size) < p_i
    u = rng.random(p_i.size)
    cand = np.where(ref, u >= np.repeat(q_down, unit_size), u < np.repeat(q_up, unit_size))
    return ref, cand


def mean_difference_se(ref: np.ndarray, cand: np.ndarray, units: np.ndarray
                       ) -> tuple[float, float]:
    """Accuracy's paired delta and cluster-robust SE in closed form.

    This is what :func:`linearised_delta` gives for accuracy (``tests/test_sequential.py``
    checks that they agree); the simulation uses it for speed.
    """
    d = cand.astype(float) - ref.astype(float)
    totals = np.bincount(units, weights=d - d.mean())
    c = len(totals)
    return float(d.mean()), float(np.sqrt(c / (c - 1) * (totals ** 2).sum()) / len(d))


def simulate(plan: SequentialPlan, effect: float, n_units: int, n_datasets: int,
             seed: int = 0, unit_size: int = 4) -> SimulationResult:
    """Run the plan on ``n_datasets`` simulated paired datasets (accuracy)."""
    rng = np.random.default_rng(seed)
    looks_units = [max(2, round(t * n_units)) for t in plan.fractions]
    finals, items, looks = [], [], []
    for _ in range(n_datasets):
        ref, cand = simulate_paired_units(n_units, effect, rng, unit_size)
        units = np.repeat(np.arange(n_units), unit_size)
        for k, n in enumerate(looks_units):
            m = n * unit_size
            delta, se = mean_difference_se(ref[:m], cand[:m], units[:m])
            result = decide(plan, k, m, n, delta, se)
            if result.decision != CONTINUE:
                finals.append(result.decision)
                items.append(m)
                looks.append(k)
                break
    shares = {d: finals.count(d) / n_datasets for d in (CHANGED, EQUIVALENT, UNRESOLVED)}
    return SimulationResult(effect, n_datasets, shares, float(np.mean(items)),
                            float(np.mean(looks)),
                            {k: looks.count(k) / n_datasets for k in range(len(looks_units))})
