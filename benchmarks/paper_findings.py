"""Which of the seed paper's findings hold for a model: from a paper-stress-test campaign folder.

Reads the campaign's cells (``cell.json`` and each run's ``config.metering``) and its analysis
(``analysis/<model>/interventions/deltas.csv``, ``analysis/<model>/subsets.json``) and writes
one JSON: per finding the paper's statement, our numbers (with CIs where the data give one),
the GPUs that measured them and whether a ratio crosses GPUs (then it is only indicative).
A cell whose answers were taken from a parent cell has derived energy (the parent's joules per
item x items): each such ratio says so (``derived``), as it measures nothing new.

    python benchmarks/paper_findings.py CAMPAIGN_DIR --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pandas as pd
from _harness import write_json

from lm_eval_ext.analysis import find_results, read_samples, samples_path

#: M4_50pct_r1's configuration rerun on M5b's GPU
SAME_GPU_M4 = "M4_50pct_r1_same_gpu"


def _cells(root: Path) -> dict[str, dict[str, Any]]:
    """Condition -> the cell's record plus its run's metering block (done cells only)."""
    out = {}
    for record_path in sorted((root / "cells").glob("*/cell.json")):
        record = json.loads(record_path.read_text())
        results = json.loads((root / record["output_path"]).read_text())
        out[record["config"]["condition"]] = {**record, "metering": results["config"]["metering"]}
    return out


def _energy(cell: dict[str, Any]) -> dict[str, Any]:
    m = cell["metering"]
    n = cell["n_items"]
    return {"condition": cell["config"]["condition"], "task": cell["config"]["task"],
            "n_items": n, "gpu": (cell.get("gpu_uuids") or [None])[0],
            "seconds": m["inference_seconds"], "joules": m["energy_joules"],
            "joules_idle_corrected": m["energy_joules_idle_corrected"],
            "joules_idle_corrected_se": m.get("energy_joules_idle_corrected_se"),
            "idle_share": m.get("idle_share"), "forward_share": m.get("forward_share"),
            "joules_per_item": m["energy_joules"] / n,
            "idle_corrected_joules_per_item": m["energy_joules_idle_corrected"] / n,
            "derived_from": cell.get("derived_from")}


def _ratio(run: dict[str, Any], ref: dict[str, Any], per_item: bool = False) -> dict[str, Any]:
    raw, corrected = (("joules_per_item", "idle_corrected_joules_per_item") if per_item
                      else ("joules", "joules_idle_corrected"))
    derived = [c["condition"] for c in (run, ref) if c.get("derived_from")]
    notes = ([] if run["gpu"] == ref["gpu"] else
             ["different GPUs: indicative only (the analysis refuses this ratio)"])
    if derived:
        notes.append(f"derived energy ({', '.join(derived)}: parent joules per item x items), "
                     "not a measurement")
    return {"run": run["condition"], "reference": ref["condition"],
            "raw_ratio": run[raw] / ref[raw],
            "idle_corrected_ratio": run[corrected] / ref[corrected],
            "per_item": per_item, "same_gpu": run["gpu"] == ref["gpu"],
            "derived": derived, "note": "; ".join(notes)}


def rerun_cell(results_dir: Path, condition: str) -> dict[str, Any]:
    """A cell rerun outside the campaign (one lm-eval output folder), as ``_energy`` reads it."""
    results_path = find_results([results_dir])[0]
    results = json.loads(results_path.read_text())
    task = next(iter(results["results"]))
    n_items = len(read_samples(samples_path(results_path, task)))
    metering = results["config"]["metering"]
    return {"config": {"condition": condition, "task": task}, "n_items": n_items,
            "gpu_uuids": [g["uuid"] for g in metering.get("gpus") or []], "metering": metering}


def _delta(deltas: pd.DataFrame, run: str, metric: str) -> dict[str, Any]:
    row = deltas[(deltas["run"] == run) & (deltas["metric"] == metric)
                 & (deltas["subgroup_type"] == "all")].iloc[0]
    return {"run": run, "metric": metric, "delta_pp": row["delta_pp"],
            "ci95_pp": [row["ci_low"], row["ci_high"]], "p_value": row["p_value"],
            "test": row["test"]}


def findings(root: Path, model: str = "embedded",
             m5b_reference: Path | None = None) -> dict[str, Any]:
    """The paper's five findings, checked on one campaign folder.

    ``m5b_reference``: an lm-eval output of M4_50pct_r1's configuration rerun on M5b's GPU
    (then M5b's int8 ratio is also given on one GPU, as ``M4_50pct_r1_same_gpu``).
    """
    raw_cells = _cells(root)
    if m5b_reference is not None:
        raw_cells[SAME_GPU_M4] = rerun_cell(m5b_reference, SAME_GPU_M4)
    cells = {c: _energy(v) for c, v in raw_cells.items()}
    analysis = root / "analysis" / model
    deltas = pd.read_csv(analysis / "interventions" / "deltas.csv")
    subsets = json.loads((analysis / "subsets.json").read_text())
    m5_path = analysis / "m5" / "deltas.csv"
    m5_deltas = pd.read_csv(m5_path) if m5_path.is_file() else None
    same_gpu_b1 = [c for c in cells.values() if c["condition"].startswith("M4_")
                   and "M2" in cells and c["gpu"] == cells["M2"]["gpu"]]
    out: dict[str, Any] = {"campaign": f"{root} (not committed: holds benchmark text)",
                           "cells": cells, "findings": {}}
    f = out["findings"]
    f["batching_vs_energy"] = {
        "paper": "a larger batch (M1) saved energy in 3 of 4 Qwen settings",
        "ratios": [_ratio(cells[r], cells[ref]) for r, ref in
                   (("M1", "M0"), ("M5a", "M4_50pct_r1")) if r in cells and ref in cells],
        "quality": [_delta(deltas, "M1", m) for m in ("accuracy", "bias_s_dis", "bias_s_amb")],
    }
    f["int8_energy_vs_bf16"] = {
        "paper": "INT8 used +79% to +326% energy",
        "ratios": ([_ratio(cells["M2"], cells["M0"])] if "M2" in cells else [])
        + [_ratio(cells["M2"], c, per_item=True) for c in same_gpu_b1]
        + [_ratio(cells["M5b"], cells[ref]) for ref in ("M4_50pct_r1", SAME_GPU_M4)
           if "M5b" in cells and ref in cells],
        "quality": [_delta(deltas, "M2", m) for m in ("accuracy", "bias_s_dis", "bias_s_amb")]
        + ([_delta(m5_deltas, "M5b", m) for m in ("accuracy", "bias_s_dis", "bias_s_amb")]
           if m5_deltas is not None and "M5b" in set(m5_deltas["run"]) else []),
    }
    f["nf4_accuracy_and_bias"] = {
        "paper": "M3 (nf4) lowered accuracy by 4.45 pp (Qwen2.5-VL-7B on BBQ)",
        "deltas": [_delta(deltas, "M3", m) for m in ("accuracy", "bias_s_dis", "bias_s_amb")],
        "energy": _ratio(cells["M3"], cells["M0"]) if "M3" in cells else None,
    }
    smallest = [c for c in cells.values() if c["n_items"] == subsets["smallest_size"]]
    f["energy_vs_subset_size"] = {
        "paper": "energy scales with the subset; the smallest subset saved about 87%",
        "fit_raw": subsets["energy_vs_items"],
        "fit_idle_corrected": subsets["idle_corrected_energy_vs_items"],
        "smallest_vs_full": [_ratio(c, cells["M0"]) for c in smallest],
        "gpus": subsets["gpu_uuids"],
    }
    f["membership_spread_at_smallest"] = {
        "paper": "subset memberships of one size give different estimates (5 replicates)",
        "size": subsets["smallest_size"], "spread_pp": subsets["spread_at_smallest"],
    }
    out["missing_cells"] = sorted(set(json.loads((root / "campaign.json").read_text())
                                      ["campaign"]["cells"])
                                  - {c for c in (p.name for p in (root / "cells").iterdir())})
    if m5b_reference is not None:
        out["m5b_reference"] = (f"{SAME_GPU_M4}: M4_50pct_r1's configuration rerun on M5b's GPU "
                                "(benchmarks/h200_scale_out.sh, layout 'single')")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("campaign", type=Path)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--m5b-reference", type=Path,
                        help="lm-eval output of M4_50pct_r1's configuration on M5b's GPU")
    args = parser.parse_args()
    payload = findings(args.campaign, args.model, args.m5b_reference)
    extra = " --m5b-reference SINGLE" if args.m5b_reference else ""
    payload["command"] = f"python benchmarks/paper_findings.py CAMPAIGN{extra} --out {args.out}"
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
