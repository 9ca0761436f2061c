"""The paper's stress test as a user runs it: whole-campaign wall, per-cell seconds, answers.

    # the preset as typed (19 cells), timed; resumable: a rerun adds its wall to the file
    python benchmarks/stress_test.py run --out-dir /tmp/stress --json F [--limit N] [--label L]
        [--path generative] [--condition-limit M0=900 ...] [--estimate-calibration 4]
        [--python-path OLD_SITE] [--campaign-arg=--measure-all ...]
    # two runs' cells, item by item (the same items: their answers, equal or not)
    python benchmarks/stress_test.py compare DIR_A DIR_B --json F

``run`` times ``lm-eval-ext campaign --preset paper-stress-test --path PATH --out DIR --quiet
--no-analyze`` (``--analyze``: with the campaign's judge and analysis) as a subprocess
(``--python-path``: an older installed copy of the package first on ``PYTHONPATH``, so its
cells run that code), then reads every finished cell's record
(cell.json) and results file: wall seconds, inference seconds, joules, what it reused or
derived (the re-check's items, matches and seconds), GPU UUIDs. ``campaign_wall_seconds`` is
the sum of the invocations' walls (a campaign killed at a device call's limit resumes in the
next call; the gap between calls is not counted).

``--condition-limit COND=N`` (``M4_*=N`` for every M4 cell) gives a condition its own limit: the
preset's mapping is then written as a campaign file beside ``--out-dir`` and run as one (the
same cells and commands, other limits). ``--estimate-calibration N``: before the run, the dry
run's estimate of each cell (calibrated on N items per engine configuration) and, from the same
rates, of each cell of the preset on the full instrument; after it, each cell's full-instrument
projection from its own measured rate (a derived cell: its re-check's rate on the full cell's
re-check) beside them. Generative cells also get their generated tokens (the texts re-encoded
by the embedded model's tokenizer; an end-of-sequence token is not in a text) and the
inference seconds per generated token.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _harness import environment, write_json

CAMPAIGN = ["-m", "lm_eval_ext.cli.main", "campaign", "--quiet"]


def _results(cell: Path) -> dict[str, Any]:
    [path] = cell.rglob("results_*.json")
    return json.loads(path.read_text())


def _recheck(record: dict[str, Any]) -> dict[str, Any] | None:
    """A derived (or planned) cell's re-check: items, matches, seconds, joules, refusal."""
    found = record.get("derivation")
    if not found:
        return None
    return {key: found.get(key) for key in (
        "parent", "derived", "derivation_refused", "not_attempted", "items", "rechecked_items",
        "matched_items", "recheck_inference_seconds", "recheck_energy_joules")}


def generated_tokens(cell: Path) -> int | None:
    """Tokens of the cell's generated texts (re-encoded; None: not a generative cell)."""
    [samples] = cell.rglob("samples_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    texts = [r["resps"][0][0] for r in rows if r["resps"] and isinstance(r["resps"][0][0], str)]
    if not texts:
        return None
    from transformers import AutoTokenizer

    from lm_eval_ext.backends.embedded_model import ensure_checkpoint

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_checkpoint()))
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)


def cell_rows(out: Path, tokens: bool = False) -> list[dict[str, Any]]:
    """Every finished cell: its record's times and energy, and its results' metering."""
    rows = []
    for folder in sorted((out / "cells").iterdir()):
        record = json.loads((folder / "cell.json").read_text())
        metering = _results(folder)["config"]["metering"]
        counted = generated_tokens(folder) if tokens else None
        measured = None if record.get("derived_from") else record.get("inference_seconds")
        rows.append({
            "recheck": _recheck(record), "generated_tokens": counted,
            "seconds_per_generated_token": measured / counted if counted and measured
            else None,
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


def preset_mapping(path: str, limit: int | None, limits: dict[str, int]) -> dict[str, Any]:
    """The preset as a campaign mapping, each condition of ``limits`` with its own limit.

    ``limits``: condition name (or ``PREFIX*``) -> limit; others keep ``limit``.
    """
    from lm_eval_ext.campaign.presets import paper_stress_test

    mapping = paper_stress_test(path=path, limit=limit)
    for name, condition in mapping["conditions"].items():
        for pattern, value in limits.items():
            if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                condition["limit"] = value
    return mapping


def campaign_source(args: argparse.Namespace, out: Path) -> list[str]:
    """The campaign's arguments: the preset as typed, or its mapping written as a file."""
    if not args.condition_limit:
        return ["--preset", "paper-stress-test", "--path", args.path,
                *(["--limit", str(args.limit)] if args.limit else [])]
    import yaml

    spec = out.parent / f"{out.name}.yaml"
    spec.write_text(yaml.safe_dump(preset_mapping(args.path, args.limit, args.condition_limit),
                                   sort_keys=False))
    return [str(spec)]


def estimates(args: argparse.Namespace, source: list[str],
              calibration: dict[str, Any] | None = None) -> dict[str, Any]:
    """The dry run's estimate per cell of this campaign and of the preset on the full instrument.

    One calibration run per engine configuration serves both (the rates do not depend on the
    limit); ``calibration``: one made before (an earlier invocation's), reused.
    """
    from lm_eval_ext.campaign import plan_dry_run
    from lm_eval_ext.campaign.spec import build_spec

    limited = build_spec(preset_mapping(args.path, args.limit, args.condition_limit))
    found = plan_dry_run(limited, calibration_limit=args.estimate_calibration,
                         calibration=calibration)
    full = plan_dry_run(build_spec(preset_mapping(args.path, None, {})),
                        calibration=found.calibration)
    rows = {"this_campaign": [asdict(e) for e in found.estimates],
            "full_instrument": [asdict(e) for e in full.estimates]}
    return {"calibration_limit": args.estimate_calibration, "calibration": found.calibration,
            "campaign_source": source, **rows}


def projections(cells: list[dict[str, Any]], planned: dict[str, Any] | None) -> list[dict]:
    """Each cell's full-instrument inference seconds from its own measured rate.

    A measured cell: its inference seconds per item x the full cell's items; a derived cell:
    its re-check's seconds per item x the full cell's re-check (``recheck_count``). Beside it
    the dry run's full-instrument estimate and this campaign's estimate against the measured
    wall.
    """
    from lm_eval_ext.backends.derived_answers import recheck_count

    planned = planned or {}
    full = {e["cell_id"]: e for e in planned.get("full_instrument", [])}
    this = {e["cell_id"]: e for e in planned.get("this_campaign", [])}
    out = []
    for cell in cells:
        whole = full.get(cell["cell_id"]) or {}
        items = whole.get("items")
        check = cell["recheck"] or {}
        if cell["derived_from"]:  # what ran: the re-check
            ran, seconds = check.get("rechecked_items") or 0, check.get("recheck_inference_seconds")
            runs = recheck_count(items, 0.05) if items else None
        else:
            ran, seconds, runs = cell["n_items"], cell["inference_seconds"], items
        rate = (seconds or 0.0) / max(ran, 1)
        outside = cell["wall_seconds"] - (seconds or 0.0)  # start-up, tasks, metrics, writing
        out.append({
            "cell_id": cell["cell_id"], "full_items": items, "full_items_run": runs,
            "measured_seconds_per_item_run": rate,
            "projected_inference_seconds": rate * runs if runs else None,
            "projected_wall_seconds": rate * runs + outside if runs else None,
            "dry_run_full_estimate_seconds": whole.get("seconds"),
            "dry_run_estimate_seconds": (this.get(cell["cell_id"]) or {}).get("seconds"),
            "measured_wall_seconds": cell["wall_seconds"]})
    return out


def run(args: argparse.Namespace) -> None:
    """Time the preset once (or resume it) and write the summary."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.python_path:
        env["PYTHONPATH"] = os.pathsep.join([args.python_path, env.get("PYTHONPATH", "")])
    out = args.out_dir.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    source = campaign_source(args, out)
    command = [sys.executable, *CAMPAIGN, *source, "--out", str(out), *args.campaign_arg,
               *([] if args.analyze else ["--no-analyze"])]
    previous = json.loads(args.json.read_text()) if args.json.is_file() else {}
    planned = previous.get("estimates")
    if args.estimate_calibration:  # this campaign's limits, the calibration made once
        started = time.perf_counter()
        seconds = (planned or {}).get("seconds")
        planned = estimates(args, source, (planned or {}).get("calibration"))
        planned["seconds"] = seconds or time.perf_counter() - started
        write_json(args.json, {**previous, "estimates": planned})
        for row in planned["this_campaign"]:
            print(f"{row['cell_id']}: {row['items']} items, {row['run_items']} run, "
                  f"estimated {row['seconds'] or 0:.0f} s", flush=True)
        print(f"estimated: {sum(r['seconds'] or 0 for r in planned['this_campaign']):.0f} s "
              f"(the full instrument: "
              f"{sum(r['seconds'] or 0 for r in planned['full_instrument']):.0f} s)", flush=True)
        if args.estimate_only:
            return
    started = time.perf_counter()
    try:  # run outside the source tree: ``python -m`` would import the tree's package first
        code = subprocess.call(command, env=env, cwd=out.parent, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        code = "timeout"
    wall = time.perf_counter() - started
    invocations = [*previous.get("invocations", []),
                   {"wall_seconds": wall, "returncode": code, "command": command[1:]}]
    cells = cell_rows(out, tokens=args.path == "generative") if (out / "cells").is_dir() else []
    inference = measured_inference_seconds(cells)
    total = sum(i["wall_seconds"] for i in invocations)
    write_json(args.json, {
        "label": args.label, "limit": args.limit, "condition_limits": args.condition_limit,
        "preset": f"paper-stress-test --path {args.path}", "estimates": planned,
        "projections": projections(cells, planned) if planned else None,
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
    timed.add_argument("--path", choices=("loglik", "generative"), default="loglik")
    timed.add_argument("--condition-limit", type=_condition_limit, action="append", default=[],
                       help="COND=N (or M4_*=N): that condition's own limit")
    timed.add_argument("--analyze", action="store_true",
                       help="let the campaign judge (with --campaign-arg=--judge) and analyse "
                            "(Table 1) after the cells; timed in the campaign's wall")
    timed.add_argument("--estimate-calibration", type=int, default=0,
                       help="the dry run's estimates first, calibrated on N items")
    timed.add_argument("--estimate-only", action="store_true",
                       help="write the estimates and stop (a later run reuses the calibration)")
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
    if args.command == "run":
        args.condition_limit = dict(args.condition_limit)
    args.func(args)


def _condition_limit(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not value.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: use COND=N (e.g. M2=24 or M4_*=100)")
    return name, int(value)


if __name__ == "__main__":
    main()
