"""Is a pilot's shift inside ``(-margin, +margin)``? One claim's equivalence p (no I/O).

A protocol can shift a contrast by the margin partly in units a pilot never drew: a share
``s`` of the units may each move the contrast by up to ``leverage`` points per share of
units (``leverage``: the most the contrast moves when every unit changes its answers; 100
points for one model's accuracy, 200 for a difference of two models), and the rest of the
shift, ``margin - leverage * s``, in the units the pilot sees. A random pilot of ``n`` units
misses all of the first kind with chance ``(1 - s) ** n``; given that it did, what it sees is
a protocol shifting the contrast by ``margin - leverage * s``. So for every ``s`` the claim's p
is at least ``(1 - s) ** n`` times the p of the pilot's shift against the smaller margin, and
the claim's p is the largest of these over ``s`` in ``[0, margin / leverage]``:

* ``s = 0`` is the plain **studentised bootstrap (bootstrap-t) TOST**: the two one-sided tests
  of ``|shift| >= margin`` judged by the natural-unit bootstrap distribution of ``T* = (shift* -
  shift) / se*`` rather than by Student's ``t``. A sparse, one-directional change (a few broken
  units) gives a skewed ``T*`` (resamples that miss the broken units have a tiny ``se*``), so
  the bound widens where the ``t`` test's shrinks with the change it failed to see.
* ``s = margin / leverage`` is the **hidden-change floor** ``(1 - margin / leverage) ** n``,
  exact: the whole shift in units the pilot missed. It is the p of a pilot whose outputs equal
  the reference's, and the least any pilot of ``n`` units can give.
* in between, a shift **partly hidden**: a pilot that missed a few broken units sees a shift
  inside the margin by what they carried. Testing what it sees against the full margin would
  certify such a protocol far more often than alpha.

Each term is a valid p for the nulls that hide exactly that share (the chance of missing
them times the chance that the visible rest passes at the level that product allows), so the
largest is valid for all of them; ``s`` is taken on a grid, each interval bounded by its
worst corner.
"""

from __future__ import annotations

import math

import numpy as np

#: intervals of the hidden share ``s`` between 0 and ``margin / leverage``
HIDDEN_SHARE_STEPS = 1000


def _hidden_share(margin: float, leverage: float | None) -> float | None:
    """``margin / leverage``: the share of units that must change (None: no leverage known)."""
    if leverage is None or not math.isfinite(leverage) or leverage <= 0:
        return None
    return margin / leverage


def hidden_change_pvalue(margin: float, leverage: float | None, n_units: int) -> float:
    """``(1 - margin / leverage) ** n_units``; 1 with no leverage known, 0 if out of reach."""
    share = _hidden_share(margin, leverage)
    if share is None:
        return 1.0
    return 0.0 if share >= 1 else float((1.0 - share) ** n_units)


def hidden_change_units(margin: float, leverage: float | None, alpha: float) -> float:
    """The fewest pilot units whose hidden-change floor is at most ``alpha`` (inf: none)."""
    share = _hidden_share(margin, leverage)
    if share is None:
        return math.inf
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


def bootstrap_t_tost_pvalues(shift: float, se: float, t_draws: np.ndarray,
                             margins: np.ndarray) -> np.ndarray:
    """The bootstrap-t TOST p of ``|true shift| >= margin``, for each of ``margins``.

    ``H0: shift >= +margin`` is rejected when ``(shift - margin) / se`` is low against the
    ``T*``; ``H0: shift <= -margin`` when ``(shift + margin) / se`` is high; the p is the larger
    one-sided p. Each counts the pilot itself as one draw, ``(1 + #) / (B + 1)``; undefined
    draws count against.
    """
    margins = np.asarray(margins, float)
    t = np.asarray(t_draws, float)
    if not (se > 0 and math.isfinite(se) and math.isfinite(shift)) or t.size == 0:
        return np.ones_like(margins)
    undefined = int(np.isnan(t).sum())
    ordered = np.sort(t[~np.isnan(t)])
    below = np.searchsorted(ordered, (shift - margins) / se, side="right")
    above = ordered.size - np.searchsorted(ordered, (shift + margins) / se, side="left")
    return (1 + undefined + np.maximum(below, above)) / (t.size + 1)


def hidden_share_pvalue(shift: float, se: float, t_draws: np.ndarray | None, margin: float,
                        leverage: float | None, n_units: int, identical: bool = False) -> float:
    """The claim's equivalence p: the largest over hidden shares (see the module).

    On the interval ``[s_i, s_i+1]`` of the grid the term ``(1 - s) ** n * p(margin -
    leverage * s)`` is at most ``(1 - s_i) ** n * p(margin - leverage * s_i+1)`` (the first
    factor falls with ``s``, the second rises), so the largest of those bounds the largest
    term from above. Identical outputs, or no resamples, leave only the floor (``p = 1`` at
    every smaller share); no leverage known leaves nothing (1).
    """
    floor = hidden_change_pvalue(margin, leverage, n_units)
    if identical or floor >= 1:
        return floor
    if t_draws is None:
        return 1.0
    top = min(margin / leverage, 1.0)
    shares = np.linspace(0.0, top, HIDDEN_SHARE_STEPS + 1)
    visible = np.maximum(margin - leverage * shares[1:], 0.0)
    terms = (1 - shares[:-1]) ** n_units * bootstrap_t_tost_pvalues(shift, se, t_draws, visible)
    return float(max(terms.max(), floor))
