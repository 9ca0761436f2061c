"""Energy windows over a cumulative counter, read at device-synchronised edges."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lm_eval_ext.model_wrappers.metering.sources import EnergySource

#: A window shorter than this many counter periods is flagged ``short_window``.
SHORT_WINDOW_PERIODS = 10


@dataclass(frozen=True)
class EnergyWindow:
    """One measured window.

    Attributes:
        key: The window's name.
        seconds: Wall-clock seconds between the synchronised edges.
        joules_by_device: Energy per device in joules, or None when not measured.
        source: ``nvml``, ``rapl`` or ``unavailable``.
        flags: Quality flags (see :class:`EnergyMeter`).
        idle_watts_by_device: Idle power sampled before the run, when available.
    """

    key: str
    seconds: float
    joules_by_device: Mapping[int, float] | None
    source: str
    flags: tuple[str, ...] = ()
    idle_watts_by_device: Mapping[int, float] | None = field(default=None)

    @property
    def total_joules(self) -> float | None:
        """Sum over devices, or None when energy was not measured."""
        if self.joules_by_device is None:
            return None
        return float(sum(self.joules_by_device.values()))

    @property
    def idle_corrected_joules(self) -> float | None:
        """Total minus idle power times duration (reported beside the raw total)."""
        total = self.total_joules
        if total is None or not self.idle_watts_by_device:
            return None
        return total - sum(self.idle_watts_by_device.values()) * self.seconds


class EnergyMeter:
    """Zeus-style named windows over an :class:`EnergySource`.

    Flags a window may carry: ``short_window`` (shorter than 10 counter periods: the counter's
    ~100 ms steps make it imprecise), ``counter_decreased`` (energy unavailable, never 0),
    ``counter_wrapped`` (RAPL; corrected), ``zero_energy`` (the counter did not advance:
    reported as unavailable), ``other_gpu_processes`` (someone else used the GPU at an edge),
    ``no_device_sync`` (edges not synchronised), ``energy_unavailable`` (no counter).

    Args:
        source: The counter.
        sync: Called at both edges (``torch.cuda.synchronize``) so that a window contains all
            and only the work dispatched inside it; None disables it (flagged).
        clock: Seconds clock (injectable for tests).
    """

    def __init__(self, source: EnergySource, *, sync: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.source = source
        self.sync = sync
        self._clock = clock
        self._open: dict[str, tuple[float, Mapping[int, float], int]] = {}
        self.idle_watts: dict[int, float] | None = None

    def _edge(self) -> tuple[float, Mapping[int, float]]:
        if self.sync is not None:
            self.sync()
        return self._clock(), self.source.read()

    def begin_window(self, key: str) -> None:
        """Open window ``key`` (names may overlap; reusing an open name is an error)."""
        if key in self._open:
            raise ValueError(f"measurement window {key!r} is already open")
        start_time, reading = self._edge()
        self._open[key] = (start_time, reading, self.source.other_processes())

    def end_window(self, key: str) -> EnergyWindow:
        """Close window ``key`` and return its measurement."""
        if key not in self._open:
            raise ValueError(f"measurement window {key!r} was never opened")
        start_time, start, others_before = self._open.pop(key)
        end_time, end = self._edge()
        seconds = end_time - start_time
        joules, flags = self.source.delta(start, end)
        flags = list(flags)
        if joules is not None and sum(joules.values()) <= 0.0:
            joules = None
            flags.append("zero_energy")
        if self.source.counter_period_s and seconds < SHORT_WINDOW_PERIODS * self.source.counter_period_s:
            flags.append("short_window")
        if others_before or self.source.other_processes():
            flags.append("other_gpu_processes")
        if self.sync is None and self.source.name == "nvml":
            flags.append("no_device_sync")
        window = EnergyWindow(key, seconds, joules, self.source.name, tuple(sorted(set(flags))),
                              self.idle_watts)
        if {"zero_energy", "counter_decreased"} & set(flags):
            warnings.warn(
                f"energy window {key!r}: {', '.join(window.flags)}; its energy is reported as "
                "unavailable (null), not 0 J. Meter longer windows (more requests per task).",
                stacklevel=2,
            )
        return window

    def measure_idle(self, seconds: float = 1.0, sleep: Callable[[float], None] = time.sleep
                     ) -> dict[int, float] | None:
        """Sample idle power (W per device) over ``seconds`` before any work; None if unknown."""
        if seconds <= 0 or self.source.name == "unavailable":
            return None
        start_time, start = self._edge()
        sleep(seconds)
        end_time, end = self._edge()
        joules, _ = self.source.delta(start, end)
        elapsed = end_time - start_time
        if joules is None or elapsed <= 0:
            return None
        self.idle_watts = {i: j / elapsed for i, j in joules.items()}
        return self.idle_watts
