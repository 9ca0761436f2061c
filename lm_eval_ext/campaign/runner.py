"""Run a campaign's cells, resumable: cells that share a loaded model run in one worker.

Each cell is lm-eval's own command line, ``--model hf-metered ... --output_path <in-flight
folder> --log_samples``. Cells with the same model args and load options (:meth:`Cell.load_key`;
batch sizes, tasks and limits may differ) run one after another in one worker process
(:mod:`lm_eval_ext.campaign.worker`), which keeps the model loaded and the idle-power sample;
each cell still writes its own lm-eval output folder and log. lm-eval's progress bars pass
through, one line per cell reports its end and the ETA. A cell that fails is recorded under
``failed/`` (its worker ends; the next cell gets a fresh one) and the campaign goes on; a rerun
of the same command retries it and skips every finished cell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from lm_eval_ext.campaign import derivation
from lm_eval_ext.campaign.spec import CampaignSpec, Cell
from lm_eval_ext.campaign.store import HOST, CampaignFolder, _now
from lm_eval_ext.campaign.worker import Worker, die_with_parent
from lm_eval_ext.cards import CARD_FILE, task_card
from lm_eval_ext.data.store import sha256_of

#: the fields of ``config.metering`` each cell's record keeps
RECORDED_METERING = ("energy_joules", "energy_joules_se", "energy_joules_idle_corrected",
                     "energy_joules_idle_corrected_se", "energy_joules_idle_corrected_reason",
                     "idle_share", "forward_share", "inference_seconds", "inference_seconds_se",
                     "execution_mode")
PACKAGES = ("lm_eval", "lm-eval-ext", "torch", "transformers", "accelerate", "bitsandbytes")
_LOG_TAIL = 4000


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages a cell's result depends on (None: not installed)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def run_lm_eval(argv: Sequence[str], log_path: Path, echo: bool = True) -> int:
    """Run one cell (lm-eval CLI arguments) in a subprocess; stream its output to the log."""
    command = [sys.executable, "-m", "lm_eval_ext.campaign.cell", *argv]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   preexec_fn=die_with_parent if os.name == "posix" else None)
        assert process.stdout is not None
        while chunk := process.stdout.read1(65536) if hasattr(process.stdout, "read1") \
                else process.stdout.read(65536):
            log.write(chunk)
            if echo:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
        return process.wait()


def describe_cell(cell: Cell, folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The card and the result summary of a cell's finished lm-eval output."""
    from lm_eval_ext.analysis.loader import find_results, read_json, read_samples, samples_path
    from lm_eval_ext.backends.card_fields import model_card_fields

    found = find_results([folder])
    if len(found) != 1:
        raise RuntimeError(f"expected one results_*.json under {folder}, found {len(found)}")
    results_path = found[0]
    results = read_json(results_path)
    files = {task: samples_path(results_path, task)
             for task in sorted(results.get("configs") or {})}  # a group: its subtasks
    samples = {task: read_samples(path) for task, path in files.items()}
    card = {"model_label": cell.model_label, "condition": cell.condition,
            "tasks": {task: task_card(results, task, rows, model_fields=model_card_fields(
                results.get("config") or {}))
                      for task, rows in samples.items()}}
    metering = (results.get("config") or {}).get("metering") or {}
    summary = {
        "results_path": str(results_path.relative_to(folder)),
        "n_items": sum(len(rows) for rows in samples.values()),
        "metrics": {k: v for k, v in (results.get("results") or {}).get(cell.task, {}).items()
                    if isinstance(v, (int, float)) and "_stderr," not in k},
        "gpu_uuids": [g.get("uuid") for g in metering.get("gpus") or []],
        **{key: metering.get(key) for key in RECORDED_METERING},
        "energy_flags": metering.get("flags"),
        # lm-eval's files of the cell (the card joins them), each with its SHA-256
        "files": {str(path.relative_to(folder)): sha256_of(path)
                  for path in (results_path, *files.values())},
    }
    return card, summary


@dataclass
class Progress:
    """One line per cell with an ETA (seconds per work unit so far: items or cells)."""

    remaining: list[int]  # work units per cell left: items, or 1 per cell
    unit: str
    done_units: int = 0
    seconds: float = 0.0

    def report(self, index: int, count: int, cell: Cell, status: str, n_items: int,
               elapsed: float, note: str = "") -> str:
        """Record a cell and print its line."""
        self.done_units += self.remaining[index - 1]
        self.seconds += elapsed
        left = sum(self.remaining[index:])
        eta = (f"ETA {left * self.seconds / self.done_units / 60:.1f} min for {left} {self.unit}"
               if self.done_units and left else "ETA -")
        line = (f"[campaign {index}/{count}] {cell.cell_id}: {status} in {elapsed:.0f} s "
                f"({n_items} items); {eta}{note}")
        print(line, flush=True)
        return line


def failure_reason(log: str) -> str | None:
    """The last error line of a cell's lm-eval log (what the user must fix), if it has one."""
    for line in reversed(log.strip().splitlines()):
        text = line.strip()
        if "error" in text.lower() or text.startswith(("Traceback", "raise ")):
            return text  # whole: the fix is at the end of our lines
    return None


def by_loaded_model(cells: Sequence[Cell]) -> list[Cell]:
    """``cells`` with those sharing a loaded model together, groups in order of first appearance."""
    order = {key: rank for rank, key in enumerate(dict.fromkeys(c.load_key() for c in cells))}
    return sorted(cells, key=lambda c: order[c.load_key()])  # stable within a group


def run_cells(spec: CampaignSpec, folder: CampaignFolder, cells: Sequence[Cell], *,
              shard: str = "1/1", echo: bool = True,
              sizes: Callable[[Cell], int] | None = None,
              derive: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Run every cell that is not done yet; return cell ids by outcome.

    ``derive``: child cell id -> parent cell id (:func:`derivation.plan_derivations`).
    """
    outcome: dict[str, list[str]] = {"done": [], "skipped": [], "failed": [], "busy": [],
                                     "refused": []}
    waiting = []
    for cell in cells:
        record, damage = folder.read_record(cell)
        if damage:
            print(f"[campaign] {cell.cell_id}: damaged ({damage}); running it again", flush=True)
        if record is None:
            waiting.append(cell)
    todo = by_loaded_model(waiting)
    outcome["skipped"] = [c.cell_id for c in cells if c not in todo]
    for cell_id in outcome["skipped"]:
        print(f"[campaign] {cell_id}: already done, skipped", flush=True)
    progress = (Progress([sizes(c) for c in todo], "items") if sizes
                else Progress([1] * len(todo), "cells"))
    run = _CampaignRun(spec, folder, Worker(echo), shard, package_versions(), progress,
                       outcome, len(todo), derive or {})
    worker_key = None
    try:
        for index, cell in enumerate(todo, start=1):
            if cell.load_key() != worker_key:  # another model: the next worker loads it
                run.worker.close()
                worker_key = cell.load_key()
            run.cell(index, cell)
    finally:
        run.worker.close()
    return outcome


@dataclass
class _CampaignRun:
    """What every cell of one ``run_cells`` call shares."""

    spec: CampaignSpec
    folder: CampaignFolder
    worker: Worker
    shard: str
    versions: dict[str, str | None]
    progress: Progress
    outcome: dict[str, list[str]]
    count: int
    derive: dict[str, str]  # child cell id -> parent cell id

    def cell(self, index: int, cell: Cell) -> None:
        """Run one cell in the worker unless another process holds or has finished it."""
        lock = self.folder.acquire(cell)
        if isinstance(lock, str):
            print(f"[campaign] {cell.cell_id}: {lock}", flush=True)
            self.outcome["busy"].append(cell.cell_id)
            return
        try:
            if self.folder.record(cell) is not None:  # finished by another process meanwhile
                self.outcome["skipped"].append(cell.cell_id)
                return
            self._run(index, cell)
        finally:
            lock.release()
            self.folder.write_manifest(self.spec)

    def _run(self, index: int, cell: Cell) -> None:
        inflight = self.folder.start(cell)
        started, clock = _now(), time.perf_counter()
        parent = derivation.parent_answers(self.folder, self.derive, cell, self.versions)
        answers_from = parent.results if parent else None
        print(f"[campaign {index}/{self.count}] {cell.cell_id}: lm_eval "
              + " ".join(cell.lm_eval_argv("<cell>", answers_from)), flush=True)
        code = self.worker.run(cell.lm_eval_argv(inflight / "output", answers_from),
                               inflight / "lm_eval.log")
        elapsed = time.perf_counter() - clock
        record = {"cell_id": cell.cell_id, "config": cell.config(),
                  "config_sha256": cell.config_sha256(), "started": started,
                  "ended": _now(), "seconds": elapsed, "host": HOST, "shard": self.shard,
                  "returncode": code, "packages": self.versions}
        if code == 0:
            try:
                card, summary = describe_cell(cell, inflight / "output")
            except Exception as exc:  # an lm-eval output we cannot read is a failure
                code, record["error"] = -1, f"{type(exc).__name__}: {exc}"
        if code != 0:
            log = (inflight / "lm_eval.log").read_text(encoding="utf-8", errors="replace")
            self.folder.fail(cell, inflight, {**record, "log_tail": log[-_LOG_TAIL:]}, log)
            reason = record.get("error") or failure_reason(log)
            self.progress.report(index, self.count, cell, f"FAILED (exit {code}"
                                 + (f": {reason}" if reason else "") + ")", 0, elapsed)
            self.outcome["failed"].append(cell.cell_id)
            if code == 2:  # refused by lm-eval-ext or lm-eval's parser: it fails again as is
                self.outcome["refused"].append(cell.cell_id)
            return
        card_path = (inflight / "output" / summary["results_path"]).parent / CARD_FILE
        card_path.write_text(json.dumps(card, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        summary["files"][str(card_path.relative_to(inflight / "output"))] = sha256_of(card_path)
        where = f"cells/{cell.cell_id}/output/"
        summary["files"] = {where + name: digest for name, digest in summary["files"].items()}
        record.update(summary, output_path=where + summary["results_path"], status="done",
                      **derivation.record_fields(
                          parent, inflight / "output" / summary["results_path"], cell.task))
        self.folder.finish(cell, inflight, record)
        self.progress.report(index, self.count, cell, "done", summary["n_items"], elapsed,
                             note=derivation.outcome_note(record))
        self.outcome["done"].append(cell.cell_id)
