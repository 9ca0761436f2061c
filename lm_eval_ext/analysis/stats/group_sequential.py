"""Group-sequential paired comparisons on nested item sets: stop when the claim is settled.

At look ``k`` (information fraction ``t_k``: the share of the instrument's natural units
evaluated so far) the paired delta of a pre-registered metric is estimated with a
cluster-robust, linearised standard error (natural units are the clusters), and:

* **changed** when the two-sided ``1 - alpha_k`` interval excludes 0;
* **equivalent** when the ``1 - 2 alpha_k`` interval lies inside ``(-margin, +margin)`` (TOST);
* otherwise the next look; after the last one **unresolved** (with the MDE reached).

``alpha_k`` is the increment of the Lan-DeMets O'Brien-Fleming spending function
``alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` between looks. The "changed" boundary
``c_k`` of each look is exact: under no difference, the chance that ``|Z_j| < c_j`` at every
earlier look and ``|Z_k| >= c_k`` at look ``k`` is ``alpha_k``, for the joint normal law of the
looks' statistics (independent increments, information fraction ``t_k``), computed by
recursive numerical integration (Armitage, McPherson and Rowe; Jennison and Turnbull, ch. 19).
So the plan's false "changed" rate is ``alpha``, not less (a per-look union bound gave 3.6% and a
last-look ``z`` of 2.22 instead of 2.04 for the default looks). The equivalence test (TOST at
``1 - 2 alpha_k``) keeps the per-look increments, which bound the false "equivalent" rate at a
true difference of +-margin. ``sequential_known_truth.py`` checks both on clustered
data with known truth (``tests/test_sequential.py`` pins the rates). The estimate and its SE come
from :mod:`~lm_eval_ext.analysis.stats.linearised`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

CHANGED, EQUIVALENT, CONTINUE, UNRESOLVED = "changed", "equivalent", "continue", "unresolved"


def obrien_fleming_spent(t: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming alpha spent by information fraction ``t`` (two-sided).

    ``2 Phi(-z / sqrt(t))`` rather than ``2 - 2 Phi(z / sqrt(t))``: the same number without
    the cancellation that made a first look below ~5.6% of the information spend exactly 0.
    It still reaches 0 below ~0.1% (an ``z / sqrt(t)`` over ~38): such a look spends nothing
    and its boundary is infinite.
    """
    if t <= 0:
        return 0.0
    return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / np.sqrt(min(t, 1.0))))


#: grid points per look of the recursive integration (Simpson; boundaries to ~1e-6)
_GRID = 1001
#: where an infinite boundary's grid stops, in standard deviations of the look's sum
_SPAN = 9.5


def _leaving(z: float, t: float, sd: float, grid: np.ndarray, mass: np.ndarray,
             target: float) -> float:
    """Chance of ``|Z| >= z`` at ``t`` for paths running at ``grid`` (weights ``mass``), less ``target``."""
    b = z * np.sqrt(t)
    chance = mass @ (stats.norm.sf((b - grid) / sd) + stats.norm.cdf((-b - grid) / sd))
    return float(chance) - target


def exact_boundaries(fractions: tuple[float, ...], spent: tuple[float, ...]) -> tuple[float, ...]:
    """Two-sided ``z`` boundaries that spend exactly ``spent[k]`` at look ``k`` under the null.

    ``S_k = Z_k sqrt(t_k)`` is a sum of independent normal increments with variance
    ``t_k - t_{k-1}``. The density of ``S_k`` on paths not yet stopped is carried on a grid over
    ``|s| < c_k sqrt(t_k)``; the next boundary solves (brentq) for the chance of leaving.
    """
    weights = np.ones(_GRID)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    bounds: list[float] = []
    grid = density = None
    previous = 0.0
    for t, a in zip(fractions, spent, strict=True):
        # a look that spends nothing never stops: its boundary is infinite, and the paths are
        # carried on over +-_SPAN standard deviations (what lies beyond is below 1e-20)
        if grid is None:
            c = float(stats.norm.isf(a / 2)) if a > 0 else np.inf
            half = min(c, _SPAN) * np.sqrt(t)
            grid = np.linspace(-half, half, _GRID)
            density = stats.norm.pdf(grid, scale=np.sqrt(t))
        else:
            sd = np.sqrt(t - previous)
            mass = density * weights * (grid[1] - grid[0]) / 3
            c = (float(optimize.brentq(_leaving, 1e-3, 50.0, args=(t, sd, grid, mass, a),
                                       xtol=1e-12)) if a > 0 else np.inf)
            half = min(c, _SPAN) * np.sqrt(t)
            new_grid = np.linspace(-half, half, _GRID)
            density = stats.norm.pdf((new_grid[:, None] - grid[None, :]) / sd) @ mass / sd
            grid = new_grid
        bounds.append(c)
        previous = t
    return tuple(bounds)


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

    def boundaries(self) -> list[float]:
        """Each look's exact two-sided "changed" boundary on the ``z`` scale."""
        return [c for _, c, _ in _critical_values(self)]


@dataclass(frozen=True)
class LookResult:
    """One look: the estimate, its interval and the decision."""

    look: int
    n_items: int
    n_clusters: int
    delta: float
    se: float
    alpha_spent: float
    z_boundary: float  # the exact "changed" boundary c_k
    ci: tuple[float, float]  # delta +- c_k se (the "changed" test; nominal 2 - 2 Phi(c_k))
    tost_ci: tuple[float, float]  # two-sided 1 - 2 alpha_k (the equivalence test)
    decision: str


@lru_cache(maxsize=64)
def _critical_values(plan: SequentialPlan) -> tuple[tuple[float, float, float], ...]:
    """Per look: (alpha_k, exact two-sided boundary, one-sided z of alpha_k for the TOST)."""
    alphas = plan.look_alphas()
    bounds = exact_boundaries(plan.fractions, tuple(alphas))
    return tuple((a, c, float(stats.norm.isf(a))) for a, c in zip(alphas, bounds, strict=True))


def no_discordance_bound(alpha: float, n_units: int) -> float:
    """Exact one-sided ``1 - alpha`` upper bound on the share of discordant units, none seen.

    With 0 of ``n_units`` natural units showing any changed answer, the Clopper-Pearson bound
    is ``1 - alpha ** (1 / n_units)``. With units of equal size (BBQ's 4-row units) the
    accuracy delta cannot exceed the share of discordant units, so this also bounds
    ``|delta|``.
    """
    return float(1.0 - alpha ** (1.0 / n_units)) if n_units > 0 else 1.0


def decide(plan: SequentialPlan, look: int, n_items: int, n_clusters: int, delta: float,
           se: float) -> LookResult:
    """The decision at ``look`` (0-based) for an estimate and its standard error.

    A standard error of 0 makes the Wald intervals a point, which would declare equivalence
    from no evidence. So with ``se == 0``: for accuracy with no change at all (``delta == 0``:
    no discordant pair) the equivalence interval is the exact bound of
    :func:`no_discordance_bound`; otherwise the estimate is undefined and the plan continues
    (``unresolved`` at the last look).
    """
    a, z_two, z_one = _critical_values(plan)[look]
    ci = (delta - z_two * se, delta + z_two * se)
    tost = (delta - z_one * se, delta + z_one * se)
    last = look == len(plan.fractions) - 1
    undecided = UNRESOLVED if last else CONTINUE
    if se == 0 and delta == 0 and plan.metric == "accuracy":
        bound = no_discordance_bound(a, n_clusters)
        tost = (-bound, bound)
        decision = EQUIVALENT if bound < plan.margin else undecided
    elif not np.isfinite(se) or se <= 0:
        decision = undecided
    elif ci[0] > 0 or ci[1] < 0:
        decision = CHANGED
    elif -plan.margin < tost[0] and tost[1] < plan.margin:
        decision = EQUIVALENT
    else:
        decision = undecided
    return LookResult(look, n_items, n_clusters, delta, se, a, z_two, ci, tost, decision)


def boundary_level(z_boundary: float) -> float:
    """The nominal two-sided level of a "changed" interval ``delta +- z se`` (``1 - 2 Phi(-z)``)."""
    return 1.0 - 2.0 * float(stats.norm.sf(z_boundary))


def final_mde(plan: SequentialPlan, se_full: float) -> float:
    """Smallest effect the last look's boundary detects with power ``1 - beta`` (metric units)."""
    return float((plan.boundaries()[-1] + stats.norm.isf(plan.beta)) * se_full)
