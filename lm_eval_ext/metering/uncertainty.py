"""How much a window's joules and seconds would move in a repeat of the same run, from one run.

A window is cut into slices of at least :data:`RECORDED_SLICE_SECONDS` at the end of a forward
call (no extra synchronisation: the forward clock has just synchronised); each slice keeps its
seconds, joules and forward calls, and the results file keeps them all. The estimate joins
consecutive slices into stretches of at least :data:`SLICE_SECONDS`. Run-to-run noise is
read off the per-forward rates (joules per forward, seconds per forward), whose second
differences cancel the slow drift of a length-sorted workload (a linear trend exactly):

    Var(total) ~= sum_s f_s^2 * mean((r[s+1] - 2 r[s] + r[s-1])^2) / 6

which is right whether the noise is per forward call (host jitter) or per slice (clock and
power state over about a second). The energy counter's steps (``(P x period)^2 / 12`` at each
read) are taken out of the slices' differences, where neighbours share them, and added once
for the window's two edges, where the total carries them. A window of fewer than
:data:`MIN_SLICES` slices besides its first (which pays one-time costs every repeat pays
again, so it is no noise) has no estimate (``None``); with few slices the estimate is itself
uncertain, so it is scaled by ``t(0.975, df = slices / 2) / 1.96`` (about the multiplier that
gives 95% in an independent simulation).

This sees noise inside one run only. Repeated runs of the same cells on an H100 moved by more:
a run-level offset (the host's speed at batch 1, the GPU's clock state) shared by every slice
of a run. So the stated SE adds a relative run-to-run term measured by repeats
(:data:`RUN_TO_RUN_CV_JOULES`, :data:`RUN_TO_RUN_CV_SECONDS`):

    SE^2 = within^2 + (cv x total)^2

``benchmarks/energy_repeats.py`` measured both terms and the coverage of the sum (leaving out
each cell's own repeats from the cv it is checked with): docs/energy.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: a recorded slice ends at the first forward call that ends this long after it began
RECORDED_SLICE_SECONDS = 0.25
#: the estimate's slices: recorded ones joined until at least this long
SLICE_SECONDS = 1.0
#: fewer slices than this give no within-run estimate
MIN_SLICES = 4
#: two-sided 95% normal quantile, for the intervals printed beside a figure
Z95 = 1.959963984540054
#: run-to-run coefficient of variation of a cell's joules and seconds, pooled over repeated
#: campaigns (11 degrees of freedom; benchmarks/results/energy_2026-12-05/energy_repeats.json
#: ``run_to_run``: SmolLM2-135M, 60 items a cell, one H100)
RUN_TO_RUN_CV_JOULES = 0.041
#: a side whose SE is over this share of its value gives no ratio interval (the log-scale
#: delta method does not hold there: the figure is not resolved)
MAX_RELATIVE_SE = 0.5
RUN_TO_RUN_CV_SECONDS = 0.046


@dataclass(frozen=True)
class Slice:
    """A stretch of one window: seconds, joules (None: not measured) and forward calls."""

    seconds: float
    joules: float | None
    forwards: int


def _mssd_total_variance(values: Sequence[float], weights: Sequence[float],
                         edge_variance: float = 0.0) -> float:
    """``sum w_s^2 * sigma^2`` over one contiguous run, sigma^2 from second differences.

    ``x[s+1] - 2 x[s] + x[s-1]`` of independent noise has variance ``6 sigma^2`` and is free
    of any linear trend (a length-sorted workload's rates drift smoothly). ``edge_variance``:
    the counter's step error at each slice edge (its variance), which the slices share with
    their neighbours and the total does not carry (it telescopes to the two window edges):
    its expected part of each squared second difference is taken out (floored at 0).
    """
    squares = []
    for i in range(1, len(values) - 1):
        a, b, c = weights[i - 1], weights[i], weights[i + 1]
        second = values[i + 1] - 2 * values[i] + values[i - 1]
        steps = (1 / a) ** 2 + (2 / b + 1 / a) ** 2 + (1 / c + 2 / b) ** 2 + (1 / c) ** 2
        squares.append(second * second - edge_variance * steps)
    return sum(w * w for w in weights) * max(sum(squares) / len(squares), 0.0) / 6.0


def _rates(slices: Sequence[Slice], field: str) -> tuple[list[float], list[float]]:
    """Per-forward rates of ``field`` and their weights (slices without forwards: per second)."""
    values, weights = [], []
    for s in slices:
        amount = getattr(s, field)
        unit = float(s.forwards) if s.forwards > 0 else s.seconds
        values.append(amount / unit)
        weights.append(unit)
    return values, weights


def joined(run: Sequence[Slice], seconds: float = SLICE_SECONDS) -> list[Slice]:
    """Consecutive slices joined until each is at least ``seconds`` long."""
    out: list[Slice] = []
    open_: Slice | None = None
    for s in run:
        open_ = s if open_ is None else _join(open_, s)
        if open_.seconds >= seconds:
            out.append(open_)
            open_ = None
    if open_ is not None:  # a tail under half the length joins the slice before
        out.append(_join(out.pop(), open_) if out and open_.seconds < seconds / 2 else open_)
    return out


def _join(a: Slice, b: Slice) -> Slice:
    joules = None if a.joules is None or b.joules is None else a.joules + b.joules
    return Slice(a.seconds + b.seconds, joules, a.forwards + b.forwards)


@dataclass(frozen=True)
class WithinRunError:
    """Standard errors of one or more windows' total seconds and joules (None: not estimable)."""

    se_seconds: float | None
    se_joules: float | None
    slices: int

    @staticmethod
    def of(runs: Sequence[Sequence[Slice]], counter_period_s: float,
           slice_seconds: float = SLICE_SECONDS) -> WithinRunError:
        """The error of the sum over contiguous ``runs`` of recorded slices (independent windows).

        A run of fewer than :data:`MIN_SLICES` joined slices makes the whole estimate None.
        """
        joined_runs = [joined(r, slice_seconds) for r in runs if r]
        count = sum(len(r) for r in joined_runs)
        # each block's first slice pays one-time costs (first forwards, captures) that every
        # repeat pays again: not noise, so it is left out of the estimate
        runs = [r[1:] for r in joined_runs]
        if not runs or any(len(r) < MIN_SLICES for r in runs):
            return WithinRunError(None, None, count)
        scale = few_slices_factor(sum(len(r) for r in runs))
        var_t = sum(_mssd_total_variance(*_rates(r, "seconds")) for r in runs)
        if any(s.joules is None for r in runs for s in r):
            return WithinRunError(scale * math.sqrt(var_t), None, count)
        var_e = 0.0
        for run in runs:
            seconds = sum(s.seconds for s in run)
            watts = sum(s.joules for s in run) / seconds if seconds > 0 else 0.0
            edge = (watts * counter_period_s) ** 2 / 12.0  # a step read at a random phase
            var_e += _mssd_total_variance(*_rates(run, "joules"), edge) + 2.0 * edge
        return WithinRunError(scale * math.sqrt(var_t), scale * math.sqrt(var_e), count)

    def stated(self, seconds: float, joules: float | None) -> tuple[float | None, float | None]:
        """The SEs a results file states: within-run and the run-to-run term together."""
        se_t = None if self.se_seconds is None else math.hypot(
            self.se_seconds, RUN_TO_RUN_CV_SECONDS * seconds)
        se_e = None if self.se_joules is None or joules is None else math.hypot(
            self.se_joules, RUN_TO_RUN_CV_JOULES * joules)
        return se_t, se_e


def few_slices_factor(slices: int) -> float:
    """``t(0.975, slices / 2) / z(0.975)``: the estimate's own uncertainty with few slices."""
    from scipy import stats

    return float(stats.t.ppf(0.975, max(slices // 2, 1)) / Z95)


def resolved(value: float | None, se: float | None) -> bool:
    """A positive value whose SE is known and at most :data:`MAX_RELATIVE_SE` of it."""
    return (value is not None and se is not None and math.isfinite(value)
            and math.isfinite(se) and value > 0 and se <= MAX_RELATIVE_SE * value)


def ratio_interval(numerator: float | None, se_numerator: float | None,
                   denominator: float | None, se_denominator: float | None,
                   z: float = Z95) -> tuple[float | None, float | None]:
    """A ratio's interval on the log scale (delta method, independent sides).

    Nones where a side is not :func:`resolved`.
    """
    if not (resolved(numerator, se_numerator) and resolved(denominator, se_denominator)):
        return None, None
    ratio = numerator / denominator
    half = z * math.hypot(se_numerator / numerator, se_denominator / denominator)
    return ratio * math.exp(-half), ratio * math.exp(half)
