"""A run's written cost read back: a value no run can measure is not a measurement.

A results file may be damaged or hand-edited after the run. Its seconds and joules are read as
not measured (None, with a flag ``<key>_impossible``) where they are physically impossible:

* not a number, not finite, or below :data:`PHYSICAL_FLOOR` (zero, negative, a nanosecond);
* inference seconds beyond the evaluation's own wall time (inference runs inside it; derived
  seconds, taken from a parent run, are exempt);
* joules whose mean power over the inference seconds lies outside :data:`POWER_RANGE_W`;
  where the seconds are missing or impossible, joules beyond its top over the wall time;
* a standard error that is negative or not finite; a forward share outside [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

#: below a nanosecond or a nanojoule no run measures anything (a timer's resolution; a watt
#: for a nanosecond): such a value is damage, not a measurement
PHYSICAL_FLOOR = 1e-9
#: the mean power a metered inference window can draw, in watts: from a milliwatt (below any
#: CPU package or GPU at work) to 100 kW (beyond any node one meter reads)
POWER_RANGE_W = (1e-3, 1e5)
#: slack on the wall-time bound: the evaluation's clock and the windows' are read apart
WALL_SLACK = (1.01, 1.0)  # factor, seconds


def measured_or_none(value: object) -> float | None:
    """A run's seconds or joules as written: None when missing or physically impossible.

    Impossible: not a number, not finite, or below :data:`PHYSICAL_FLOOR` (zero, negative).
    """
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= PHYSICAL_FLOOR else None


def _spread_or_none(value: object) -> float | None:
    """A standard error as written: None when missing, negative or not finite."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


@dataclass(frozen=True)
class RunCost:
    """A run's cost as read back; None = not measured (or impossible: see ``impossible``)."""

    inference_seconds: float | None
    inference_seconds_se: float | None
    energy_joules: float | None
    energy_joules_se: float | None
    forward_share: float | None
    #: the keys written but impossible (each becomes the flag ``<key>_impossible``)
    impossible: tuple[str, ...]


def run_cost(metering: Mapping[str, object], wall_seconds: float | None,
             derived: bool = False) -> RunCost:
    """The cost in ``metering`` (``config.metering``), each value checked as the module says.

    ``wall_seconds``: the evaluation's wall time (lm-eval's ``total_evaluation_time_seconds``;
    None: unknown); ``derived``: seconds and joules taken from a parent run.
    """
    seconds = measured_or_none(metering.get("inference_seconds"))
    if (seconds is not None and not derived and wall_seconds is not None
            and math.isfinite(wall_seconds)
            and seconds > wall_seconds * WALL_SLACK[0] + WALL_SLACK[1]):
        seconds = None
    joules = measured_or_none(metering.get("energy_joules"))
    if joules is not None and seconds is not None and not (
            POWER_RANGE_W[0] <= joules / seconds <= POWER_RANGE_W[1]):
        joules = None
    if (joules is not None and seconds is None and not derived and wall_seconds is not None
            and math.isfinite(wall_seconds)
            and joules > POWER_RANGE_W[1] * (wall_seconds * WALL_SLACK[0] + WALL_SLACK[1])):
        joules = None  # no window inside the wall time holds them, whatever its seconds
    share = metering.get("forward_share")
    share = share if isinstance(share, (int, float)) and not isinstance(share, bool) \
        and 0 <= share <= 1 else None
    cost = {"inference_seconds": seconds, "energy_joules": joules, "forward_share": share,
            "inference_seconds_se": _spread_or_none(metering.get("inference_seconds_se"))
            if seconds is not None else None,
            "energy_joules_se": _spread_or_none(metering.get("energy_joules_se"))
            if joules is not None else None}
    impossible = tuple(key for key, kept in cost.items()
                       if kept is None and metering.get(key) is not None
                       and not (key.endswith("_se") and cost[key.removesuffix("_se")] is None))
    return RunCost(**cost, impossible=impossible)
