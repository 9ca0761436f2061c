"""Data-parallel metering: every rank meters its own GPU, rank 0 reports the whole run.

Under ``accelerate launch -m lm_eval`` each process holds a model copy on its own GPU and lm-eval
asks only rank 0 for ``get_model_info()``. So every rank gathers every rank's metering block at
the end of each request call (all ranks make those calls), and rank 0 merges them: energy summed
over ranks, wall time of the slowest rank, a per-rank breakdown, flags from any rank.

lm-eval evens out the ranks by appending extra copies of a rank's last request (the same
object); those padding requests are answered from the original request's answer without running
the model, so no padding work is metered, and their number is reported apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

R = TypeVar("R")

PADDING_NOTE = ("lm-eval's padding requests (copies of a rank's last request that even out the "
                "ranks) are answered from that request's answer without running the model: "
                "not metered, counted in padding_requests")


def padding_count(requests: Sequence[Any]) -> int:
    """How many trailing entries are lm-eval's data-parallel padding.

    lm-eval appends ``[last] * last.repeats`` once per padding step, where ``last`` is the
    rank's final request object; a real request occupies ``repeats`` consecutive entries.
    """
    if not requests:
        return 0
    last = requests[-1]
    trailing = 0
    for request in reversed(requests):
        if request is not last:
            break
        trailing += 1
    return max(trailing - int(getattr(last, "repeats", None) or 1), 0)


def run_without_padding(requests: Sequence[Any], run: Callable[[list[Any]], list[R]],
                        world_size: int) -> tuple[list[R], int]:
    """Run the real requests only; padding gets the padded request's own answer."""
    padding = padding_count(requests) if world_size > 1 else 0
    real = list(requests[:len(requests) - padding])
    answers = run(real) if real else []
    return answers + [answers[-1]] * padding, padding


def gather_rank_metering(local: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every rank's metering block, in rank order (None outside a multi-process group)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    return gathered


def _sum(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else float(sum(values))


def _max_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _merge_idle_power(blocks: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Idle power of all ranks' GPUs: watts summed, SE in quadrature (None if a rank has none)."""
    if any(b is None or b.get("watts") is None for b in blocks):
        return None
    ses = [b.get("se_watts") for b in blocks]
    return {"watts": float(sum(b["watts"] for b in blocks)),
            "se_watts": None if any(s is None for s in ses) else math.sqrt(sum(s * s for s in ses)),
            "seconds": max(b.get("seconds") or 0.0 for b in blocks),
            "intervals": min(b.get("intervals") or 0 for b in blocks)}


def _merge_tasks(per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    tasks: dict[str, Any] = {}
    for task in sorted({t for info in per_rank for t in info.get("per_task") or {}}):
        entries = [info["per_task"].get(task) for info in per_rank]
        present = [e for e in entries if e is not None]
        tasks[task] = {
            "energy_joules": _sum([e["energy_joules"] for e in present]),
            "inference_seconds": max(e["inference_seconds"] for e in present),
            "n_requests": sum(e.get("n_requests", 0) for e in present),
            "flags": sorted({f for e in present for f in e.get("flags", [])}),
            "ranks": [i for i, e in enumerate(entries) if e is not None],
        }
    return tasks


def merge_rank_metering(per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``config.metering`` of a data-parallel run from each rank's block (rank order).

    Joules add up over ranks (None when any rank has none: a partial sum is not the run's
    energy); ``inference_seconds`` is the slowest rank's; the idle-corrected SE adds in
    quadrature (independent idle estimates per GPU); shares are over the summed joules and
    GPU-seconds.
    """
    merged = dict(per_rank[0])
    seconds = [info["inference_seconds"] for info in per_rank]
    energy = _sum([info["energy_joules"] for info in per_rank])
    idle = _sum([info.get("idle_joules") for info in per_rank])
    ses = [info.get("energy_joules_idle_corrected_se") for info in per_rank]
    forward = sum(info.get("forward_seconds") or 0.0 for info in per_rank)
    merged.update({
        "inference_seconds": max(seconds),
        "forward_seconds": max(info.get("forward_seconds") or 0.0 for info in per_rank),
        "forward_share": forward / sum(seconds) if sum(seconds) > 0 else None,
        "energy_joules": energy,
        "energy_joules_idle_corrected": _sum(
            [info.get("energy_joules_idle_corrected") for info in per_rank]),
        "energy_joules_idle_corrected_se": None if any(s is None for s in ses)
        else math.sqrt(sum(s * s for s in ses)),
        "idle_joules": idle,
        "idle_share": None if energy is None or idle is None or energy <= 0 else idle / energy,
        "flags": sorted({f for info in per_rank for f in info.get("flags", [])}),
        "load_seconds": _max_or_none([info.get("load_seconds") for info in per_rank]),
        "idle_power": _merge_idle_power([info.get("idle_power") for info in per_rank]),
        "synced_devices": sorted({d for info in per_rank for d in info.get("synced_devices") or []}),
        "gpus": [g for info in per_rank for g in info.get("gpus") or []],
        "devices": [d for info in per_rank for d in info.get("devices") or []],
        "per_task": _merge_tasks(per_rank),
        "data_parallel": {
            "world_size": len(per_rank),
            "padding_requests": sum(info.get("padding_requests", 0) for info in per_rank),
            "padding": PADDING_NOTE,
            "per_rank": [{
                "rank": rank, "gpu_uuids": [g.get("uuid") for g in info.get("gpus") or []],
                "inference_seconds": info["inference_seconds"],
                "energy_joules": info["energy_joules"],
                "energy_joules_idle_corrected": info.get("energy_joules_idle_corrected"),
                "padding_requests": info.get("padding_requests", 0),
                "synced_devices": info.get("synced_devices") or [],
                "idle_watts": (info.get("idle_power") or {}).get("watts"),
                "flags": info.get("flags", []),
            } for rank, info in enumerate(per_rank)],
        },
    })
    return merged
