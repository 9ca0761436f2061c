"""How many items each cell evaluates, and a device-time estimate from a short calibration run.

The estimate of a cell (:func:`estimate_cells`): the seconds per item its engine configuration
measured in the calibration run, times the items it runs for real (a derived cell: its
re-check's items only, ``recheck_count``), plus the calibration's seconds outside inference
less its model load (start-up, task building, metrics, writing: paid by every cell), plus the
model load for the first cell of each group that loads the same model (a campaign worker keeps
the weights loaded for the rest of the group).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval_ext.campaign.spec import Cell, parse_model_args


def task_sizes(cells: Sequence[Cell]) -> dict[str, int]:
    """Items per task (lm-eval's evaluation split), read through lm-eval's TaskManager."""
    from lm_eval.tasks import TaskManager

    from lm_eval_ext.plugin.registration import activate
    from lm_eval_ext.plugin.task_folders import narrow_task_manager
    from lm_eval_ext.task_building import build_tasks

    activate()
    extra = sorted({str(c.options["include_path"]) for c in cells if c.options.get("include_path")})
    names = sorted({c.task for c in cells})
    manager = narrow_task_manager(names, extra) or TaskManager(include_path=extra or None)
    tasks = build_tasks(names, manager, extra)
    return {name: len(task.eval_docs) for name, task in tasks.items()}


def cell_items(cell: Cell, sizes: dict[str, int]) -> int:
    """Items of one cell: its task's size, cut by ``limit`` (a count, or a fraction < 1)."""
    n = sizes[cell.task]
    limit = cell.options.get("limit")
    if limit is None:
        return n
    limit = float(limit)
    return min(n, math.ceil(n * limit) if limit < 1 else int(limit))


def rate_key(cell: Cell) -> str:
    """Cells that share model args and options (but the item count) run at the same rate per item."""
    options = {k: v for k, v in cell.options.items() if k not in ("limit", "metadata")}
    return json.dumps({"model_args": cell.model_args, "options": options,
                       "loglik": cell.task.endswith("_loglik")}, sort_keys=True, default=str)


def failure_line(log: str) -> str:
    """The line of a failed run's log that gives the cause.

    Its last error line, else its last line that is not a progress bar.
    """
    lines = [line.strip() for line in log.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"(lm_eval|lm-eval-ext): error: ", line)]
    plain = [line for line in lines if not re.search(r"\d+%\||it/s\]|s/it\]", line)]
    return (errors or plain or lines or ["(no output)"])[-1]


def calibrate(cells: Sequence[Cell], limit: int, echo: bool = False) -> dict[str, dict[str, Any]]:
    """Run the first cell of each engine configuration on ``limit`` items; time it.

    Returns engine key -> {cell, overhead_s (outside inference: start-up, model load, task
    building, metrics, writing), load_s (the model load alone), seconds_per_item, items} or
    {cell, error}.
    """
    from lm_eval_ext.campaign.runner import run_lm_eval

    found: dict[str, dict[str, Any]] = {}
    for cell in cells:
        key = rate_key(cell)
        if key in found:
            continue
        probe = dataclasses.replace(cell, options={**cell.options, "limit": limit})
        with tempfile.TemporaryDirectory(prefix="lm_eval_ext_calibration_") as tmp:
            started = time.perf_counter()
            code = run_lm_eval(probe.lm_eval_argv(Path(tmp) / "out"), Path(tmp) / "log",
                               echo=echo)
            wall = time.perf_counter() - started
            results = sorted(Path(tmp).rglob("results_*.json"))
            if code != 0 or not results:
                log = (Path(tmp) / "log").read_text(errors="replace")
                found[key] = {"cell": cell.cell_id, "error": f"exit {code}: {failure_line(log)}"}
                continue
            payload = json.loads(results[0].read_text())
            metering = payload["config"]["metering"]
            n = payload["n-samples"][cell.task]["effective"]
            inference = float(metering["inference_seconds"])
            found[key] = {"cell": cell.cell_id, "overhead_s": wall - inference,
                          "load_s": float(metering.get("load_seconds") or 0.0),
                          "seconds_per_item": inference / max(n, 1), "items": n}
    return found


#: the re-check share of a derived cell when its model args do not set ``recheck``
#: (hf-metered's default)
DEFAULT_RECHECK = 0.05


@dataclass(frozen=True)
class CellEstimate:
    """One cell's estimated device seconds (None: its configuration did not calibrate).

    ``run_items``: the items it runs for real (a derived cell: its re-check's); ``load_s``: the
    model load counted in it (the first cell of its load group only).
    """

    cell_id: str
    items: int
    run_items: int
    parent: str | None
    seconds: float | None
    load_s: float


def estimate_cells(cells: Sequence[Cell], sizes: Mapping[str, int],
                   calibration: Mapping[str, Mapping[str, Any]],
                   plan: Mapping[str, str]) -> list[CellEstimate]:
    """Each cell's estimate, in the order given (``plan``: child cell id -> parent cell id).

    The load is counted once per group of cells that load the same model (``Cell.load_key``).
    """
    from lm_eval_ext.backends.derived_answers import recheck_count

    loaded: set[str] = set()
    out = []
    for cell in cells:
        n = cell_items(cell, sizes)
        parent = plan.get(cell.cell_id)
        share = float(parse_model_args(cell.model_args, cell.cell_id).get("recheck",
                                                                           DEFAULT_RECHECK))
        run = recheck_count(n, share) if parent else n
        found = calibration.get(rate_key(cell)) or {}
        if "seconds_per_item" not in found:
            out.append(CellEstimate(cell.cell_id, n, run, parent, None, 0.0))
            continue
        load = 0.0 if cell.load_key() in loaded else found.get("load_s", 0.0)
        loaded.add(cell.load_key())
        seconds = (found["overhead_s"] - found.get("load_s", 0.0) + load
                   + found["seconds_per_item"] * run)
        out.append(CellEstimate(cell.cell_id, n, run, parent, seconds, load))
    return out
