"""How many items each cell evaluates, and a device-time estimate from a short calibration run."""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lm_eval_ext.campaign.spec import Cell


def task_sizes(cells: Sequence[Cell]) -> dict[str, int]:
    """Items per task (lm-eval's evaluation split), read through lm-eval's TaskManager."""
    from lm_eval.tasks import TaskManager, get_task_dict

    from lm_eval_ext.plugin.registration import activate, narrow_task_manager

    activate()
    extra = sorted({str(c.options["include_path"]) for c in cells if c.options.get("include_path")})
    names = sorted({c.task for c in cells})
    manager = narrow_task_manager(names, extra) or TaskManager(include_path=extra or None)
    tasks = get_task_dict(names, manager)
    return {name: len(task.eval_docs) for name, task in tasks.items()}


def cell_items(cell: Cell, sizes: dict[str, int]) -> int:
    """Items of one cell: its task's size, cut by ``limit`` (a count, or a fraction < 1)."""
    n = sizes[cell.task]
    limit = cell.options.get("limit")
    if limit is None:
        return n
    limit = float(limit)
    return min(n, math.ceil(n * limit) if limit < 1 else int(limit))


def engine_key(cell: Cell) -> str:
    """Cells that share model args and options (but the item count) run at the same speed."""
    options = {k: v for k, v in cell.options.items() if k not in ("limit", "metadata")}
    return json.dumps({"model_args": cell.model_args, "options": options,
                       "loglik": cell.task.endswith("_loglik")}, sort_keys=True, default=str)


def calibrate(cells: Sequence[Cell], limit: int, echo: bool = False) -> dict[str, dict[str, Any]]:
    """Run the first cell of each engine configuration on ``limit`` items; time it.

    Returns engine key -> {cell, overhead_s (model load and start-up), seconds_per_item} or
    {cell, error}.
    """
    from lm_eval_ext.campaign.runner import run_lm_eval

    found: dict[str, dict[str, Any]] = {}
    for cell in cells:
        key = engine_key(cell)
        if key in found:
            continue
        probe = Cell(cell.cell_id, cell.model_label, cell.condition, cell.task, cell.model_args,
                     {**cell.options, "limit": limit})
        with tempfile.TemporaryDirectory(prefix="lm_eval_ext_calibration_") as tmp:
            started = time.perf_counter()
            code = run_lm_eval(probe.lm_eval_argv(Path(tmp) / "out"), Path(tmp) / "log",
                               echo=echo)
            wall = time.perf_counter() - started
            results = sorted(Path(tmp).rglob("results_*.json"))
            if code != 0 or not results:
                tail = (Path(tmp) / "log").read_text(errors="replace").strip().splitlines()[-1:]
                found[key] = {"cell": cell.cell_id, "error": f"exit {code}: {' '.join(tail)}"}
                continue
            payload = json.loads(results[0].read_text())
            metering = payload["config"]["metering"]
            n = payload["n-samples"][cell.task]["effective"]
            inference = float(metering["inference_seconds"])
            found[key] = {"cell": cell.cell_id, "overhead_s": wall - inference,
                          "seconds_per_item": inference / max(n, 1)}
    return found


def estimate_seconds(cell: Cell, n_items: int,
                     calibration: dict[str, dict[str, Any]]) -> float | None:
    """Estimated device seconds of one cell (None when its configuration did not calibrate)."""
    found = calibration.get(engine_key(cell)) or {}
    if "seconds_per_item" not in found:
        return None
    return found["overhead_s"] + found["seconds_per_item"] * n_items
