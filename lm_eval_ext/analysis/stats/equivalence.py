"""Is a pilot's shift inside ``(-margin, +margin)``? One claim's equivalence p (no I/O).

Two parts, and the claim's p is the larger:

* **The hidden-change floor** (exact): a protocol can shift a contrast by the margin while
  changing only a share ``s = margin / leverage`` of the natural units (``leverage``: the most
  the contrast moves when every unit changes its answers, 100 points for one model's accuracy),
  leaving every other unit as it was. A pilot of ``n`` units drawn from the instrument misses
  all of them with chance at most ``(1 - s) ** n``, and then shows nothing of the shift, so no
  test can be trusted further than that: it is the p of a pilot with identical outputs, and the
  smallest p any pilot of that size can give.
* **The studentised bootstrap (bootstrap-t) TOST**: the two one-sided tests of ``|shift| >=
  margin`` judged by the natural-unit bootstrap distribution of ``T* = (shift* - shift) /
  se*`` rather than by Student's ``t``. A sparse, one-directional change (a few broken units)
  gives a skewed ``T*`` (resamples that miss the broken units have a tiny ``se*``), so the
  bound widens where the ``t`` test's shrinks with the change it failed to see.
"""

from __future__ import annotations

import math

import numpy as np


def hidden_change_pvalue(margin: float, leverage: float | None, n_units: int) -> float:
    """``(1 - margin / leverage) ** n_units``; 1 with no leverage known, 0 if out of reach."""
    if leverage is None or not math.isfinite(leverage) or leverage <= 0:
        return 1.0
    share = margin / leverage
    return 0.0 if share >= 1 else float((1.0 - share) ** n_units)


def hidden_change_units(margin: float, leverage: float | None, alpha: float) -> float:
    """The fewest pilot units whose hidden-change floor is at most ``alpha`` (inf: none)."""
    if leverage is None or not math.isfinite(leverage) or leverage <= 0:
        return math.inf
    share = margin / leverage
    return 1.0 if share >= 1 else math.log(alpha) / math.log1p(-share)


def studentised(shift_draws: np.ndarray, shift: float, se_draws: np.ndarray) -> np.ndarray:
    """``T* = (shift* - shift) / se*`` per resample.

    A resample with ``se* = 0`` (every drawn unit moved alike, e.g. none changed) gives 0 when
    its shift equals the pilot's and ``+-inf`` otherwise (the limit of a vanishing ``se*``);
    an undefined resample (a ratio with no item) gives NaN, which counts against equivalence.
    """
    diff = np.asarray(shift_draws, float) - shift
    se = np.asarray(se_draws, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, diff / se, np.copysign(np.inf, diff))
    t = np.where((se == 0) & (diff == 0), 0.0, t)
    return np.where(np.isfinite(diff) & np.isfinite(se), t, np.nan)


def bootstrap_t_tost_pvalue(shift: float, se: float, t_draws: np.ndarray,
                            margin: float) -> float:
    """The larger of the two one-sided bootstrap-t p's of ``|true shift| >= margin``.

    ``H0: shift >= +margin`` is rejected when ``(shift - margin) / se`` is low against the
    ``T*``; ``H0: shift <= -margin`` when ``(shift + margin) / se`` is high. Each p counts the
    pilot itself as one draw, ``(1 + #) / (B + 1)``; undefined draws count against.
    """
    t = np.asarray(t_draws, float)
    if not (se > 0 and math.isfinite(se) and math.isfinite(shift)) or t.size == 0:
        return 1.0
    undefined = np.isnan(t)
    below = int(np.sum((t <= (shift - margin) / se) | undefined))
    above = int(np.sum((t >= (shift + margin) / se) | undefined))
    return (1 + max(below, above)) / (t.size + 1)
