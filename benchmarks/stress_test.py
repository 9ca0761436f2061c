"""The paper's stress test as a user runs it: whole-campaign wall, per-cell seconds, answers.

    # the preset as typed (19 cells), timed; resumable: a rerun adds its wall to the file
    python benchmarks/stress_test.py run --out-dir /tmp/stress --json F [--limit N] [--label L]
        [--python-path OLD_SITE] [--campaign-arg=--measure-all ...]
    # two runs' cells, item by item (the same items: their answers, equal or not)
    python benchmarks/stress_test.py compare DIR_A DIR_B --json F

``run`` times ``lm-eval-ext campaign --preset paper-stress-test --path loglik --out DIR --quiet
--no-analyze`` as a subprocess (``--python-path``: an older installed copy of the package first
on ``PYTHONPATH``, so its cells run that code), then reads every finished cell's record
(cell.json) and results file: wall seconds, inference seconds, joules, what it reused or
derived, GPU UUIDs. ``campaign_wall_seconds`` is the sum of the invocations' walls (a campaign
killed at a device call's limit resumes in the next call; the gap between calls is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _harness import environment, write_json

CAMPAIGN = ["-m", "lm_eval_ext.cli.main", "campaign", "--preset", "paper-stress-test",
            "--path", "loglik", "--quiet", "--no-analyze"]


def _results(cell: Path) -> dict[str, Any]:
    [path] = cell.rglob("results_*.json")
    return json.loads(path.read_text())


def cell_rows(out: Path) -> list[dict[str, Any]]:
    """Every finished cell: its record's times and energy, and its results' metering."""
    rows = []
    for folder in sorted((out / "cells").iterdir()):
        record = json.loads((folder / "cell.json").read_text())
        metering = _results(folder)["config"]["metering"]
        rows.append({
            "cell_id": record["cell_id"], "wall_seconds": record["seconds"],
            "inference_seconds": record.get("inference_seconds"), "n_items": record["n_items"],
            "energy_joules": record.get("energy_joules"), "idle_share": record.get("idle_share"),
            "energy_joules_se": record.get("energy_joules_se"),
            "inference_seconds_se": record.get("inference_seconds_se"),
            "execution_mode": record.get("execution_mode"),
            "forward_share": record.get("forward_share"), "gpu_uuids": record.get("gpu_uuids"),
            "derived_from": record.get("derived_from"), "started": record["started"],
            "load_seconds": metering.get("load_seconds"), "warm": metering.get("warm"),
            "scoring_graphs": metering.get("scoring_graphs"),
            "precision": metering.get("precision"), "batch_size": metering.get("batch_size")})
    return rows


def measured_inference_seconds(cells: list[dict[str, Any]]) -> float:
    """Inference seconds of the measured cells (a derived cell's are its parent's per item x
    its items: no inference of this run)."""
    return sum(c["inference_seconds"] or 0.0 for c in cells if not c["derived_from"])


def run(args: argparse.Namespace) -> None:
    """Time the preset once (or resume it) and write the summary."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.python_path:
        env["PYTHONPATH"] = os.pathsep.join([args.python_path, env.get("PYTHONPATH", "")])
    out = args.out_dir.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, *CAMPAIGN, "--out", str(out), *args.campaign_arg]
    if args.limit:
        command += ["--limit", str(args.limit)]
    previous = json.loads(args.json.read_text()) if args.json.is_file() else {}
    started = time.perf_counter()
    try:  # run outside the source tree: ``python -m`` would import the tree's package first
        code = subprocess.call(command, env=env, cwd=out.parent, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        code = "timeout"
    wall = time.perf_counter() - started
    invocations = [*previous.get("invocations", []),
                   {"wall_seconds": wall, "returncode": code, "command": command[1:]}]
    cells = cell_rows(out) if (out / "cells").is_dir() else []
    inference = measured_inference_seconds(cells)
    total = sum(i["wall_seconds"] for i in invocations)
    write_json(args.json, {
        "label": args.label, "limit": args.limit, "preset": "paper-stress-test --path loglik",
        "campaign_wall_seconds": total, "invocations": invocations, "cells_done": len(cells),
        "inference_seconds": inference, "inference_seconds_counts": "measured cells only",
        "outside_inference_seconds": total - inference,
        "outside_inference_share": (total - inference) / total if total else None,
        "gpu_uuids": sorted({u for c in cells for u in c["gpu_uuids"] or []}),
        "cells": cells, "environment": environment()})
    print(f"{args.label}: {len(cells)} cells, {total:.1f} s wall, {inference:.1f} s inference")


def _answers(cell: Path) -> dict[Any, Any]:
    [samples] = cell.rglob("samples_*.jsonl")
    rows = (json.loads(line) for line in samples.read_text().splitlines())
    return {row["doc_id"]: [[float(r[0][0]), r[0][1]] for r in row["resps"]] for row in rows}


def compare(args: argparse.Namespace) -> None:
    """Per cell: items compared, identical answers, the largest log-likelihood difference."""
    report = []
    for folder in sorted((args.a / "cells").iterdir()):
        other = args.b / "cells" / folder.name
        if not other.is_dir():
            continue
        a, b = _answers(folder), _answers(other)
        if sorted(a) != sorted(b):
            report.append({"cell_id": folder.name, "error": "different items"})
            continue
        same = sum(a[d] == b[d] for d in a)
        gaps = [abs(x[0] - y[0]) for d in a for x, y in zip(a[d], b[d], strict=True)]
        greedy = sum(x[1] != y[1] for d in a for x, y in zip(a[d], b[d], strict=True))
        picks = sum(max(range(len(a[d])), key=lambda i: a[d][i][0])
                    != max(range(len(b[d])), key=lambda i: b[d][i][0]) for d in a)
        report.append({"cell_id": folder.name, "items": len(a), "identical_items": same,
                       "max_abs_loglik_difference": max(gaps, default=0.0),
                       "greedy_flags_differing": greedy, "argmax_differing": picks})
    write_json(args.json, {"a": str(args.a), "b": str(args.b), "cells": report,
                           "identical_cells": sum(r.get("identical_items") == r.get("items")
                                                  for r in report)})
    for row in report:
        print(row)


def main() -> None:  # noqa: D103
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    timed = sub.add_parser("run")
    timed.add_argument("--out-dir", type=Path, required=True)
    timed.add_argument("--json", type=Path, required=True)
    timed.add_argument("--limit", type=int)
    timed.add_argument("--label", default="current")
    timed.add_argument("--python-path", help="an older package copy, first on PYTHONPATH")
    timed.add_argument("--campaign-arg", action="append", default=[])
    timed.add_argument("--timeout", type=float, help="kill the campaign after this many seconds")
    timed.set_defaults(func=run)
    both = sub.add_parser("compare")
    both.add_argument("a", type=Path)
    both.add_argument("b", type=Path)
    both.add_argument("--json", type=Path, required=True)
    both.set_defaults(func=compare)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
