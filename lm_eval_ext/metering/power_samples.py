"""A second reading of the same joules: instantaneous power sampled in a thread and integrated.

NVML's energy counter (what every window reports) and its instantaneous power field are two
readings of the board's power: the counter accumulates it on the GPU, the samples are read by
this process at :data:`DEFAULT_HZ` and integrated over each window's span (trapezoids, the
edges interpolated). ``power_check=true`` (hf-metered and vllm-metered) puts the integral of
every task beside the counter's joules in ``config.metering.power_check``. Zeus's monitor reads
the same counter on Volta and newer GPUs, so it is no independent check; these samples are.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

#: samples per second asked for (the achieved rate is reported)
DEFAULT_HZ = 20.0


class PowerSampler:
    """Reads ``read_watts()`` every ``1/hz`` seconds in a daemon thread until :meth:`stop`.

    Args:
        read_watts: Instantaneous power of the metered devices, summed (W).
        clock: The same clock as the meter's window edges.
        hz: Samples per second.
    """

    def __init__(self, read_watts: Callable[[], float], clock: Callable[[], float] = time.perf_counter,
                 hz: float = DEFAULT_HZ):
        self._read, self._clock, self._period = read_watts, clock, 1.0 / hz
        self.times: list[float] = []
        self.watts: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> PowerSampler:
        """Start sampling (one sample at once, so that a window starting now is covered)."""
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="power-samples", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        try:
            watts = float(self._read())
        except Exception as exc:  # a driver that cannot answer: stop, and say why
            self.error = f"{type(exc).__name__}: {exc}"
            self._stop.set()
            return
        self.times.append(self._clock())
        self.watts.append(watts)

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self._sample()

    def stop(self) -> None:
        """Stop sampling (one last sample first); safe to call twice."""
        if self._thread is not None and not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self._sample()

    def joules(self, start: float, end: float) -> float | None:
        """The integral of power over ``[start, end]`` (None when the samples do not span it)."""
        times, watts = self.times, self.watts
        if len(times) < 2 or start < times[0] or end > times[-1] or end <= start:
            return None

        def at(t: float) -> float:
            i = min(max(bisect.bisect_right(times, t), 1), len(times) - 1)
            t0, t1 = times[i - 1], times[i]
            share = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
            return watts[i - 1] + share * (watts[i] - watts[i - 1])

        points = [(start, at(start))]
        first, last = bisect.bisect_right(times, start), bisect.bisect_left(times, end)
        points += list(zip(times[first:last], watts[first:last], strict=True))
        points.append((end, at(end)))
        return sum((t1 - t0) * (w0 + w1) / 2
                   for (t0, w0), (t1, w1) in zip(points, points[1:], strict=False))

    def over(self, spans: Iterable[tuple[float, float]]) -> float | None:
        """The integral over several spans (None when any is not covered)."""
        total = 0.0
        for start, end in spans:
            part = self.joules(start, end)
            if part is None:
                return None
            total += part
        return total

    def summary(self) -> dict[str, Any]:
        """How many samples, over how long, at what achieved rate; the error if it stopped."""
        span = self.times[-1] - self.times[0] if len(self.times) > 1 else 0.0
        return {"samples": len(self.times), "seconds": span,
                "achieved_hz": (len(self.times) - 1) / span if span > 0 else None,
                "error": self.error}


def agreement(counter_joules: float | None, sampled_joules: float | None) -> float | None:
    """``100 x (sampled - counter) / counter`` (None where either is missing)."""
    if counter_joules is None or sampled_joules is None or counter_joules <= 0:
        return None
    return 100.0 * (sampled_joules - counter_joules) / counter_joules
