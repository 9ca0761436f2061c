"""Energy windows over a cumulative counter, read at device-synchronised edges."""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from lm_eval_ext.metering.contention import OTHER_SHARE_LIMIT, CpuContention
from lm_eval_ext.metering.idle import IdleBaseline, IdlePower
from lm_eval_ext.metering.sources import EnergySource

#: quality flags of a window that other processes' load may have reached (the machine's CPUs,
#: or the GPU)
OTHER_PROCESSES = "other_processes"
OTHER_GPU_PROCESSES = "other_gpu_processes"

#: A window shorter than this many counter periods is flagged ``short_window``.
SHORT_WINDOW_PERIODS = 10


def assess_energy(seconds: float, joules_by_device: Mapping[int, float] | None,
                  counter_period_s: float) -> tuple[dict[int, float] | None, list[str]]:
    """Quality checks that apply to a *reported* figure (a window, or a task's total).

    A device whose counter did not advance makes the figure unavailable (``zero_energy``:
    None, never 0 J); fewer than 10 counter periods is ``short_window``. The ledger applies
    this to per-task totals, not to the segments they are summed from, so a 1 ms segment
    beside an auto batch-size probe contributes its 0 J instead of voiding the task.
    """
    flags = []
    joules = None if joules_by_device is None else dict(joules_by_device)
    if joules is not None and (not joules or any(j <= 0.0 for j in joules.values())):
        joules = None
        flags.append("zero_energy")
    if counter_period_s and seconds < SHORT_WINDOW_PERIODS * counter_period_s:
        flags.append("short_window")
    return joules, flags


@dataclass(frozen=True)
class EnergyWindow:
    """One measured window.

    Attributes:
        key: The window's name.
        seconds: Wall-clock seconds between the synchronised edges.
        joules_by_device: Energy per device in joules, or None when not measured.
        source: ``nvml``, ``rapl`` or ``unavailable``.
        flags: Quality flags (see :class:`EnergyMeter`).
        idle_watts_by_device: The idle baseline when the window closed, when available.
        started_at: The clock at the window's first edge (for a second reading of its span).
    """

    key: str
    seconds: float
    joules_by_device: Mapping[int, float] | None
    source: str
    flags: tuple[str, ...] = ()
    idle_watts_by_device: Mapping[int, float] | None = field(default=None)
    started_at: float | None = None

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
    ``no_device_sync`` (edges not synchronised), ``energy_unavailable`` (no counter),
    ``other_processes`` (with a ``contention`` probe: other processes used more than a quarter
    of the CPUs during the window, so runtime and CPU energy are not this run's alone).

    Args:
        source: The counter.
        sync: Called at both edges (``torch.cuda.synchronize``) so that a window contains all
            and only the work dispatched inside it; None disables it (flagged).
        clock: Seconds clock (injectable for tests).
    """

    def __init__(self, source: EnergySource, *, sync: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 contention: CpuContention | None = None):
        self.source = source
        self.sync = sync
        self.clock = clock
        self.contention = contention
        self._open: dict[str, tuple[float, Mapping[int, float], int]] = {}
        self._contention_start: dict[str, tuple[float, float, float]] = {}
        self.idle_samples: list[IdlePower] = []

    @property
    def idle(self) -> IdleBaseline | None:
        """The idle baseline of every sample so far (None when none was taken)."""
        return IdleBaseline(tuple(self.idle_samples)) if self.idle_samples else None

    @property
    def idle_watts(self) -> dict[int, float] | None:
        """Mean idle watts per device (None when not measured)."""
        idle = self.idle
        return idle.watts_by_device if idle else None

    def _edge(self) -> tuple[float, Mapping[int, float]]:
        if self.sync is not None:
            self.sync()
        return self.clock(), self.source.read()

    def begin_window(self, key: str) -> float:
        """Open window ``key`` (names may overlap; reusing an open name is an error).

        Returns the clock at its (synchronised) edge.
        """
        if key in self._open:
            raise ValueError(f"measurement window {key!r} is already open")
        start_time, reading = self._edge()
        self._open[key] = (start_time, reading, self.source.other_processes())
        if self.contention is not None:
            self._contention_start[key] = self.contention.begin()
        return start_time

    def end_segment(self, key: str) -> EnergyWindow:
        """Close window ``key`` with its raw reading: no zero/short-window judgement.

        For callers that sum segments and judge the total (:func:`assess_energy`), such as
        the per-task ledger; flags are those of the counter and the edges only.
        """
        if key not in self._open:
            raise ValueError(f"measurement window {key!r} was never opened")
        start_time, start, others_before = self._open.pop(key)
        end_time, end = self._edge()
        joules, flags = self.source.delta(start, end)
        flags = list(flags)
        if others_before or self.source.other_processes():
            flags.append(OTHER_GPU_PROCESSES)
        if self.sync is None and self.source.name == "nvml":
            flags.append("no_device_sync")
        started = self._contention_start.pop(key, None)
        if started is not None and self.contention.other_share(started) > OTHER_SHARE_LIMIT:
            flags.append(OTHER_PROCESSES)
        return EnergyWindow(key, end_time - start_time, joules, self.source.name,
                            tuple(sorted(set(flags))), self.idle_watts, start_time)

    def end_window(self, key: str) -> EnergyWindow:
        """Close window ``key`` and return its measurement, judged as a reported figure."""
        raw = self.end_segment(key)
        joules, quality = assess_energy(raw.seconds, raw.joules_by_device,
                                        self.source.counter_period_s)
        window = replace(raw, joules_by_device=joules,
                         flags=tuple(sorted({*raw.flags, *quality})))
        if {"zero_energy", "counter_decreased"} & set(window.flags):
            warnings.warn(
                f"energy window {key!r}: {', '.join(window.flags)}; its energy is reported as "
                "unavailable (null), not 0 J. Meter longer windows (more requests per task).",
                stacklevel=2,
            )
        return window

    def measure_idle(self, seconds: float = 1.0, sleep: Callable[[float], None] = time.sleep,
                     intervals: int = 1, when: str = "before") -> dict[int, float] | None:
        """Sample idle power (W per device) over ``seconds``; None if unknown.

        ``when``: ``before`` the work or ``after`` it; every sample joins the baseline
        (:attr:`idle`). With ``intervals`` > 1 the time is split into equal sub-intervals whose
        spread gives the sample's own standard error (:class:`IdlePower`).
        """
        if seconds <= 0 or self.source.name == "unavailable":
            return None
        intervals = max(int(intervals), 1)
        edges = [self._edge()]
        for _ in range(intervals):
            sleep(seconds / intervals)
            edges.append(self._edge())
        samples: dict[int, list[float]] = {}
        for (t0, r0), (t1, r1) in zip(edges, edges[1:], strict=False):
            joules, _ = self.source.delta(r0, r1)
            if joules is None or t1 <= t0:
                return None
            for device, value in joules.items():
                samples.setdefault(device, []).append(value / (t1 - t0))
        elapsed = edges[-1][0] - edges[0][0]
        total = self.source.delta(edges[0][1], edges[-1][1])[0] or {}
        watts = {device: value / elapsed for device, value in total.items()}
        spread = ({device: statistics.stdev(v) for device, v in samples.items()}
                  if intervals > 1 else None)
        self.idle_samples.append(IdlePower(watts, spread, elapsed, intervals, when))
        return watts
