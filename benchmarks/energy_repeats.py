"""The preset's joules repeated: do the stated intervals cover what repeated runs show?

    # on the GPU: the preset in both execution modes, alternated, R times (resumable)
    python benchmarks/energy_repeats.py run --out-dir D --limit 100 --repeats 3 \
        --model-args power_check=true,idle_seconds=2
    # NVML's energy counter: how often it moves (2 s of reads)
    python benchmarks/energy_repeats.py counter --json F
    # here: every measured cell's repeats against its stated intervals
    python benchmarks/energy_repeats.py summarize D --json F [--counter F]

``run`` makes campaign invocations in the order fast r1, lm-eval r1, fast r2, lm-eval r2, ...
(``lm-eval-ext campaign --preset paper-stress-test --path loglik --execution MODE --limit N
--no-analyze --quiet``): repeat 1 is the whole preset (its derived cells too), later repeats its
measured cells only (the preset's mapping with the derived conditions left out). Each folder is
resumable; a finished one is skipped.

``summarize`` reads each measured cell's results file: joules, seconds, the within-run SEs the
package states (and those of other slice lengths, recomputed from the recorded slices), the
idle baseline's samples and the power check. Calibration: for every pair of repeats of a cell
(and of a ratio to M0 of the same repeat and mode), ``z = (x_i - x_j) / sqrt(se_i^2 + se_j^2)``;
the share of pairs with ``|z| < 1.96`` is the pairwise coverage (95% when the stated SEs hold),
and ``sd_ratio`` the observed SD between repeats over the root mean stated SE.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _harness import write_json

from lm_eval_ext.metering.uncertainty import Slice, WithinRunError

MODES = ("fast", "lm-eval")
MEASURED = ("M0", "M1", "M2", "M3", "M5a")
SLICE_CHOICES = (0.25, 0.5, 1.0, 2.0)
CAMPAIGN = ["-m", "lm_eval_ext.cli.main", "campaign", "--quiet", "--no-analyze"]


def measured_only(spec_path: Path, mode: str, limit: int, model_args: str) -> None:
    """The preset's mapping with the derived conditions left out, as a campaign file."""
    import yaml

    from lm_eval_ext.campaign.presets import paper_stress_test

    raw = paper_stress_test(model_args=model_args, path="loglik", limit=limit,
                            execution=mode)
    raw["conditions"] = {k: v for k, v in raw["conditions"].items() if k in MEASURED}
    raw["compare"] = {"interventions": {"reference": "M0", "runs": ["M1", "M2", "M3"]}}
    raw.pop("subsets")
    raw["name"] += "-measured"
    spec_path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")


def run(args: argparse.Namespace) -> None:
    """Every campaign of the plan in order, skipping finished ones; progress to a JSON file."""
    out = args.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    progress = out / "progress.json"
    log = json.loads(progress.read_text()) if progress.is_file() else {"invocations": []}
    for repeat, mode in itertools.product(range(1, args.repeats + 1), MODES):
        folder = out / f"{mode}_r{repeat}"
        manifest = folder / "manifest.json"
        if manifest.is_file() and json.loads(manifest.read_text()).get("complete"):
            continue
        if repeat == 1:
            source = ["--preset", "paper-stress-test", "--path", "loglik", "--execution", mode,
                      "--limit", str(args.limit), "--model_args", args.model_args]
        else:
            spec = out / f"measured_{mode}.yaml"
            measured_only(spec, mode, args.limit, args.model_args)
            source = [str(spec)]
        started = time.perf_counter()
        code = subprocess.call([sys.executable, *CAMPAIGN, *source, "--out", str(folder)],
                               cwd=out)
        log["invocations"].append({"folder": folder.name, "returncode": code,
                                   "wall_seconds": time.perf_counter() - started})
        write_json(progress, log)
        print(f"{folder.name}: exit {code} in {log['invocations'][-1]['wall_seconds']:.0f} s",
              flush=True)


def counter(args: argparse.Namespace) -> None:
    """How often NVML's energy counter (and the instantaneous power field) change, over 2 s."""
    import pynvml

    from lm_eval_ext.metering.sources import NvmlSource

    source = NvmlSource([0])
    reads, changes, last, started = 0, [], None, time.perf_counter()
    while time.perf_counter() - started < 2.0:
        value = source.read()[0]
        reads += 1
        if value != last:
            changes.append(time.perf_counter())
            last = value
    gaps = [b - a for a, b in zip(changes[1:], changes[2:], strict=False)]
    write_json(args.json, {
        "reads": reads, "changes": len(changes),
        "median_update_seconds": statistics.median(gaps) if gaps else None,
        "min_update_seconds": min(gaps) if gaps else None,
        "instant_power_watts": source.power_watts(),
        "uuid": source.describe()[0]["uuid"], "driver": pynvml.nvmlSystemGetDriverVersion()})


def _metering(cell: Path) -> dict[str, Any]:
    [path] = cell.rglob("results_*.json")
    return json.loads(path.read_text())["config"]["metering"]


def _runs(record: dict[str, list]) -> list[list[Slice]]:
    slices = [Slice(t, j, f) for t, j, f in zip(record["seconds"], record["joules"],
                                                 record["forwards"], strict=True)]
    out, start = [], 0
    for length in record["runs"]:
        out.append(slices[start:start + length])
        start += length
    return out


def cell_figures(cell: Path, counter_period: float) -> dict[str, Any]:
    """A measured cell's totals, stated SEs, SEs at other slice lengths, idle and power check."""
    m = _metering(cell)
    record = json.loads((cell / "cell.json").read_text())
    runs = [r for task in m["per_task"].values() for rt in task["request_types"].values()
            for r in _runs(rt["slice_record"])]
    by_slice = {}
    for seconds in SLICE_CHOICES:
        error = WithinRunError.of(runs, counter_period, seconds)
        by_slice[str(seconds)] = {"se_joules": error.se_joules, "se_seconds": error.se_seconds,
                                  "slices": error.slices}
    idle = m.get("idle_power") or {}
    return {"n_items": record["n_items"], "energy_joules": m["energy_joules"],
            "energy_joules_se": m.get("energy_joules_se"),
            "energy_joules_idle_corrected": m.get("energy_joules_idle_corrected"),
            "energy_joules_idle_corrected_se": m.get("energy_joules_idle_corrected_se"),
            "inference_seconds": m["inference_seconds"],
            "inference_seconds_se": m.get("inference_seconds_se"),
            "idle_watts": idle.get("watts"), "idle_se_watts": idle.get("se_watts"),
            "idle_samples": [s["watts"] for s in idle.get("samples") or []],
            "execution_mode": m.get("execution_mode"), "flags": m.get("flags"),
            "power_check": {k: (m.get("power_check") or {}).get(k) for k in
                            ("counter_joules", "sampled_joules", "difference_pct",
                             "achieved_hz", "samples")},
            "by_slice": by_slice, "gpu_uuids": record.get("gpu_uuids")}


def _z(pairs: list[tuple[float, float, float, float]]) -> list[float]:
    return [(a - b) / math.hypot(sa, sb) for a, sa, b, sb in pairs if math.hypot(sa, sb) > 0]


def calibration(values: list[tuple[float | None, float | None]]) -> dict[str, Any]:
    """Pairwise z of repeats against their stated SEs; SD between repeats over the RMS SE."""
    known = [(v, s) for v, s in values if v is not None and s is not None]
    if len(known) < 2:
        return {"repeats": len(known), "pairs": 0}
    z = _z([(a, sa, b, sb) for (a, sa), (b, sb) in itertools.combinations(known, 2)])
    sd = statistics.stdev(v for v, _ in known)
    rms = math.sqrt(statistics.fmean(s * s for _, s in known))
    return {"repeats": len(known), "pairs": len(z),
            "covered": sum(abs(x) < 1.96 for x in z), "max_abs_z": max(map(abs, z), default=None),
            "mean": statistics.fmean(v for v, _ in known), "sd_between": sd,
            "rms_stated_se": rms, "sd_ratio": sd / rms if rms > 0 else None}


def _log_ratio(cell: dict[str, Any], ref: dict[str, Any], field: str, se_field: str
               ) -> tuple[float | None, float | None]:
    x, sx, y, sy = cell.get(field), cell.get(se_field), ref.get(field), ref.get(se_field)
    if None in (x, sx, y, sy) or x <= 0 or y <= 0:
        return None, None
    return math.log(x / y), math.hypot(sx / x, sy / y)


def summarize(args: argparse.Namespace) -> None:
    """Per mode and condition: repeats, stated SEs, their calibration; M2 / M0; power check."""
    period = 0.1
    counter_info = json.loads(args.counter.read_text()) if args.counter else None
    if counter_info and counter_info.get("median_update_seconds"):
        period = counter_info["median_update_seconds"]
    cells: dict[str, dict[str, list[dict[str, Any]]]] = {m: {} for m in MODES}
    for folder in sorted(args.out_dir.glob("*_r*")):
        mode = folder.name.rsplit("_r", 1)[0]
        for cell in sorted((folder / "cells").glob("*")):
            condition = cell.name.split("__")[1]
            if condition in MEASURED and mode in cells:
                cells[mode].setdefault(condition, []).append(
                    {"repeat": folder.name, **cell_figures(cell, period)})
    report: dict[str, Any] = {"counter": counter_info, "counter_period_s": period, "modes": {}}
    for mode, conditions in cells.items():
        ref = {c["repeat"]: c for c in conditions.get("M0", [])}
        out = {}
        for condition, repeats in conditions.items():
            entry: dict[str, Any] = {"repeats": repeats, "calibration": {}}
            per_item = [(None if c["energy_joules"] is None else c["energy_joules"] / c["n_items"],
                         None if c["energy_joules_se"] is None
                         else c["energy_joules_se"] / c["n_items"]) for c in repeats]
            entry["calibration"]["joules_per_item"] = calibration(per_item)
            entry["calibration"]["seconds"] = calibration(
                [(c["inference_seconds"], c["inference_seconds_se"]) for c in repeats])
            entry["calibration"]["idle_corrected_joules"] = calibration(
                [(c["energy_joules_idle_corrected"], c["energy_joules_idle_corrected_se"])
                 for c in repeats])
            for seconds in SLICE_CHOICES:
                entry["calibration"][f"joules_slices_{seconds}"] = calibration(
                    [(c["energy_joules"], c["by_slice"][str(seconds)]["se_joules"])
                     for c in repeats])
                entry["calibration"][f"seconds_slices_{seconds}"] = calibration(
                    [(c["inference_seconds"], c["by_slice"][str(seconds)]["se_seconds"])
                     for c in repeats])
            if condition != "M0":
                for field, se_field in (("energy_joules", "energy_joules_se"),
                                        ("energy_joules_idle_corrected",
                                         "energy_joules_idle_corrected_se"),
                                        ("inference_seconds", "inference_seconds_se")):
                    logs = [_log_ratio(c, ref[c["repeat"]], field, se_field)
                            for c in repeats if c["repeat"] in ref]
                    entry["calibration"][f"log_ratio_{field}"] = calibration(logs)
                    entry[f"ratio_{field}"] = [
                        None if ref.get(c["repeat"]) is None or not ref[c["repeat"]].get(field)
                        or c.get(field) is None else c[field] / ref[c["repeat"]][field]
                        for c in repeats]
            out[condition] = entry
        report["modes"][mode] = out
    write_json(args.json, report)
    for mode, conditions in report["modes"].items():
        for condition, entry in sorted(conditions.items()):
            cal = entry["calibration"]["joules_per_item"]
            print(mode, condition, {k: cal.get(k) for k in ("repeats", "pairs", "covered",
                                                             "sd_ratio")},
                  entry.get("ratio_energy_joules"))


def main() -> None:  # noqa: D103
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    timed = sub.add_parser("run")
    timed.add_argument("--out-dir", type=Path, required=True)
    timed.add_argument("--limit", type=int, required=True)
    timed.add_argument("--repeats", type=int, default=3)
    timed.add_argument("--model-args", default="power_check=true,idle_seconds=2")
    timed.set_defaults(func=run)
    probe = sub.add_parser("counter")
    probe.add_argument("--json", type=Path, required=True)
    probe.set_defaults(func=counter)
    summary = sub.add_parser("summarize")
    summary.add_argument("out_dir", type=Path)
    summary.add_argument("--json", type=Path, required=True)
    summary.add_argument("--counter", type=Path)
    summary.set_defaults(func=summarize)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
