"""The metering seam: per-task energy windows around any lm-eval ``LM``.

:class:`Metering` owns the meter, the per-(task, request type) ledger, the forward clock,
data-parallel ranks and the ``config.metering`` block; it imports nothing of any backend.
:class:`~lm_eval_ext.backends.metered_lm.MeteredLM` puts it around an lm-eval model's three
request methods (``class MyMetered(MeteredLM, SomeLM)``); a backend times its forward calls
with :meth:`Metering.timed`.

    lm.metering = Metering.start(cuda_indices=[0], energy="auto", idle_seconds=3.0)
    lm.loglikelihood(requests)          # one window per task in ``requests``
    lm.get_model_info()["metering"]     # the block written to results_*.json
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lm_eval_ext.metering.contention import cpu_contention_probe
from lm_eval_ext.metering.derived import DerivedEnergy
from lm_eval_ext.metering.idle import IdlePower
from lm_eval_ext.metering.ledger import InferenceLedger
from lm_eval_ext.metering.meter import EnergyMeter
from lm_eval_ext.metering.power_samples import PowerSampler, agreement
from lm_eval_ext.metering.ranks import (
    gather_rank_metering,
    merge_rank_metering,
    run_without_padding,
)
from lm_eval_ext.metering.requests import run_by_task
from lm_eval_ext.metering.sources import device_label, select_source
from lm_eval_ext.metering.uncertainty import RUN_TO_RUN_CV_JOULES, RUN_TO_RUN_CV_SECONDS

#: idle power is sampled in sub-intervals of this length (their spread is its uncertainty)
IDLE_INTERVAL_S = 0.5
#: the run's totals copied into ``config.metering``
TOTAL_FIELDS = ("inference_seconds", "inference_seconds_se", "forward_seconds", "forward_share",
                "energy_joules", "energy_joules_se", "energy_joules_idle_corrected",
                "energy_joules_idle_corrected_se", "energy_joules_idle_corrected_reason",
                "idle_joules", "idle_share", "slices")
#: how the ``*_se`` fields are estimated (docs/energy.md says what it covers, as measured)
UNCERTAINTY = ("within-run and run-to-run together: the window's slices (joined to >= 1 s at "
               "forward-call ends) give the within-run part from the second differences of "
               "joules and seconds per forward call, plus the counter's steps at the edges; a "
               f"relative run-to-run term measured by repeated campaigns on one H100 "
               f"({RUN_TO_RUN_CV_JOULES:.1%} of the joules, {RUN_TO_RUN_CV_SECONDS:.1%} of the "
               "seconds) is added; the idle-corrected SE adds the idle "
               "baseline's (the SD between its samples before and after the work, and their own "
               "error). docs/energy.md")
BOUNDARY = ("per (task, request type): the model's request loop between device-synchronised "
            "edges; excludes model load, data preparation, metrics, file writing and auto "
            "batch-size probes")


def idle_intervals(seconds: float) -> int:
    """Sub-intervals of an idle sample: :data:`IDLE_INTERVAL_S` each, at least 2 (a spread)."""
    return max(2, round(seconds / IDLE_INTERVAL_S))


def synchronize_all(cuda_indices: Sequence[int]) -> Callable[[], None]:
    """A sync callable that waits for every listed CUDA device."""
    import torch

    def sync() -> None:
        for index in cuda_indices:
            torch.cuda.synchronize(index)

    return sync


class Metering:
    """Inference-only energy of one model's request calls, per task and request type.

    Args:
        meter: The energy meter (its ``sync`` is used at forward-call edges too).
        clock: The one seconds clock of forward timing (the meter's, unless injected).
        synced_devices: Device names the edges synchronise (reported).
        codecarbon: An optional CodeCarbon cross-check, started already.
        idle_after_seconds: Idle power is sampled again for this long once the work is done
            (at the first :meth:`report`), so the baseline brackets the work; 0: not sampled.
        power: A running :class:`PowerSampler` (the second reading), or None.
    """

    def __init__(self, meter: EnergyMeter, *, clock: Callable[[], float] | None = None,
                 synced_devices: Sequence[str] = (), codecarbon: Any = None,
                 forward_observable: bool = True, idle_after_seconds: float = 0.0,
                 power: PowerSampler | None = None):
        self.meter = meter
        self.clock = clock or meter.clock
        self.synced_devices = list(synced_devices)
        self.codecarbon = codecarbon
        self.forward_observable = forward_observable
        self.idle_after_seconds = idle_after_seconds
        self.power = power
        self.power_unavailable: str | None = None  # power_check asked for, but no sampler
        self._idle_after_taken = False
        self.ledger = InferenceLedger(meter, forward_observable)
        self.padding_requests = 0  # data-parallel padding answered without the model
        self._rank_blocks: list[dict[str, Any]] | None = None  # every rank's block (DP)

    @classmethod
    def start(cls, cuda_indices: Sequence[int], *, energy: str = "auto", sync: bool = True,
              idle_seconds: float = 3.0, codecarbon: Any = None,
              clock: Callable[[], float] = time.perf_counter,
              forward_observable: bool = True, idle: IdlePower | None = None,
              power_check: bool = False) -> Metering:
        """Pick the energy source for these GPUs (none: the CPU) and sample idle power.

        Idle power is sampled now and again after the work (``idle_seconds`` each).
        ``forward_observable=False``: the backend's forward passes run where this process
        cannot time them (an engine process); forward time is then reported as null.
        ``idle``: an earlier sample of the same devices, used instead of sampling now.
        ``power_check``: sample instantaneous power in a thread, a second reading of every
        window (NVML only).
        """
        cuda = list(cuda_indices)
        meter = EnergyMeter(select_source(cuda, prefer=energy),
                            sync=synchronize_all(cuda) if cuda and sync else None, clock=clock,
                            contention=None if cuda else cpu_contention_probe())
        if idle is not None:  # an earlier run's sample of the same devices (a campaign worker)
            meter.idle_samples.append(dataclasses.replace(idle, when="reused"))
        else:
            meter.measure_idle(idle_seconds,
                               intervals=idle_intervals(idle_seconds))
        if codecarbon is not None:
            codecarbon.start()
        power = (PowerSampler(meter.source.power_watts, clock).start()
                 if power_check and hasattr(meter.source, "power_watts") else None)
        metering = cls(meter, clock=clock, codecarbon=codecarbon,
                       synced_devices=[device_label(i) for i in cuda] if sync else [],
                       forward_observable=forward_observable, power=power,
                       idle_after_seconds=idle_seconds)
        if power_check and power is None:
            metering.power_unavailable = (f"power_check needs NVML (a CUDA GPU); this run's "
                                          f"energy source is {meter.source.name}: not sampled")
        return metering

    # measuring ------------------------------------------------------------------------------
    def run(self, request_type: str, requests: Sequence[Any], call: Callable[[list], list], *,
            world_size: int = 1, extras: Callable[[], Mapping[str, Any]] = dict) -> list:
        """``call(group)`` per task of ``requests``, each in its own window; answers in order.

        lm-eval's data-parallel padding (copies of a rank's last request) is answered without
        the model; with several ranks every rank's block is gathered for rank 0's report.
        """
        def per_task(task: str, group: list) -> list:
            with self.ledger.measure(task, request_type, len(group)):
                return call(group)

        answers, padding = run_without_padding(
            requests, lambda real: run_by_task(real, per_task), world_size)
        self.padding_requests += padding
        if world_size > 1:  # every rank calls this; only rank 0 reports
            self._rank_blocks = gather_rank_metering(self.local_block(extras()))
        return answers

    def timed(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` between synchronised edges, credited as forward time."""
        sync = self.meter.sync
        if sync is not None:
            sync()
        started = self.clock()
        out = call(*args, **kwargs)
        if sync is not None:
            sync()
        ended = self.clock()
        self.ledger.add_forward_seconds(ended - started, ended)
        return out

    def recheck(self, task: str, request_type: str,
                n_requests: int) -> contextlib.AbstractContextManager[None]:
        """Meter a derived task's re-check: reported as its ``measured_recheck``, in no total."""
        return self.ledger.measure(task, request_type, n_requests, recheck=True)

    def derive(self, task: str, request_type: str, derived: DerivedEnergy) -> None:
        """Report a task's seconds and joules as ``derived`` from a parent run (flagged)."""
        self.ledger.derive(task, request_type, derived)

    def excluded(self) -> contextlib.AbstractContextManager[None]:
        """Leave a block (an automatic batch-size probe) out of the open window."""
        return self.ledger.excluded()

    def reset(self) -> None:
        """A fresh ledger: later windows only (several conditions on one loaded model)."""
        self.ledger = InferenceLedger(self.meter, self.forward_observable)
        self.padding_requests = 0
        self._rank_blocks = None
        self._idle_after_taken = False

    def sample_idle_after(self) -> None:
        """Sample idle power once the work is done (once per ledger; see ``idle_after_seconds``)."""
        if self._idle_after_taken or self.idle_after_seconds <= 0 or not self.meter.idle_samples:
            return
        self._idle_after_taken = True
        self.meter.measure_idle(self.idle_after_seconds, when="after",
                                intervals=idle_intervals(self.idle_after_seconds))

    # reporting ------------------------------------------------------------------------------
    def local_block(self, extras: Mapping[str, Any]) -> dict[str, Any]:
        """This process's own block (its devices, its windows) plus the backend's ``extras``."""
        summary = self.ledger.summary()
        total = summary["total"]
        meter = self.meter
        idle = meter.idle_watts or {}
        gpus = [{**d, "idle_watts": idle.get(d["index"])} for d in meter.source.describe()]
        idle_info = meter.idle
        block = {
            **{key: total.get(key) for key in TOTAL_FIELDS},
            "idle_power": None if idle_info is None else idle_info.as_dict(),
            "uncertainty": UNCERTAINTY,
            "energy_source": meter.source.name,
            "energy_unavailable_reason": getattr(meter.source, "reason", None),
            "flags": total["flags"] + (["idle_not_measured"] if not idle else []),
            "gpus": gpus if meter.source.name == "nvml" else [],
            "devices": gpus,
            "synced_devices": self.synced_devices,
            "counter_period_s": meter.source.counter_period_s,
            "per_task": summary["per_task"],
            "boundary": BOUNDARY,
            "padding_requests": self.padding_requests,
        }
        clash = sorted(set(block) & set(extras))
        if clash:
            raise ValueError(f"metering_extras() may not replace the meter's own fields: {clash}")
        return {**extras, **block}

    def power_check(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """The second reading: sampled power integrated over each task's spans vs the counter."""
        self.power.stop()
        spans = self.ledger.spans()
        per_task = {}
        for task, task_spans in spans.items():
            counter = (info.get("per_task", {}).get(task) or {}).get("energy_joules")
            sampled = self.power.over(task_spans)
            per_task[task] = {"counter_joules": counter, "sampled_joules": sampled,
                              "difference_pct": agreement(counter, sampled)}
        total = self.power.over([s for task_spans in spans.values() for s in task_spans])
        counters = [t["counter_joules"] for t in per_task.values()]
        counter = None if not counters or None in counters else float(sum(counters))
        return {"method": "NVML instantaneous power (NVML_FI_DEV_POWER_INSTANT) sampled in a "
                          "thread, trapezoids over each window's synchronised span",
                **self.power.summary(), "counter_joules": counter, "sampled_joules": total,
                "difference_pct": agreement(counter, total), "per_task": per_task}

    def report(self, extras: Mapping[str, Any]) -> dict[str, Any]:
        """The ``config.metering`` block: every rank's merged (rank 0), CodeCarbon beside it.

        The first report samples idle power after the work (:meth:`sample_idle_after`).
        """
        self.sample_idle_after()
        info = (merge_rank_metering(self._rank_blocks) if self._rank_blocks
                else self.local_block(extras))
        if self.power is not None:
            info["power_check"] = self.power_check(info)
        elif self.power_unavailable:
            info["power_check"] = {"error": self.power_unavailable}
        if self.codecarbon is not None:
            total = info["energy_joules"]
            check = self.codecarbon.stop()
            nvml_kwh = (total or 0) / 3.6e6
            check["gpu_vs_nvml_pct"] = (100 * (check["gpu_kwh"] - nvml_kwh) / nvml_kwh
                                        if total else None)
            info["codecarbon"] = check
        return info

