"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

# Benchmarks measure the working tree, not whatever copy is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def task_manager():
    """A TaskManager over the package's tasks only (no 9 s index of the built-ins)."""
    from lm_eval.tasks import TaskManager

    from lm_eval_ext.paths import package_tasks_dir

    return TaskManager(include_path=str(package_tasks_dir()), include_defaults=False)


def use_generation(lm, **changes: Any):
    """``lm`` (hf-metered) generates under its settings with ``changes`` from now on.

    The knobs of :class:`lm_eval_ext.generation.settings.GenerationSettings`: ``requested``,
    ``batch_size_asked``, ``max_batch_size``, ``cuda_graphs`` (False: eager steps),
    ``admit_at``, ``decoders`` (another decode). Counts start afresh; returns the generator
    before.
    """
    return lm.use_generation(dataclasses.replace(lm.generation_settings(), **changes))


@contextlib.contextmanager
def generating(lm, **changes: Any):
    """While the block runs, ``lm`` generates with ``changes`` (:func:`use_generation`)."""
    before = use_generation(lm, **changes)
    try:
        yield
    finally:
        lm.use_generation(before.settings)


def build_requests(task_name: str, limit: int | None) -> list:
    """The request Instances of one task, built once and reused for every model."""
    task = task_manager().load([task_name])["tasks"][task_name]
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    return list(task.instances)


def sync(device: str) -> None:
    """Wait for queued device work (no-op on the CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def environment() -> dict[str, Any]:
    """Versions and hardware, recorded next to every figure."""
    import lm_eval
    import torch
    import transformers

    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "lm_eval": lm_eval.__version__, "cpu_count": os.cpu_count(),
            "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def command_line(script: str, args: Any) -> str:
    """``python benchmarks/SCRIPT --flag value ...`` from parsed arguments.

    None and False are left out; True is a bare ``--flag`` (argparse's ``store_true``).
    """
    parts = [f"python benchmarks/{script}"]
    for key, value in vars(args).items():
        if value is None or value is False:
            continue
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            parts.append(flag)
        else:
            text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            parts.append(f"{flag} {text}")
    return " ".join(parts)


def save_run(results: dict, folder: str | Path, name: str) -> dict:
    """Write ``simple_evaluate``'s results and every task's samples in lm-eval's layout.

    Pops and returns the samples (they hold benchmark text: never commit them).
    """
    from lm_eval.loggers import EvaluationTracker

    tracker = EvaluationTracker(output_path=str(folder))
    tracker.general_config_tracker.model_name = name
    tracker.general_config_tracker.model_name_sanitized = name  # the sub-folder (else "None")
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task, task_samples in samples.items():
        tracker.save_results_samples(task_name=task, samples=task_samples)
    return samples


def write_json(path: str | Path, payload: Any) -> None:
    """Write JSON (sorted keys, NaN allowed as null-free floats) and print where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    print(f"wrote {path}", flush=True)


class Deadline:
    """Wall-clock budget for a device call: stop starting new work near the limit."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:  # noqa: D102
        return self.end - time.monotonic()


def alternating(names: list[str], rounds: int):
    """``(round, name)`` of an A/B: every round runs every name, every other round reversed."""
    for round_index in range(rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            yield round_index, name


def metered_generation(lm, requests: list, within: Any) -> tuple[list[str], dict[str, Any]]:
    """``lm.generate_until(requests)`` in fresh metering windows while ``within`` holds.

    Returns the texts and the run's figures: wall and inference seconds, the texts' tokens and
    tokens per inference second (the texts as lm-eval keeps them, re-encoded: the same texts,
    the same count), joules (and per item), idle and forward share, the GPUs and the
    generation block of ``config.metering``.
    """
    lm.reset_metering()
    started = time.perf_counter()
    with within:  # the counts are the variant's: read before its settings are restored
        out = lm.generate_until(requests, disable_tqdm=True)
        wall = time.perf_counter() - started
        m = lm.metering_info()
    joules = m["energy_joules"]
    tokens = sum(len(lm.tok_encode(text, add_special_tokens=False)) for text in out)
    return out, {"wall_seconds": wall, "inference_seconds": m["inference_seconds"],
                 "text_tokens": tokens, "tokens_per_second": tokens / m["inference_seconds"]
                 if m["inference_seconds"] else None, "energy_joules": joules,
                 "j_per_item": None if joules is None else joules / len(out),
                 "idle_share": m["idle_share"], "forward_share": m["forward_share"],
                 "gpus": m["gpus"], "generation": m["generation"]}
