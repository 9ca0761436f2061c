"""Per-task, per-request-type accumulation of energy segments for one lm-eval run."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lm_eval_ext.metering.derived import DerivedEnergy, combine
from lm_eval_ext.metering.idle import idle_correction
from lm_eval_ext.metering.meter import EnergyMeter, EnergyWindow, assess_energy
from lm_eval_ext.metering.uncertainty import (
    RECORDED_SLICE_SECONDS,
    Slice,
    WithinRunError,
    resolved,
)

#: flag of a window whose forward time cannot be seen (the engine runs in another process)
FORWARD_NOT_OBSERVABLE = "forward_time_not_observable"


def _share(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole or whole <= 0 else part / whole


@dataclass
class _Tally:
    """Raw sums of segments; quality checks run on the sums (see :func:`assess_energy`)."""

    seconds: float = 0.0
    forward_seconds: float = 0.0
    joules_by_device: dict[int, float] = field(default_factory=dict)
    unavailable: bool = False  # a segment had no reading (counter decreased, no counter)
    n_requests: int = 0
    windows: int = 0
    flags: set[str] = field(default_factory=set)
    runs: list[list[Slice]] = field(default_factory=list)  # slices of each measured block
    spans: list[tuple[float, float]] = field(default_factory=list)  # each segment's edges

    def add(self, segment: EnergyWindow, forwards: int = 0, *, sliced: bool = False) -> None:
        """Add a segment; ``sliced``: a slice cut ends it, its window goes on (not counted)."""
        self.seconds += segment.seconds
        self.windows += 0 if sliced else 1
        self.flags.update(segment.flags)
        self.runs[-1].append(Slice(segment.seconds, segment.total_joules, forwards))
        if segment.started_at is not None:
            self.spans.append((segment.started_at, segment.started_at + segment.seconds))
        if segment.joules_by_device is None:
            self.unavailable = True
            return
        for device, joules in segment.joules_by_device.items():
            self.joules_by_device[device] = self.joules_by_device.get(device, 0.0) + joules

    def merge(self, other: _Tally) -> None:
        self.seconds += other.seconds
        self.forward_seconds += other.forward_seconds
        self.windows += other.windows
        self.n_requests += other.n_requests
        self.flags |= other.flags
        self.unavailable |= other.unavailable
        self.runs += other.runs
        self.spans += other.spans
        for device, joules in other.joules_by_device.items():
            self.joules_by_device[device] = self.joules_by_device.get(device, 0.0) + joules

    def slice_record(self) -> dict[str, list]:
        """Every slice as lists (seconds, joules, forwards) and the length of each block."""
        slices = [s for run in self.runs for s in run]
        return {"seconds": [s.seconds for s in slices], "joules": [s.joules for s in slices],
                "forwards": [s.forwards for s in slices], "runs": [len(r) for r in self.runs]}

    def as_dict(self, meter: EnergyMeter, forward_observable: bool = True) -> dict[str, Any]:
        joules, quality = None, []
        if self.windows:
            by_device, quality = assess_energy(
                self.seconds, None if self.unavailable else self.joules_by_device,
                meter.source.counter_period_s)
            joules = None if by_device is None else float(sum(by_device.values()))
        error = WithinRunError.of(self.runs, meter.source.counter_period_s)
        se_seconds, se_joules = error.stated(self.seconds, joules)
        entry = {
            # no window: no request reached the model (lm-eval's --use_cache answered them),
            # so nothing was measured, not 0 s
            "inference_seconds": self.seconds if self.windows else None,
            "inference_seconds_se": se_seconds,
            "forward_seconds": self.forward_seconds if forward_observable else None,
            "forward_share": _share(self.forward_seconds, self.seconds) if forward_observable
            else None,
            "energy_joules": joules,
            "energy_joules_se": se_joules,
            **_idle_fields(meter, joules, self.seconds, se_joules),
            "n_requests": self.n_requests,
            "windows": self.windows,
            "slices": error.slices,
        }
        if error.se_seconds is None and self.windows:
            quality.append("interval_not_estimable")
        if not self.windows:
            quality.append(NO_REQUESTS)
        elif se_seconds is not None and not resolved(self.seconds, se_seconds):
            quality.append(SECONDS_NOT_RESOLVED)
        flags = self.flags | set(quality) | set(entry.pop("_flags"))
        return {**entry, "flags": sorted(flags | (set() if forward_observable
                                                  else {FORWARD_NOT_OBSERVABLE}))}


#: the flag of a tally that no request reached (nothing measured)
NO_REQUESTS = "no_request_reached_the_model"
#: the flag of seconds whose SE is over half of them (no runtime interval: docs/energy.md)
SECONDS_NOT_RESOLVED = "seconds_not_resolved"


def _idle_fields(meter: EnergyMeter, joules: float | None, seconds: float,
                 se_joules: float | None) -> dict[str, Any]:
    """The idle-corrected energy, its SE (baseline and counter), the idle share; or Nones."""
    idle = meter.idle
    empty = {"energy_joules_idle_corrected": None, "energy_joules_idle_corrected_se": None,
             "energy_joules_idle_corrected_reason": None,
             "idle_joules": idle.total_watts * seconds if idle else None, "idle_share": None,
             "_flags": idle.flags() if idle else []}
    if joules is None or idle is None:
        return empty
    corrected = idle_correction(joules, seconds, idle.total_watts, idle.se_watts, se_joules)
    return {"energy_joules_idle_corrected": corrected.joules,
            "energy_joules_idle_corrected_se": corrected.se_joules,
            "energy_joules_idle_corrected_reason": corrected.reason,
            "idle_joules": corrected.idle_joules, "idle_share": corrected.idle_share,
            "_flags": [*idle.flags(), *corrected.flags]}


class InferenceLedger:
    """Meters request groups, keyed by (task, request type); cut-outs exclude probes.

    ``measure`` opens a segment for one group; ``excluded`` (used inside it, e.g. around an
    automatic batch-size probe) closes the current segment and opens a new one afterwards,
    so the excluded work is in no segment. Segments are summed raw per device; the zero and
    short-window checks apply to each task's (and the run's) total, so a segment in which the
    counter did not move (a probe 1 ms after the start) adds 0 J rather than voiding the task.
    ``add_forward_seconds`` credits the synchronised time of single forward/generate calls;
    with ``forward_observable=False`` (an engine in another process) forward time is reported
    as null with the flag :data:`FORWARD_NOT_OBSERVABLE`, never as 0.

    A task whose answers were taken from a parent run is reported through :meth:`derive`
    (:class:`~lm_eval_ext.metering.derived.DerivedEnergy`); its re-check is metered with
    ``measure(..., recheck=True)``, kept under the task's ``measured_recheck`` and out of every
    total.
    """

    def __init__(self, meter: EnergyMeter, forward_observable: bool = True):
        self.meter = meter
        self.forward_observable = forward_observable
        self._tallies: dict[tuple[str, str], _Tally] = {}
        self._rechecks: dict[tuple[str, str], _Tally] = {}
        self._derived: dict[tuple[str, str], DerivedEnergy] = {}
        self._current: _Tally | None = None
        self._segment = 0
        self._segment_started = 0.0
        self._segment_forwards = 0
        self._excluding = False

    def _open_segment(self) -> None:
        self._segment += 1
        self._segment_forwards = 0
        self._segment_started = self.meter.begin_window(f"segment-{self._segment}")

    def _close_segment(self, sliced: bool = False) -> None:
        segment = self.meter.end_segment(f"segment-{self._segment}")
        self._current.add(segment, self._segment_forwards, sliced=sliced)

    @contextlib.contextmanager
    def measure(self, task: str, request_type: str, n_requests: int, *,
                recheck: bool = False) -> Iterator[None]:
        """Meter the block as work of ``task`` / ``request_type`` (not re-entrant).

        ``recheck``: the re-check of a derived task, kept out of the task's own sums.
        """
        if self._current is not None:  # nested call (e.g. rolling -> tokens): already metered
            yield
            return
        tallies = self._rechecks if recheck else self._tallies
        tally = tallies.setdefault((task, request_type), _Tally())
        tally.n_requests += n_requests
        tally.runs.append([])
        self._current = tally
        self._open_segment()
        try:
            yield
        finally:
            self._close_segment()
            self._current = None

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        """Leave the block out of the current window (no-op outside ``measure``)."""
        if self._current is None:
            yield
            return
        self._close_segment()
        self._excluding = True
        try:
            yield
        finally:
            self._excluding = False
            self._open_segment()

    def add_forward_seconds(self, seconds: float, ended_at: float | None = None) -> None:
        """Credit synchronised forward/generate time to the open window (if not excluded).

        ``ended_at``: the clock at the call's synchronised end; a slice of the window ends
        there once it is :data:`~lm_eval_ext.metering.uncertainty.RECORDED_SLICE_SECONDS` long.
        """
        if self._current is None or self._excluding:
            return
        self._current.forward_seconds += seconds
        self._segment_forwards += 1
        if ended_at is not None and ended_at - self._segment_started >= RECORDED_SLICE_SECONDS:
            self._close_segment(sliced=True)
            self._open_segment()

    def spans(self) -> dict[str, list[tuple[float, float]]]:
        """Each measured task's segment edges (clock times), re-checks left out."""
        out: dict[str, list[tuple[float, float]]] = {}
        for (task, _), tally in sorted(self._tallies.items()):
            out.setdefault(task, []).extend(tally.spans)
        return out

    def derive(self, task: str, request_type: str, derived: DerivedEnergy) -> None:
        """Report ``task`` / ``request_type`` with ``derived`` seconds and joules, not measured."""
        self._derived[(task, request_type)] = derived

    def summary(self) -> dict[str, Any]:
        """Totals and ``per_task`` breakdown (with ``request_types`` inside each task).

        Derived tasks carry the derived sums (flagged) in their entries and in the totals; a
        task's re-check window is its ``measured_recheck`` entry only.
        """
        total, per_task = _Tally(), {}
        for (task, request_type), tally in sorted(self._tallies.items()):
            entry = per_task.setdefault(task, {"_tally": _Tally(), "request_types": {}})
            entry["_tally"].merge(tally)
            entry["request_types"][request_type] = {
                **tally.as_dict(self.meter, self.forward_observable),
                "slice_record": tally.slice_record()}
            total.merge(tally)
        observable = self.forward_observable
        tasks = {t: {**e.pop("_tally").as_dict(self.meter, observable), **e}
                 for t, e in per_task.items()}
        for task, entry in tasks.items():
            if entry["energy_joules"] is None and self.meter.source.name != "unavailable":
                warnings.warn(
                    f"task {task!r}: energy unavailable ({', '.join(entry['flags'])}); reported "
                    "as null, not 0 J. Meter longer windows (more requests per task).",
                    stacklevel=2)
        totals = total.as_dict(self.meter, observable) if total.windows else None
        rechecks = self._recheck_entries()
        for (task, request_type), derived in sorted(self._derived.items()):
            entry = derived.entry()
            measured = tasks.get(task)
            types = {**(measured or {}).get("request_types", {}), request_type: entry}
            tasks[task] = {**combine([measured, entry]), "request_types": types}
            totals = combine([totals, entry])
        for task, recheck in rechecks.items():
            if task in tasks:
                tasks[task]["measured_recheck"] = recheck
        return {"total": totals or total.as_dict(self.meter, observable), "per_task": tasks}

    def _recheck_entries(self) -> dict[str, dict[str, Any]]:
        """Each task's re-check windows as one entry (request types merged)."""
        merged: dict[str, _Tally] = {}
        for (task, _), tally in sorted(self._rechecks.items()):
            merged.setdefault(task, _Tally()).merge(tally)
        return {task: tally.as_dict(self.meter, self.forward_observable)
                for task, tally in merged.items()}
