"""Is a pilot's shift inside ``(-margin, +margin)``? One claim's equivalence p (no I/O).

Take the null ``shift >= +margin`` (the other side is the mirror image). A protocol can carry
part of it in **broken units**: a share ``s`` of the instrument's units, each moving the
contrast by the most any unit can (``leverage``: points per share of units; 100 for one
model's accuracy, 200 for a difference of two models). The rest of the units (the share ``1 -
s``) then shift the contrast by ``(margin - leverage * s) / (1 - s)`` on average. A pilot of
``n`` units catches ``K`` broken units: Binomial(``n``, ``s``), or hypergeometric where the
pilot is drawn without replacement from an instrument of known size. Given ``K = k``, the pilot
less its ``k`` units moved furthest up is a sample of the rest, so a test of what it shows
against the rest's shift is a valid conditional test. Hence the claim's p

``max over s and over k <= j of  P(K = k | s) * p_k(s) / c_k``

where ``j`` is how many of the pilot's units moved by the full leverage (``K`` can be no
larger), ``p_k(s)`` the **studentised bootstrap (bootstrap-t)** one-sided p of the pilot less
its ``k`` furthest units against the rest's shift, and ``c_0 = 1 - CAUGHT_SHARE``, ``c_k =
CAUGHT_SHARE * 2 ** -k`` split alpha between the scenarios (they sum to at most 1, so the
chance of certifying is at most ``sum_k P(K = k) * alpha * c_k / P(K = k) <= alpha``):

* ``s = 0``, ``k = 0``: the plain bootstrap-t of the pilot against the margin;
* ``k = 0`` at the largest ``s``: the exact **hidden-change floor**, the chance that the pilot
  missed every unit the protocol must change (the p of identical outputs, the least any pilot
  of ``n`` units can give);
* ``k >= 1``: the pilot caught ``k`` broken units and what it shows of the rest is inside the
  margin: bounded as the missed ones are (before, nothing bounded this case).

A pilot (or the rest of it) whose units all moved alike by nothing shows a rest that must
itself hide its shift: its p is the chance of missing those units too. A resample whose
standard error is 0 (it drew only unchanged units) is studentised by the pilot's own standard
error, so one changed item weighs as little as it should. ``s`` is taken on a grid, each
interval bounded by its worst corner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import special

#: intervals of the broken share ``s`` between 0 and ``margin / leverage``
HIDDEN_SHARE_STEPS = 400
#: the share of alpha kept for pilots that caught broken units (``k >= 1``)
CAUGHT_SHARE = 0.05
#: pilots showing more full-leverage units than this on a side are not certified on that side
MAX_CAUGHT = 8


@dataclass(frozen=True)
class Visible:
    """What a pilot (or a pilot less its furthest units) shows of a claim's shift (points)."""

    shift: float
    se: float
    n_units: int
    identical: bool = False  # no unit moved at all
    #: studentised bootstrap draws (shift* - shift) / se* (None: no resamples)
    t_draws: np.ndarray | None = field(default=None, compare=False, repr=False)


def _hidden_share(margin: float, leverage: float | None) -> float | None:
    """``margin / leverage``: the share of units that must change (None: no leverage known)."""
    if leverage is None or not math.isfinite(leverage) or leverage <= 0:
        return None
    return margin / leverage


def _log_choose(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    return special.gammaln(np.add(a, 1)) - special.gammaln(np.add(b, 1)) \
        - special.gammaln(np.subtract(a, b) + 1)


def caught_probabilities(k: int, shares: np.ndarray, n_units: int,
                         population: np.ndarray | float | None = None) -> np.ndarray:
    """P(a pilot of ``n_units`` holds exactly ``k`` of a ``share`` of the units), per share.

    Binomial without a population size; hypergeometric (``share * population`` units, a real
    number through the gamma function) for a pilot drawn without replacement.
    """
    s = np.asarray(shares, float)
    out = np.zeros_like(s)
    if population is None:
        inside = (s > 0) & (s < 1)
        with np.errstate(divide="ignore"):
            log = (_log_choose(n_units, k) + k * np.log(np.where(inside, s, 0.5))
                   + (n_units - k) * np.log1p(-np.where(inside, s, 0.5)))
        out = np.where(inside, np.exp(log), out)
        return np.where(s <= 0, float(k == 0), np.where(s >= 1, float(k == n_units), out))
    big = np.broadcast_to(np.asarray(population, float), s.shape)
    hidden = s * big
    possible = (k <= hidden + 1e-9) & (n_units - k <= big - hidden + 1e-9)
    hid, free = np.where(possible, hidden, k), np.where(possible, big - hidden, n_units - k)
    log = _log_choose(hid, k) + _log_choose(free, n_units - k) - _log_choose(
        np.where(possible, big, n_units), n_units)
    out = np.where(possible, np.exp(log), 0.0)
    return np.where(s <= 0, float(k == 0), out)


def hidden_change_pvalue(margin: float, leverage: float | None, n_units: int,
                         population_units: int | None = None) -> float:
    """The chance of missing every unit a shift of ``margin`` needs (1: no leverage known)."""
    share = _hidden_share(margin, leverage)
    if share is None:
        return 1.0
    if share >= 1:
        return 0.0
    return float(caught_probabilities(0, np.array([share]), n_units, population_units)[0])


def share_grid(margin: float, leverage: float, steps: int = HIDDEN_SHARE_STEPS) -> np.ndarray:
    """Broken shares from 0 to ``margin / leverage`` (at most 1), in ``steps`` intervals."""
    return np.linspace(0.0, min(margin / leverage, 1.0), steps + 1)


def rest_margins(margin: float, leverage: float, shares: np.ndarray) -> np.ndarray:
    """The rest's share of the margin, ``(margin - leverage * s) / (1 - s)``, at least 0."""
    return np.maximum((margin - leverage * shares) / (1 - shares), 0.0)


def studentised(shift_draws: np.ndarray, shift: float, se_draws: np.ndarray,
                se: float) -> np.ndarray:
    """``T* = (shift* - shift) / se*`` per resample.

    A resample with ``se* = 0`` (it drew only units that moved alike, e.g. none changed) is
    studentised by the pilot's own ``se``: its ``T*`` is 0 when its shift equals the pilot's,
    and ``+-inf`` only when the pilot's own ``se`` is 0 too. An undefined resample (a ratio with
    no item) gives NaN, which counts against equivalence.
    """
    diff = np.asarray(shift_draws, float) - shift
    spread = np.asarray(se_draws, float)
    scale = np.where(spread > 0, spread, se)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(scale > 0, diff / np.where(scale > 0, scale, 1.0), np.copysign(np.inf, diff))
    t = np.where(diff == 0, 0.0, t)
    return np.where(np.isfinite(diff) & np.isfinite(spread), t, np.nan)


def one_sided_pvalues(seen: Visible, margins: np.ndarray, side: int) -> np.ndarray:
    """The bootstrap-t p of ``shift >= +margin`` (``side`` +1) or ``<= -margin`` (-1).

    The upper null is rejected when ``(shift - margin) / se`` is low against the ``T*``, the
    lower one when ``(shift + margin) / se`` is high. The pilot counts as one draw, ``(1 + #) /
    (B + 1)``; undefined draws count against.
    """
    margins = np.asarray(margins, float)
    t = seen.t_draws
    if not (seen.se > 0 and math.isfinite(seen.se) and math.isfinite(seen.shift)) or \
            t is None or t.size == 0:
        return np.ones_like(margins)
    undefined = int(np.isnan(t).sum())
    ordered = np.sort(t[~np.isnan(t)])
    if side > 0:
        hits = np.searchsorted(ordered, (seen.shift - margins) / seen.se, side="right")
    else:
        hits = ordered.size - np.searchsorted(ordered, (seen.shift + margins) / seen.se,
                                              side="left")
    return (1 + undefined + hits) / (t.size + 1)


def scenario_weight(k: int) -> float:
    """``c_k``: the share of alpha for pilots that caught ``k`` broken units."""
    return 1 - CAUGHT_SHARE if k == 0 else CAUGHT_SHARE * 2.0 ** -k


def _missed_rest(shares: np.ndarray, top: float, n_rest: int,
                 population_units: float | None) -> np.ndarray:
    """P(the pilot's ``n_rest`` other units miss the rest's own broken units), per share.

    The rest's broken units are all of ``top`` (the margin's share) but the ``shares`` already
    counted.
    """
    left = np.clip(1 - shares, 1e-12, None)
    rest = None if population_units is None else population_units * left
    return np.where(shares >= 1, 1.0, caught_probabilities(0, (top - shares) / left, n_rest,
                                                           rest))


def _side_pvalue(pilot: Visible, caught: Sequence[Visible], full_units: int, side: int,
                 margin: float, leverage: float, population_units: int | None) -> float:
    """``max over s, k <= j of P(K = k | s) p_k(s) / c_k`` for one side (see the module)."""
    if full_units > MAX_CAUGHT or len(caught) < full_units:
        return 1.0
    shares = share_grid(margin, leverage)
    top, n = shares[-1], pilot.n_units
    worst = 0.0
    for k, seen in enumerate([pilot, *caught[:full_units]]):
        if seen.identical or (seen.se == 0 and seen.shift == 0):
            # the rest shows nothing: its own shift is in units missed too
            terms = caught_probabilities(k, shares, n, population_units) * _missed_rest(
                shares, top, n - k, population_units)
            worst = max(worst, float(terms.max()) / scenario_weight(k))
            continue
        rest = rest_margins(margin, leverage, shares[1:])
        # P(K = k | s) falls with s for k = 0 but rises below k / n otherwise: both corners
        chance = np.maximum(caught_probabilities(k, shares[:-1], n, population_units),
                            caught_probabilities(k, shares[1:], n, population_units))
        worst = max(worst, float((chance * one_sided_pvalues(seen, rest, side)).max())
                    / scenario_weight(k))
    return worst


def equivalence_pvalue(pilot: Visible, margin: float, leverage: float | None, *,
                       caught_up: Sequence[Visible] = (), caught_down: Sequence[Visible] = (),
                       full_up: int = 0, full_down: int = 0,
                       population_units: int | None = None) -> float:
    """The claim's equivalence p: the larger side's (see the module).

    ``caught_up`` / ``caught_down``: the pilot less its 1, 2, ... units moved furthest up /
    down; ``full_up`` / ``full_down``: how many of its units moved by the full leverage. No
    leverage known leaves nothing (1); no resamples leave only identical outputs' floor.
    """
    if _hidden_share(margin, leverage) is None:
        return 1.0
    floor = hidden_change_pvalue(margin, leverage, pilot.n_units, population_units)
    if pilot.identical:
        return min(floor / scenario_weight(0), 1.0)
    if pilot.t_draws is None:
        return 1.0
    sides = ((+1, caught_up, full_up), (-1, caught_down, full_down))
    p = max(_side_pvalue(pilot, caught, full, side, margin, leverage, population_units)
            for side, caught, full in sides)
    return float(min(max(p, floor / scenario_weight(0)), 1.0))
