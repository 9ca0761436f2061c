"""One GPU vs two GPUs data parallel vs two GPUs model parallel: answers, time and energy.

Reads the three run folders that ``benchmarks/h200_scale_out.sh run`` writes (``single/``,
``dp/``, ``mp/``, each an lm-eval output folder with ``wall.json``) and writes one JSON without
benchmark text: per layout the metering (GPU UUIDs, seconds, joules, idle and forward shares,
flags, per-rank breakdown for data parallel, synced devices for model parallel), ratios to the
single-GPU run, and per-item agreement with it (chosen answer, and the largest log-likelihood
difference over every option of every item).

    python benchmarks/scale_out.py out/scale [--also NAME=OUTPUT_DIR] \
        --out benchmarks/results/h200_scale_out_2026-11-30/scale_out.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _harness import write_json

from lm_eval_ext.analysis import find_results, load_run, read_samples, samples_path

LAYOUTS = ("single", "dp", "mp")
METERING_KEYS = ("inference_seconds", "forward_seconds", "forward_share", "energy_joules",
                 "energy_joules_idle_corrected", "energy_joules_idle_corrected_se",
                 "idle_joules", "idle_share", "flags", "synced_devices", "data_parallel")


def _one_results(folder: Path) -> Path:
    found = find_results([folder])
    if len(found) != 1:
        raise SystemExit(f"{folder}: expected one results_*.json, found {len(found)}")
    return found[0]


def _logliks(results_path: Path, task: str) -> dict[int, list[float]]:
    """doc_id -> the log-likelihood of every option (lm-eval's resps)."""
    return {s["doc_id"]: [float(r[0][0]) for r in s["resps"]]
            for s in read_samples(samples_path(results_path, task))}


def layout_summary(folder: Path) -> dict[str, Any]:
    """One layout's metering, wall time and accuracy."""
    results_path = _one_results(folder)
    results = json.loads(results_path.read_text())
    metering = results["config"]["metering"]
    wall = json.loads((folder / "wall.json").read_text())
    run = load_run(results_path)
    return {"results_file": str(results_path.relative_to(folder)),
            "process_wall_seconds": wall["process_wall_seconds"],
            "gpu_uuids": [g["uuid"] for g in metering.get("gpus") or []],
            **{k: metering.get(k) for k in METERING_KEYS if k in metering},
            "n_items": int(len(run.items)), "accuracy": float(run.items["correct"].mean())}


def agreement(reference: Path, other: Path) -> dict[str, Any]:
    """Per-item agreement of ``other`` with ``reference`` (same task, same items)."""
    ref_path, other_path = _one_results(reference), _one_results(other)
    ref_items = load_run(ref_path).items.set_index("doc_id")
    other_items = load_run(other_path).items.set_index("doc_id")
    if set(ref_items.index) != set(other_items.index):
        raise SystemExit(f"{other}: not the same items as {reference}")
    task = str(ref_items["task"].iloc[0])
    ref_ll, other_ll = _logliks(ref_path, task), _logliks(other_path, task)
    deltas = [abs(a - b) for doc in ref_ll for a, b in zip(ref_ll[doc], other_ll[doc], strict=True)]
    differ = ref_items.index[ref_items["pred"] != other_items.loc[ref_items.index, "pred"]]
    return {"n_items": int(len(ref_items)), "n_same_answer": int(len(ref_items) - len(differ)),
            "differing_doc_ids": [int(d) for d in differ],
            "max_abs_loglik_difference": max(deltas), "n_identical_logliks":
            sum(d == 0.0 for d in deltas), "n_logliks": len(deltas)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder holding single/, dp/ and mp/")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--also", action="append", default=[], metavar="NAME=DIR",
                        help="another lm-eval output of the single-GPU configuration (e.g. an "
                             "earlier session's) to compare per item with single/")
    args = parser.parse_args()
    layouts = {name: layout_summary(args.root / name) for name in LAYOUTS}
    single = layouts["single"]
    comparisons = {}
    for name in ("dp", "mp"):
        run = layouts[name]
        comparisons[f"{name}_vs_single"] = {
            "answers": agreement(args.root / "single", args.root / name),
            "inference_seconds_ratio": _ratio(run["inference_seconds"],
                                              single["inference_seconds"]),
            "process_wall_seconds_ratio": _ratio(run["process_wall_seconds"],
                                                 single["process_wall_seconds"]),
            "energy_joules_ratio": _ratio(run["energy_joules"], single["energy_joules"]),
            "energy_joules_idle_corrected_ratio": _ratio(
                run["energy_joules_idle_corrected"], single["energy_joules_idle_corrected"]),
        }
    for entry in args.also:
        name, _, folder = entry.partition("=")
        comparisons[f"single_vs_{name}"] = {"path": folder,
                                            "answers": agreement(args.root / "single",
                                                                 Path(folder))}
    gpus = (args.root / "gpus.txt")
    write_json(args.out, {
        "command": "bash benchmarks/h200_scale_out.sh run (device, 2 GPUs); python "
                   f"benchmarks/scale_out.py {args.root} "
                   + "".join(f"--also {a} " for a in args.also) + f"--out {args.out}",
        "gpus": gpus.read_text().splitlines() if gpus.exists() else None,
        "layouts": layouts, "comparisons": comparisons})


if __name__ == "__main__":
    main()
