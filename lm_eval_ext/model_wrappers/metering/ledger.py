"""Per-task, per-request-type accumulation of energy windows for one lm-eval run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lm_eval_ext.model_wrappers.metering.meter import EnergyMeter, EnergyWindow


@dataclass
class _Tally:
    seconds: float = 0.0
    forward_seconds: float = 0.0
    joules: float | None = 0.0
    idle_corrected: float | None = 0.0
    n_requests: int = 0
    windows: int = 0
    flags: set[str] = field(default_factory=set)

    def add(self, window: EnergyWindow) -> None:
        self.seconds += window.seconds
        self.windows += 1
        self.flags.update(window.flags)
        self.joules = None if self.joules is None or window.total_joules is None else (
            self.joules + window.total_joules)
        corrected = window.idle_corrected_joules
        self.idle_corrected = None if self.idle_corrected is None or corrected is None else (
            self.idle_corrected + corrected)

    def merge(self, other: _Tally) -> None:
        self.seconds += other.seconds
        self.forward_seconds += other.forward_seconds
        self.windows += other.windows
        self.n_requests += other.n_requests
        self.flags |= other.flags
        self.joules = None if self.joules is None or other.joules is None else (
            self.joules + other.joules)
        self.idle_corrected = None if self.idle_corrected is None or other.idle_corrected is None \
            else self.idle_corrected + other.idle_corrected

    def as_dict(self) -> dict[str, Any]:
        has_energy = self.windows > 0 and self.joules is not None
        return {
            "inference_seconds": self.seconds,
            "forward_seconds": self.forward_seconds,
            "energy_joules": self.joules if has_energy else None,
            "energy_joules_idle_corrected": self.idle_corrected if has_energy else None,
            "n_requests": self.n_requests,
            "windows": self.windows,
            "flags": sorted(self.flags),
        }


class InferenceLedger:
    """Meters request groups, keyed by (task, request type); cut-outs exclude probes.

    ``measure`` opens a window for one group; ``excluded`` (used inside it, e.g. around an
    automatic batch-size probe) closes the current segment and opens a new one afterwards,
    so the excluded work is in no window. ``add_forward_seconds`` credits the synchronised
    time of single forward/generate calls, a diagnostic of how much of a window is model work.
    """

    def __init__(self, meter: EnergyMeter):
        self.meter = meter
        self._tallies: dict[tuple[str, str], _Tally] = {}
        self._current: tuple[str, str] | None = None
        self._segment = 0
        self._excluding = False

    def _open_segment(self) -> None:
        self._segment += 1
        self.meter.begin_window(f"segment-{self._segment}")

    def _close_segment(self) -> None:
        window = self.meter.end_window(f"segment-{self._segment}")
        self._tallies[self._current].add(window)

    @contextlib.contextmanager
    def measure(self, task: str, request_type: str, n_requests: int) -> Iterator[None]:
        """Meter the block as work of ``task`` / ``request_type`` (not re-entrant)."""
        if self._current is not None:  # nested call (e.g. rolling -> tokens): already metered
            yield
            return
        key = (task, request_type)
        tally = self._tallies.setdefault(key, _Tally())
        tally.n_requests += n_requests
        self._current = key
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

    def add_forward_seconds(self, seconds: float) -> None:
        """Credit synchronised forward/generate time to the open window (if not excluded)."""
        if self._current is not None and not self._excluding:
            self._tallies[self._current].forward_seconds += seconds

    def summary(self) -> dict[str, Any]:
        """Totals and ``per_task`` breakdown (with ``request_types`` inside each task)."""
        total, per_task = _Tally(), {}
        for (task, request_type), tally in sorted(self._tallies.items()):
            entry = per_task.setdefault(task, {"_tally": _Tally(), "request_types": {}})
            entry["_tally"].merge(tally)
            entry["request_types"][request_type] = tally.as_dict()
            total.merge(tally)
        tasks = {t: {**e.pop("_tally").as_dict(), **e} for t, e in per_task.items()}
        return {"total": total.as_dict(), "per_task": tasks}
