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
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lm_eval_ext.metering.contention import cpu_contention_probe
from lm_eval_ext.metering.derived import DerivedEnergy
from lm_eval_ext.metering.ledger import InferenceLedger
from lm_eval_ext.metering.meter import EnergyMeter, IdlePower
from lm_eval_ext.metering.ranks import (
    gather_rank_metering,
    merge_rank_metering,
    run_without_padding,
)
from lm_eval_ext.metering.requests import run_by_task
from lm_eval_ext.metering.sources import device_label, select_source

#: idle power is sampled in sub-intervals of this length (their spread is its uncertainty)
IDLE_INTERVAL_S = 0.5
BOUNDARY = ("per (task, request type): the model's request loop between device-synchronised "
            "edges; excludes model load, data preparation, metrics, file writing and auto "
            "batch-size probes")


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
    """

    def __init__(self, meter: EnergyMeter, *, clock: Callable[[], float] | None = None,
                 synced_devices: Sequence[str] = (), codecarbon: Any = None,
                 forward_observable: bool = True):
        self.meter = meter
        self.clock = clock or meter.clock
        self.synced_devices = list(synced_devices)
        self.codecarbon = codecarbon
        self.forward_observable = forward_observable
        self.ledger = InferenceLedger(meter, forward_observable)
        self.padding_requests = 0  # data-parallel padding answered without the model
        self._rank_blocks: list[dict[str, Any]] | None = None  # every rank's block (DP)

    @classmethod
    def start(cls, cuda_indices: Sequence[int], *, energy: str = "auto", sync: bool = True,
              idle_seconds: float = 3.0, codecarbon: Any = None,
              clock: Callable[[], float] = time.perf_counter,
              forward_observable: bool = True, idle: IdlePower | None = None) -> Metering:
        """Pick the energy source for these GPUs (none: the CPU) and sample idle power.

        ``forward_observable=False``: the backend's forward passes run where this process
        cannot time them (an engine process); forward time is then reported as null.
        ``idle``: an earlier sample of the same devices, used instead of sampling again.
        """
        cuda = list(cuda_indices)
        meter = EnergyMeter(select_source(cuda, prefer=energy),
                            sync=synchronize_all(cuda) if cuda and sync else None, clock=clock,
                            contention=None if cuda else cpu_contention_probe())
        if idle is not None:  # an earlier run's sample of the same devices (a campaign worker)
            meter.idle = idle
        else:
            meter.measure_idle(idle_seconds,
                               intervals=max(1, round(idle_seconds / IDLE_INTERVAL_S)))
        if codecarbon is not None:
            codecarbon.start()
        return cls(meter, clock=clock, codecarbon=codecarbon,
                   synced_devices=[device_label(i) for i in cuda] if sync else [],
                   forward_observable=forward_observable)

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
        self.ledger.add_forward_seconds(self.clock() - started)
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
            "inference_seconds": total["inference_seconds"],
            "forward_seconds": total["forward_seconds"],
            "forward_share": total["forward_share"],
            "energy_joules": total["energy_joules"],
            "energy_joules_idle_corrected": total["energy_joules_idle_corrected"],
            "energy_joules_idle_corrected_se": total["energy_joules_idle_corrected_se"],
            "idle_joules": total["idle_joules"],
            "idle_share": total["idle_share"],
            "idle_power": None if idle_info is None else {
                "watts": idle_info.total_watts, "se_watts": idle_info.se_watts(),
                "sd_watts_by_device": dict(idle_info.sd_watts_by_device or {}),
                "seconds": idle_info.seconds, "intervals": idle_info.intervals},
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

    def report(self, extras: Mapping[str, Any]) -> dict[str, Any]:
        """The ``config.metering`` block: every rank's merged (rank 0), CodeCarbon beside it."""
        info = (merge_rank_metering(self._rank_blocks) if self._rank_blocks
                else self.local_block(extras))
        if self.codecarbon is not None:
            total = info["energy_joules"]
            check = self.codecarbon.stop()
            nvml_kwh = (total or 0) / 3.6e6
            check["gpu_vs_nvml_pct"] = (100 * (check["gpu_kwh"] - nvml_kwh) / nvml_kwh
                                        if total else None)
            info["codecarbon"] = check
        return info

