"""Other busy processes during a CPU run: the share of CPU time that was not ours.

On a CPU run, runtime and RAPL package energy both include whatever else the machine was
doing: two concurrent runs each reported six times the lone runtime. Between two edges the
probe compares all CPUs' busy time (``/proc/stat``) with this process's own CPU time
(``time.process_time``, every thread); a window where others used more than
:data:`OTHER_SHARE_LIMIT` of the machine is flagged ``other_processes``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

#: share of all CPUs' capacity used by other processes above which a window is flagged
OTHER_SHARE_LIMIT = 0.25
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_cpu_seconds(stat: Path = Path("/proc/stat")) -> float:
    """Busy CPU seconds of all CPUs since boot (everything but idle and iowait)."""
    fields = stat.read_text().splitlines()[0].split()[1:]
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / _CLOCK_TICKS


class CpuContention:
    """Measures the other-process CPU share between ``begin`` and ``end``.

    Args:
        busy_seconds: All CPUs' cumulative busy seconds (``/proc/stat``; injectable).
        own_seconds: This process's cumulative CPU seconds (injectable).
        clock: Wall clock.
        cpus: Number of CPUs.
    """

    def __init__(self, busy_seconds: Callable[[], float] = busy_cpu_seconds,
                 own_seconds: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.perf_counter, cpus: int | None = None):
        self._busy, self._own, self._clock = busy_seconds, own_seconds, clock
        self.cpus = cpus or os.cpu_count() or 1

    def begin(self) -> tuple[float, float, float]:
        """A reading at the window's start."""
        return self._clock(), self._busy(), self._own()

    def other_share(self, start: tuple[float, float, float]) -> float:
        """Share of all CPUs' capacity that other processes used since ``start``."""
        wall, busy, own = (now - then for now, then in zip(self.begin(), start, strict=True))
        if wall <= 0:
            return 0.0
        return max(busy - own, 0.0) / (wall * self.cpus)


def cpu_contention_probe() -> CpuContention | None:
    """A probe when ``/proc/stat`` is readable (Linux), else None."""
    try:
        busy_cpu_seconds()
    except (OSError, ValueError, IndexError):
        return None
    return CpuContention()
