"""Clustered paired data with known truth, and the group-sequential plan run on it.

The reference the plan's error rates are checked against (``benchmarks/sequential_simulation.py``
writes them; ``tests/test_sequential.py`` pins them); ``tests/test_claims.py`` draws its paired
data here too. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lm_eval_ext.analysis.stats.group_sequential import (
    CHANGED,
    CONTINUE,
    EQUIVALENT,
    UNRESOLVED,
    SequentialPlan,
    decide,
)


@dataclass(frozen=True)
class SimulationResult:
    """Operating characteristics of a plan at one true effect."""

    effect: float
    n_datasets: int
    realised_effect: float  # mean paired delta over every dataset's full instrument
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
    ``effect`` in every unit, exactly: a unit's accuracy is kept inside ``[-effect, 1 - effect]``
    and its flip-down rate inside the range where the flip-up rate that gives ``effect`` is a
    probability (clipping the flip-up rate instead made the realised effect smaller than asked).
    """
    logit = np.log(base / (1 - base)) + rng.normal(0, spread, n_units)
    p = np.clip(1 / (1 + np.exp(-logit)), max(0.0, -effect) + 1e-6, min(1.0, 1 - effect) - 1e-6)
    q_down = np.clip(rng.gamma(2.0, flip / 2.0, n_units), np.maximum(0.0, -effect / p),
                     np.minimum(0.9, (1 - p - effect) / p))
    q_up = (effect + p * q_down) / (1 - p)
    p_i = np.repeat(p, unit_size)
    ref = rng.random(p_i.size) < p_i
    u = rng.random(p_i.size)
    cand = np.where(ref, u >= np.repeat(q_down, unit_size), u < np.repeat(q_up, unit_size))
    return ref, cand


def mean_difference_se(ref: np.ndarray, cand: np.ndarray, units: np.ndarray
                       ) -> tuple[float, float]:
    """Accuracy's paired delta and cluster-robust SE in closed form.

    This is what :func:`~lm_eval_ext.analysis.stats.linearised.linearised_delta` gives for
    accuracy (``tests/test_sequential.py`` checks that they agree); the simulation uses it for
    speed.
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
    finals, items, looks, realised = [], [], [], []
    for _ in range(n_datasets):
        ref, cand = simulate_paired_units(n_units, effect, rng, unit_size)
        realised.append(cand.mean() - ref.mean())
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
    return SimulationResult(effect, n_datasets, float(np.mean(realised)), shares,
                            float(np.mean(items)),
                            float(np.mean(looks)),
                            {k: looks.count(k) / n_datasets for k in range(len(looks_units))})
