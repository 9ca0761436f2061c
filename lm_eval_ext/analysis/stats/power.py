"""Power planning for paired comparisons (the paired-MDE paper) and the QRI noise ratio.

* Conservative paired MDE for a difference of two paired proportions:
  ``MDE = (z_{1-alpha/2} + z_{1-beta}) * sqrt(deff * rho_d / m)``, with ``rho_d`` the
  discordance rate (share of items whose correctness differs between the two runs), ``m``
  items and ``deff`` the design effect of the paired differences under natural-unit cluster
  sampling (1 for independent items; :func:`design_effect`), i.e. ``m / deff`` effective
  items: the same unit of analysis as the cluster bootstrap and the cluster permutation test.
  At m = 500 and deff = 1: 3.96 pp for rho_d = 0.10, 2.80 pp for rho_d = 0.05.
* QRI = |delta| / sigma_split: an intervention's effect in units of the metric's own
  item-sampling noise; the template variant adds prompt-template variance to the noise.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def _z_sum(alpha: float, power: float) -> float:
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1); got alpha={alpha}, power={power}")
    # isf(alpha / 2), not ppf(1 - alpha / 2): 1 - 1e-17 rounds to 1, an infinite quantile
    return float(stats.norm.isf(alpha / 2) + stats.norm.ppf(power))


def paired_mde(m: int, rho_d: float, alpha: float = 0.05, power: float = 0.8,
               design_effect: float = 1.0) -> float:
    """Minimum detectable paired difference (a proportion; x100 for points)."""
    if m <= 0:
        raise ValueError(f"m (items) must be positive, got {m}")
    if not 0 < rho_d <= 1:
        raise ValueError(f"rho_d (discordance rate) must be in (0, 1], got {rho_d}")
    if not design_effect > 0:
        raise ValueError(f"design_effect must be positive, got {design_effect}")
    return _z_sum(alpha, power) * math.sqrt(design_effect * rho_d / m)


def design_effect(diff: np.ndarray, codes: np.ndarray) -> float:
    """Design effect of a mean paired difference under cluster sampling.

    ``deff = V_cluster / V_iid`` with ``V_cluster = C/(C-1) * sum_c (D_c - n_c * dbar)^2 / n^2``
    (the cluster-robust variance of the mean over C clusters with totals ``D_c`` and sizes
    ``n_c``) and ``V_iid = sum_i (d_i - dbar)^2 / ((n - 1) * n)``. NaN when either is
    undefined (fewer than 2 clusters, or no variation).
    """
    diff = np.asarray(diff, dtype=float)
    codes = np.asarray(codes)
    n = diff.size
    _, codes = np.unique(codes, return_inverse=True)
    n_clusters = int(codes.max()) + 1 if n else 0
    if n < 2 or n_clusters < 2:
        return math.nan
    mean = diff.mean()
    totals = np.bincount(codes, weights=diff, minlength=n_clusters)
    sizes = np.bincount(codes, minlength=n_clusters)
    v_cluster = n_clusters / (n_clusters - 1) * np.sum((totals - sizes * mean) ** 2) / n**2
    v_iid = np.sum((diff - mean) ** 2) / ((n - 1) * n)
    return float(v_cluster / v_iid) if v_iid > 0 else math.nan


def usable_design_effect(deff: float) -> float:
    """The design effect to plan with: ``deff`` floored at 1, and 1 where it is undefined.

    Below 1 the estimate is noise around independent items (about half of independent-item
    comparisons estimate deff < 1): planning with it would promise an MDE smaller than the
    independent-item one.
    """
    return max(float(deff), 1.0) if math.isfinite(deff) else 1.0


def required_items(mde: float, rho_d: float, alpha: float = 0.05, power: float = 0.8,
                   design_effect: float = 1.0) -> int:
    """Items needed to detect ``mde`` (a proportion) at discordance ``rho_d``."""
    if mde <= 0:
        raise ValueError(f"mde must be positive, got {mde}")
    return math.ceil(design_effect * rho_d * (_z_sum(alpha, power) / mde) ** 2 - 1e-9)


def discordance_rate(ref_correct: np.ndarray, run_correct: np.ndarray) -> float:
    """Empirical rho_d: share of paired items whose correctness differs."""
    ref, run = np.asarray(ref_correct, bool), np.asarray(run_correct, bool)
    return float(np.mean(ref != run)) if ref.size else math.nan


def binomial_sd(p: float, n: int, population: int | None = None) -> float:
    """SD of a proportion over n items: sqrt(p(1-p)/n).

    Times the finite-population (hypergeometric) correction sqrt((N-n)/(N-1)) when
    ``population`` N is given.
    """
    if n <= 0:
        return math.nan
    sd = math.sqrt(p * (1 - p) / n)
    if population is not None and population > 1:
        sd *= math.sqrt(max(population - n, 0) / (population - 1))
    return sd


def qri(delta: float, sigma_split: float, sigma_template: float | None = None) -> float:
    """|delta| / sigma_split, or / sqrt(sigma_split^2 + sigma_template^2) with templates."""
    noise = math.sqrt(sigma_split**2 + (sigma_template or 0.0) ** 2)
    return abs(delta) / noise if noise > 0 else math.nan


CARD_STATISTIC = ("paired accuracy difference; cluster permutation test over natural units "
                  "(CI: natural-unit cluster bootstrap)")


def preregistration_card(*, mde_pp: float, rho_d: float, m: int, alpha: float = 0.05,
                         power: float = 0.8, design_effect: float = 1.0,
                         statistic: str = CARD_STATISTIC, bound_after: int | None = None) -> str:
    """Five-line Markdown pre-registration card (the MDE already includes ``design_effect``).

    ``bound_after``: ``rho_d`` is the 95% upper confidence bound after 0 discordant items of
    that many, so the MDE is a bound too (the card says so).
    """
    bound = (f" (at most: 0 of {bound_after} paired items were discordant)"
             if bound_after is not None else "")
    prior = (f" (the 95% upper confidence bound after 0 of {bound_after} discordant items)"
             if bound_after is not None else "")
    return (
        f"- **MDE target**: {mde_pp:.2f} pp{bound}\n"
        f"- **rho_d prior** (discordance rate): {rho_d:.3f}{prior}\n"
        f"- **m** (paired items): {m}; design effect {design_effect:.2f} "
        f"(effective m {m / design_effect:.0f}; estimated without the effect: where effects "
        "vary by natural unit the design effect grows with the effect, and the power at this "
        "MDE falls below the target)\n"
        f"- **Paired statistic**: {statistic}\n"
        f"- **alpha / power**: {alpha:g} (two-sided) / {power:g}\n"
    )
