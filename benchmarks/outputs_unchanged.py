"""Do two versions of the code give the same outputs? (refactor check on the CPU)

``run --out DIR`` evaluates the headline task, its loglik twin and CrowS-Pairs at ``--limit 12``
with hf-metered (each at batch 1 and batch 4), then analyses the loglik twin's batch 4 against
its batch 1. Run it on
the old tree and on the new one, then ``compare OLD NEW`` checks per-sample responses (text
exact, log-likelihoods within 1e-5), per-sample and task metrics, every key of
``config.metering`` (values that are measurements of time or energy, and their quality flags,
are compared by shape: the same keys and nulls), and the analysis CSVs (the runs' measured
columns and paths aside; the runs are named on the command line, so labels match). The JSON
it prints (or writes with ``--json``) is the evidence.

    python benchmarks/outputs_unchanged.py run --out out/before
    python benchmarks/outputs_unchanged.py run --out out/after
    python benchmarks/outputs_unchanged.py compare out/before out/after --json eq.json
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: one lm-eval run per (tasks, batch size); analyze takes one BBQ task per run
RUNS = {f"{name}_b{batch}": (tasks, batch)
        for name, tasks in (("gen", "bbq_subset_25pct,crows_pairs_ext_loglik"),
                            ("loglik", "bbq_subset_25pct_loglik")) for batch in ("1", "4")}
LIMIT = "12"
LOGLIK_TOLERANCE = 1e-5
#: config.metering keys whose values are measurements (time, energy, counts of probes):
#: compared by presence and type only
MEASURED = {"inference_seconds", "forward_seconds", "forward_share", "load_seconds",
            "energy_joules", "energy_joules_idle_corrected", "energy_joules_idle_corrected_se",
            "idle_joules", "idle_share", "idle_power", "devices", "gpus", "per_task",
            "flags", "counter_period_s", "seconds", "watts"}
#: estimates from the run's own timing (its time slices, their standard error, null with too
#: few slices): compared by presence of the key only
TIMING_ESTIMATES = {"slices", "inference_seconds_se"}
#: analysis CSV columns that are measurements (or paths) of the runs, not analysis results;
#: ``results_sha256`` hashes a results file, which holds the run's times
MEASURED_COLUMNS = {"inference_seconds", "energy_joules", "idle_share", "forward_share",
                    "energy_flags", "total_evaluation_seconds", "results_path", "energy_ratio",
                    "runtime_ratio", "energy_saving_pct", "runtime_saving_pct", "joules_per_item",
                    "results_sha256", "inference_seconds_se", "runtime_ratio_ci_low",
                    "runtime_ratio_ci_high", "energy_joules_se", "energy_joules_idle_corrected",
                    "energy_joules_idle_corrected_se", "energy_ratio_ci_low",
                    "energy_ratio_ci_high", "energy_ratio_idle_corrected",
                    "energy_ratio_idle_corrected_ci_low", "energy_ratio_idle_corrected_ci_high",
                    "joules_per_item_ci_low", "joules_per_item_ci_high"}


def run(out: Path) -> None:
    """Both lm-eval runs and their analysis, into ``out`` (a new or empty folder)."""
    if out.is_dir() and any(out.iterdir()):  # lm-eval would add runs beside the old ones
        sys.exit(f"outputs_unchanged: {out} is not empty; choose a new folder")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for name, (tasks, batch) in RUNS.items():
        subprocess.run(["lm-eval-ext", "run", "--model", "hf-metered", "--model_args",
                        "idle_seconds=0.5", "--tasks", tasks, "--limit", LIMIT,
                        "--batch_size", batch, "--log_samples", "--output_path",
                        str(out / name)], check=True, env=env)
    subprocess.run(["lm-eval-ext", "analyze", "--reference", f"b1={out / 'loglik_b1'}",
                    "--runs", f"b4={out / 'loglik_b4'}", "--out", str(out / "analysis"), "--bootstrap", "500",
                    "--mc-draws", "50", "--no-progress"], check=True, env=env)


def _one(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.rglob(pattern))


def _samples(folder: Path) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in _one(folder, "samples_*.jsonl"):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        out[task] = [json.loads(line) for line in path.read_text().splitlines() if line]
    return out


def _numbers_close(a: Any, b: Any, problems: list[str], where: str) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            problems.append(f"{where}: keys {sorted(set(a) ^ set(b))} differ")
        for key in set(a) & set(b):
            _numbers_close(a[key], b[key], problems, f"{where}.{key}")
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            problems.append(f"{where}: lengths {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _numbers_close(x, y, problems, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        if not (a == b or (math.isnan(a) and math.isnan(b))
                or abs(a - b) <= LOGLIK_TOLERANCE):
            problems.append(f"{where}: {a!r} != {b!r}")
    elif a != b:
        problems.append(f"{where}: {a!r} != {b!r}")


def _same_shape(a: Any, b: Any, problems: list[str], where: str) -> None:
    """A measured value: the same keys (nested) and the same nulls, any numbers."""
    if (a is None) != (b is None):
        problems.append(f"{where}: null in one run only")
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            problems.append(f"{where}: keys {sorted(set(a) ^ set(b))} differ")
        for key in set(a) & set(b) - TIMING_ESTIMATES:
            _same_shape(a[key], b[key], problems, f"{where}.{key}")


def _metering_keys(block: Any, problems: list[str], other: Any, where: str) -> None:
    """Same keys everywhere; same values except measurements (same shape there)."""
    if set(block) != set(other):
        problems.append(f"{where}: keys {sorted(set(block) ^ set(other))} differ")
    for key in set(block) & set(other) - TIMING_ESTIMATES:
        if key in MEASURED:
            _same_shape(block[key], other[key], problems, f"{where}.{key}")
        else:
            _numbers_close(block[key], other[key], problems, f"{where}.{key}")


def compare(old: Path, new: Path) -> dict[str, Any]:
    """Every difference between the two output trees (empty lists: identical)."""
    report: dict[str, Any] = {"old": str(old), "new": str(new)}
    for name in RUNS:
        problems: list[str] = []
        a_samples, b_samples = _samples(old / name), _samples(new / name)
        if set(a_samples) != set(b_samples):
            problems.append(f"tasks differ: {sorted(set(a_samples) ^ set(b_samples))}")
        n_samples = 0
        for task in sorted(set(a_samples) & set(b_samples)):
            for x, y in zip(a_samples[task], b_samples[task], strict=True):
                n_samples += 1
                where = f"{task}#{x['doc_id']}"
                _numbers_close(x["arguments"], y["arguments"], problems, f"{where}.arguments")
                _numbers_close(x["resps"], y["resps"], problems, f"{where}.resps")
                _numbers_close(x["filtered_resps"], y["filtered_resps"], problems,
                               f"{where}.filtered_resps")
                for metric in x["metrics"]:
                    _numbers_close(x[metric], y[metric], problems, f"{where}.{metric}")
        a_res = json.loads(_one(old / name, "results_*.json")[-1].read_text())
        b_res = json.loads(_one(new / name, "results_*.json")[-1].read_text())
        _numbers_close(a_res["results"], b_res["results"], problems, "results")
        _metering_keys(a_res["config"]["metering"], problems, b_res["config"]["metering"],
                       "config.metering")
        report[name] = {"samples_compared": n_samples, "differences": problems}
    csv_problems: list[str] = []
    csvs = sorted(p.name for p in (old / "analysis").glob("*.csv"))
    for name in csvs:
        new_path = new / "analysis" / name
        if not new_path.exists():
            csv_problems.append(f"{name}: missing in new")
            continue
        a_rows, b_rows = (
            [{k: v for k, v in row.items() if k not in MEASURED_COLUMNS}
             for row in csv.DictReader(path.open())] for path in (old / "analysis" / name, new_path))
        if a_rows != b_rows:
            columns = sorted({k for x, y in zip(a_rows, b_rows, strict=False)
                              for k in set(x) | set(y) if x.get(k) != y.get(k)})
            csv_problems.append(f"{name}: {sum(x != y for x, y in zip(a_rows, b_rows, strict=False))} rows "
                                f"differ ({len(a_rows)} vs {len(b_rows)} rows) in "
                                f"{', '.join(columns) or 'their count'}")
    report["analysis"] = {"csvs_compared": csvs, "differences": csv_problems}
    report["identical"] = not csv_problems and all(
        not report[name]["differences"] for name in RUNS)
    return report


def main() -> int:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run")
    run_parser.add_argument("--out", required=True, type=Path)
    compare_parser = sub.add_parser("compare")
    compare_parser.add_argument("old", type=Path)
    compare_parser.add_argument("new", type=Path)
    compare_parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    if args.command == "run":
        run(args.out)
        return 0
    report = compare(args.old, args.new)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0 if report["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
