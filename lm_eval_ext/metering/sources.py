"""Cumulative energy counters: NVML (GPU), RAPL (CPU package), or none.

Every source reads *cumulative* counters in joules per device and knows how to turn two
readings into a delta. The NVML module is injectable (``nvml=``), which is the seam the tests
use to drive the meter with a fake counter.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

Reading = Mapping[int, float]


class EnergySource(Protocol):
    """What the meter needs from a counter."""

    name: str  # "nvml" | "rapl" | "unavailable"
    counter_period_s: float

    def read(self) -> Reading: ...  # noqa: D102
    def delta(self, start: Reading, end: Reading) -> tuple[dict[int, float] | None, list[str]]: ...  # noqa: D102,E501
    def other_processes(self) -> int: ...  # noqa: D102
    def describe(self) -> list[dict[str, Any]]: ...  # noqa: D102


def _torch_uuid(cuda_index: int) -> str | None:
    try:
        import torch

        uuid = torch.cuda.get_device_properties(cuda_index).uuid
    except Exception:  # older torch, no CUDA: fall back to the index
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def device_label(cuda_index: int, uuid_of: Callable[[int], str | None] = _torch_uuid) -> str:
    """``cuda:I/GPU-UUID`` (or ``cuda:I`` where the UUID is unknown).

    Process-local indices collide across data-parallel ranks (each rank's GPU is often its
    ``cuda:0``); the UUID keeps the GPUs apart when the ranks' blocks are merged.
    """
    uuid = uuid_of(cuda_index)
    return f"cuda:{cuda_index}/{uuid}" if uuid else f"cuda:{cuda_index}"


class NvmlSource:
    """NVIDIA GPU energy from ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since driver load).

    Args:
        cuda_indices: CUDA device indices the model occupies (as torch numbers them).
        nvml: The ``pynvml`` module (nvidia-ml-py) or a stand-in with the same functions.
        uuid_of: Maps a CUDA index to its NVML UUID, so ``CUDA_VISIBLE_DEVICES`` remapping
            is honoured; returns None to fall back to the same index.
    """

    name = "nvml"
    counter_period_s = 0.1  # the counter updates about every 100 ms

    def __init__(self, cuda_indices: Sequence[int], nvml: Any = None,
                 uuid_of: Callable[[int], str | None] = _torch_uuid):
        if nvml is None:
            import pynvml as nvml
        self._nvml = nvml
        nvml.nvmlInit()
        self.cuda_indices = tuple(cuda_indices)
        self._handles = {}
        for index in self.cuda_indices:
            uuid = uuid_of(index)
            self._handles[index] = (
                nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid
                else nvml.nvmlDeviceGetHandleByIndex(index)
            )

    def read(self) -> dict[int, float]:
        """Cumulative joules per CUDA index."""
        return {
            i: self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
            for i, h in self._handles.items()
        }

    def delta(self, start: Reading, end: Reading) -> tuple[dict[int, float] | None, list[str]]:
        """End minus start; a decrease means the counter reset: energy unavailable."""
        if any(end[i] < start[i] for i in start):
            return None, ["counter_decreased"]
        return {i: end[i] - start[i] for i in start}, []

    def power_watts(self) -> float:
        """Instantaneous board power summed over the metered GPUs (W).

        NVML's ``NVML_FI_DEV_POWER_INSTANT`` field (as Zeus reads it); where the driver does
        not answer it, ``nvmlDeviceGetPowerUsage`` (averaged over 1 s on Ampere and newer).
        """
        nvml, total = self._nvml, 0.0
        for handle in self._handles.values():
            milliwatts = None
            field_id = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
            if field_id is not None and hasattr(nvml, "nvmlDeviceGetFieldValues"):
                try:
                    [value] = nvml.nvmlDeviceGetFieldValues(handle, [field_id])
                    if value.nvmlReturn == 0:
                        milliwatts = value.value.uiVal
                except Exception:  # an older driver: the averaged reading below
                    milliwatts = None
            if milliwatts is None:
                milliwatts = nvml.nvmlDeviceGetPowerUsage(handle)
            total += milliwatts / 1000.0
        return total

    def other_processes(self) -> int:
        """Compute processes on our GPUs other than this one."""
        own = os.getpid()
        others = 0
        for handle in self._handles.values():
            try:
                pids = [p.pid for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            except Exception:
                continue
            # In a container NVML may show host PIDs; then one of them is us.
            others += len([p for p in pids if p != own]) if own in pids else max(len(pids) - 1, 0)
        return others

    def describe(self) -> list[dict[str, Any]]:
        """Name, CUDA index and UUID of each metered GPU."""
        out = []
        for index, handle in self._handles.items():
            name = self._nvml.nvmlDeviceGetName(handle)
            uuid = self._nvml.nvmlDeviceGetUUID(handle)
            out.append({
                "index": index,
                "name": name.decode() if isinstance(name, bytes) else name,
                "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            })
        return out


class RaplSource:
    """CPU package energy from Linux powercap RAPL (``intel-rapl:N/energy_uj``)."""

    name = "rapl"
    counter_period_s = 0.001

    def __init__(self, root: Path = Path("/sys/class/powercap")):
        self._domains: dict[int, Path] = {}
        for folder in sorted(root.glob("intel-rapl:*")):
            parts = folder.name.split(":")
            if len(parts) == 2 and (folder / "energy_uj").is_file():
                self._domains[int(parts[1])] = folder
        if not self._domains:
            raise OSError(f"no RAPL package domains under {root}")
        self._ranges = {
            i: float((d / "max_energy_range_uj").read_text()) / 1e6
            if (d / "max_energy_range_uj").is_file() else None
            for i, d in self._domains.items()
        }
        self.read()  # raises PermissionError when energy_uj is not readable

    def read(self) -> dict[int, float]:
        """Cumulative joules per package."""
        return {i: float((d / "energy_uj").read_text()) / 1e6 for i, d in self._domains.items()}

    def delta(self, start: Reading, end: Reading) -> tuple[dict[int, float] | None, list[str]]:
        """End minus start, correcting one wrap of the counter at ``max_energy_range_uj``."""
        out, flags = {}, []
        for i in start:
            if end[i] >= start[i]:
                out[i] = end[i] - start[i]
            elif self._ranges.get(i):
                out[i] = self._ranges[i] - start[i] + end[i]
                flags.append("counter_wrapped")
            else:
                return None, ["counter_decreased"]
        return out, sorted(set(flags))

    def other_processes(self) -> int:
        """RAPL measures the whole package: other processes cannot be told apart."""
        return 0

    def describe(self) -> list[dict[str, Any]]:
        """Name of each RAPL package domain."""
        return [{"index": i, "name": (d / "name").read_text().strip()
                 if (d / "name").is_file() else d.name} for i, d in self._domains.items()]


class UnavailableSource:
    """No readable energy counter: runtime only."""

    name = "unavailable"
    counter_period_s = 0.0

    def __init__(self, reason: str = "no energy counter"):
        self.reason = reason

    def read(self) -> dict[int, float]:  # noqa: D102
        return {}

    def delta(self, start: Reading, end: Reading) -> tuple[None, list[str]]:  # noqa: D102
        return None, ["energy_unavailable"]

    def other_processes(self) -> int:  # noqa: D102
        return 0

    def describe(self) -> list[dict[str, Any]]:  # noqa: D102
        return []


def select_source(cuda_indices: Sequence[int] = (), *, prefer: str = "auto",
                  nvml: Any = None, rapl_root: Path = Path("/sys/class/powercap")) -> EnergySource:
    """The best available source: NVML for CUDA devices, else RAPL, else unavailable.

    Args:
        cuda_indices: CUDA devices the model occupies (empty on a CPU run).
        prefer: ``auto``, ``nvml``, ``rapl`` or ``off``. A named source that cannot be
            opened is an error; ``auto`` degrades (warning on a GPU run; on the CPU the reason
            is kept in ``UnavailableSource.reason`` for the start-up line).
        nvml: A pynvml stand-in (the test seam); default: the real ``pynvml``.
        rapl_root: The powercap folder (default ``/sys/class/powercap``).
    """
    if prefer == "off":
        return UnavailableSource("energy metering turned off (energy=off)")
    if prefer in ("auto", "nvml") and cuda_indices:
        try:
            return NvmlSource(cuda_indices, nvml=nvml)
        except Exception as exc:
            if prefer == "nvml":
                raise
            warnings.warn(f"NVML energy counter unavailable ({exc!r}); trying RAPL", stacklevel=2)
    elif prefer == "nvml":
        raise RuntimeError("energy=nvml needs the model on a CUDA device")
    if prefer in ("auto", "rapl"):
        try:
            return RaplSource(rapl_root)
        except Exception as exc:
            if prefer == "rapl":
                raise
            reason = f"RAPL not readable ({exc.__class__.__name__}: {exc})"
            if cuda_indices:  # a GPU run left without any counter: unexpected, so warned
                warnings.warn(f"{reason}; reporting runtime only (energy_source='unavailable')",
                              stacklevel=2)
            # a CPU run without RAPL is common: the model's start-up line gives the reason
            return UnavailableSource(reason)
    return UnavailableSource(f"energy={prefer}")
