"""Idle power: samples taken around the work, the baseline they give, and what it may correct.

A GPU's idle power is not a constant: between cells of one campaign on one H100 it read
123.8 W, then 130.1 W (right after an int8 load), then 123.8 W again. So the baseline is
sampled before the work and again after it, and its uncertainty is the spread *between* the
samples as well as the sampling noise within each (:class:`IdleBaseline`). An idle-corrected
figure below zero (the GPU drew less than its "idle" power through the window) is reported as
not measurable, never as a number (:func:`idle_correction`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: a correction within this many standard errors of zero is flagged as not resolved
RESOLVED_SE = 1.96
#: samples further apart than this many within-sample SEs are flagged ``idle_drift``
DRIFT_SE = 3.0


@dataclass(frozen=True)
class IdlePower:
    """One idle sample, in sub-intervals so that its own spread is known.

    Attributes:
        watts_by_device: Mean idle watts per device.
        sd_watts_by_device: SD of the sub-interval means per device (None with one interval).
        seconds: Total sampled seconds.
        intervals: Number of sub-intervals.
        when: ``before`` (the work) or ``after`` it.
    """

    watts_by_device: Mapping[int, float]
    sd_watts_by_device: Mapping[int, float] | None
    seconds: float
    intervals: int
    when: str = "before"

    @property
    def total_watts(self) -> float:
        """Idle watts summed over devices."""
        return float(sum(self.watts_by_device.values()))

    def se_watts(self) -> float | None:
        """Standard error of ``total_watts`` (sub-interval spread / sqrt(intervals))."""
        if not self.sd_watts_by_device:
            return None
        return math.sqrt(sum(sd**2 for sd in self.sd_watts_by_device.values()) / self.intervals)


@dataclass(frozen=True)
class IdleBaseline:
    """The idle baseline of one run: the mean of its samples and how far it can be trusted.

    ``se_watts`` is the uncertainty of the idle power *during the work*, which no sample saw:
    with two or more samples it is the SD between them (what one more reading could be) plus
    their own sampling error; with one sample only its sampling error, which understates it
    (flagged ``idle_sampled_once``).
    """

    samples: tuple[IdlePower, ...]

    @property
    def watts_by_device(self) -> dict[int, float]:
        """Mean idle watts per device over the samples."""
        devices = self.samples[0].watts_by_device
        return {d: statistics.fmean(s.watts_by_device.get(d, 0.0) for s in self.samples)
                for d in devices}

    @property
    def total_watts(self) -> float:
        """Mean idle watts summed over devices."""
        return statistics.fmean(s.total_watts for s in self.samples)

    @property
    def within_se_watts(self) -> float | None:
        """Sampling error of the mean from the samples' own sub-interval spreads."""
        ses = [s.se_watts() for s in self.samples]
        if any(se is None for se in ses):
            return None
        return math.sqrt(sum(se * se for se in ses)) / len(ses)

    @property
    def between_sd_watts(self) -> float | None:
        """SD of the samples' totals (None with one sample)."""
        if len(self.samples) < 2:
            return None
        return statistics.stdev(s.total_watts for s in self.samples)

    @property
    def se_watts(self) -> float | None:
        """Uncertainty of the idle power during the work (see the class docstring)."""
        within, between = self.within_se_watts, self.between_sd_watts
        if between is None:
            return within
        return math.hypot(within or 0.0, between)

    def flags(self) -> list[str]:
        """``idle_sampled_once``; ``idle_drift`` when the samples differ beyond their noise."""
        if len(self.samples) < 2:
            return ["idle_sampled_once"]
        totals = [s.total_watts for s in self.samples]
        spread = max(totals) - min(totals)
        ses = [s.se_watts() for s in self.samples]
        if None in ses:  # a sample of one interval knows no spread: nothing to judge against
            return []
        return ["idle_drift"] if spread > DRIFT_SE * max(max(ses), 1e-9) else []

    def as_dict(self) -> dict[str, Any]:
        """``config.metering.idle_power``: the baseline, its uncertainty, every sample."""
        first = self.samples[0]
        return {
            "watts": self.total_watts, "se_watts": self.se_watts,
            "within_se_watts": self.within_se_watts, "between_sd_watts": self.between_sd_watts,
            "sd_watts_by_device": dict(first.sd_watts_by_device or {}),
            "seconds": sum(s.seconds for s in self.samples), "intervals": first.intervals,
            "samples": [{"when": s.when, "watts": s.total_watts, "se_watts": s.se_watts(),
                         "seconds": s.seconds, "intervals": s.intervals} for s in self.samples],
        }


@dataclass(frozen=True)
class IdleCorrection:
    """Raw joules less the idle baseline over the same seconds, or why that is not a number.

    Attributes:
        idle_joules: Baseline watts x seconds.
        joules: The idle-corrected joules; None when below zero (not measurable here).
        se_joules: Its standard error (the baseline's, and the raw total's where given).
        idle_share: ``idle_joules / raw joules``; None when above 1.
        flags: ``idle_corrected_below_zero``, ``idle_corrected_within_noise``.
        reason: Why ``joules`` is None, in words (None when it is a number).
    """

    idle_joules: float
    joules: float | None
    se_joules: float | None
    idle_share: float | None
    flags: tuple[str, ...]
    reason: str | None


def idle_correction(joules: float, seconds: float, watts: float, se_watts: float | None,
                    raw_se_joules: float | None = None) -> IdleCorrection:
    """``joules - watts x seconds``, reported as None when it is below zero.

    A negative value means the GPU drew less than the baseline through the window: either the
    work's energy above idle is too small to resolve (within the baseline's uncertainty:
    flagged ``idle_corrected_within_noise`` too) or the baseline did not hold. A positive value
    within :data:`RESOLVED_SE` standard errors of zero is kept and flagged. The standard error
    is the baseline's over the window and ``raw_se_joules`` (the raw total's) together.
    """
    idle_joules = watts * seconds
    corrected = joules - idle_joules
    se = None if se_watts is None else se_watts * seconds
    if se is not None and raw_se_joules is not None:
        se = math.hypot(se, raw_se_joules)
    flags = []
    within = se is not None and abs(corrected) < RESOLVED_SE * se
    if within:
        flags.append("idle_corrected_within_noise")
    if corrected >= 0:
        return IdleCorrection(idle_joules, corrected, se, idle_joules / joules if joules > 0
                              else None, tuple(flags), None)
    mean_watts = joules / seconds if seconds > 0 else math.nan
    how = ("within the baseline's uncertainty: the work's energy above idle is too small to "
           "resolve here" if within else "beyond the baseline's uncertainty: the idle baseline "
           "did not hold through the window")
    reason = (f"the window drew {mean_watts:.1f} W on average, below the idle baseline of "
              f"{watts:.1f} W" + (f" (SE {se_watts:.1f} W)" if se_watts is not None else "")
              + f": {how}")
    return IdleCorrection(idle_joules, None, se, None,
                          ("idle_corrected_below_zero", *flags), reason)


def physical_or_none(corrected: float | None, share: float | None
                     ) -> tuple[float | None, float | None]:
    """An idle-corrected energy and idle share as written by any version: impossible ones None.

    For results files written before the check (a negative corrected energy, a share above 1).
    """
    if corrected is not None and corrected < 0:
        corrected = None
    if share is not None and share > 1:
        share = None
    return corrected, share


def merge_samples(samples: Sequence[IdlePower]) -> IdleBaseline | None:
    """The baseline of these samples (None when there are none)."""
    return IdleBaseline(tuple(samples)) if samples else None
