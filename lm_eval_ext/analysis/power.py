"""Power planning for paired comparisons (the paired-MDE paper) and the QRI noise ratio.

* Conservative paired MDE for a difference of two paired proportions:
  ``MDE = (z_{1-alpha/2} + z_{1-beta}) * sqrt(rho_d / m)``, with ``rho_d`` the discordance
  rate (share of items whose correctness differs between the two runs) and ``m`` items.
  At m = 500: 3.96 pp for rho_d = 0.10, 2.80 pp for rho_d = 0.05.
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
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))


def paired_mde(m: int, rho_d: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable paired difference (a proportion; x100 for points)."""
    if m <= 0:
        raise ValueError(f"m (items) must be positive, got {m}")
    if not 0 < rho_d <= 1:
        raise ValueError(f"rho_d (discordance rate) must be in (0, 1], got {rho_d}")
    return _z_sum(alpha, power) * math.sqrt(rho_d / m)


def required_items(mde: float, rho_d: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Items needed to detect ``mde`` (a proportion) at discordance ``rho_d``."""
    if mde <= 0:
        raise ValueError(f"mde must be positive, got {mde}")
    return math.ceil(rho_d * (_z_sum(alpha, power) / mde) ** 2)


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


def preregistration_card(*, mde_pp: float, rho_d: float, m: int, alpha: float = 0.05,
                         power: float = 0.8,
                         statistic: str = "paired accuracy difference, exact McNemar test") -> str:
    """Five-line Markdown pre-registration card."""
    return (
        f"- **MDE target**: {mde_pp:.2f} pp\n"
        f"- **rho_d prior** (discordance rate): {rho_d:.3f}\n"
        f"- **m** (paired items): {m}\n"
        f"- **Paired statistic**: {statistic}\n"
        f"- **alpha / power**: {alpha:g} (two-sided) / {power:g}\n"
    )
