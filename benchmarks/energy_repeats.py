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
    within = WithinRunError.of(runs, counter_period)
    return {"n_items": record["n_items"], "cell": cell.name,
            "within_se_joules": within.se_joules, "within_se_seconds": within.se_seconds,
            "energy_joules": m["energy_joules"],
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
            "by_slice": by_slice, "gpu_uuids": record.get("gpu_uuids"),
            "started": record.get("started"), "wall_seconds": record.get("seconds")}


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


#: windows shorter than this have no within-run interval (fewer than 4 one-second slices)
MIN_WINDOW_SECONDS = 2.0


def _groups(cells: dict[str, dict[str, list[dict[str, Any]]]], first: str | None
            ) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Each (mode, condition)'s repeats with windows of at least :data:`MIN_WINDOW_SECONDS`,
    the machine's first cell (``first``: its folder/cell) left out."""
    out = {}
    for mode, conditions in cells.items():
        for condition, repeats in conditions.items():
            kept = [c for c in repeats if c["inference_seconds"] >= MIN_WINDOW_SECONDS
                    and c["energy_joules"] and f"{c['repeat']}/{c['cell']}" != first]
            if len(kept) >= 2:
                out[(mode, condition)] = kept
    return out


def _pooled_cv(groups: dict, field: str, leave_out: tuple[str, str] | None = None
               ) -> tuple[float, int]:
    """Pooled SD of log(field) within groups (a relative SD) and its degrees of freedom."""
    num, df = 0.0, 0
    for key, repeats in groups.items():
        if key == leave_out:
            continue
        logs = [math.log(c[field]) for c in repeats]
        num += statistics.variance(logs) * (len(logs) - 1)
        df += len(logs) - 1
    return math.sqrt(num / df), df


def _first_cell(cells: dict) -> str | None:
    """The first cell run on the machine: the first campaign's earliest record."""
    started = [(c.get("started", ""), f"{c['repeat']}/{c['cell']}") for conditions in
               cells.values() for repeats in conditions.values() for c in repeats]
    return min(started)[1] if started else None


def run_to_run(cells: dict) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The run-to-run CVs of joules and seconds, pooled; and the machine's first cell apart."""
    first = _first_cell(cells)
    groups = _groups(cells, first)
    cv_e, df = _pooled_cv(groups, "energy_joules")
    cv_t, _ = _pooled_cv(groups, "inference_seconds")
    cold = None
    for conditions in cells.values():
        for condition, repeats in conditions.items():
            mine = [c for c in repeats if f"{c['repeat']}/{c['cell']}" == first]
            others = [c for c in repeats if c not in mine]
            if mine and others:
                cold = {"cell": first, "condition": condition,
                        "energy_joules": mine[0]["energy_joules"],
                        "inference_seconds": mine[0]["inference_seconds"],
                        "others_energy_joules": [c["energy_joules"] for c in others],
                        "others_inference_seconds": [c["inference_seconds"] for c in others]}
    return {"cv_joules": cv_e, "cv_seconds": cv_t, "degrees_of_freedom": df,
            "groups": [f"{m}/{c}" for m, c in groups],
            "rule": f"cells with windows of at least {MIN_WINDOW_SECONDS} s, the machine's "
                    "first cell left out (reported as cold_start); pooled SD of the log"}, cold


def coverage(cells: dict) -> dict[str, Any]:
    """Pairwise coverage of the stated SE (within-run + run-to-run term), each group checked
    with the run-to-run term pooled from the other groups; also ratios to M0 of one repeat."""
    first = _first_cell(cells)
    groups = _groups(cells, first)
    out: dict[str, Any] = {"joules": [], "seconds": [], "ratio_joules": []}
    for key, repeats in groups.items():
        cv_e, _ = _pooled_cv(groups, "energy_joules", key)
        cv_t, _ = _pooled_cv(groups, "inference_seconds", key)
        for field, within, cv, name in (("energy_joules", "within_se_joules", cv_e, "joules"),
                                        ("inference_seconds", "within_se_seconds", cv_t,
                                         "seconds")):
            stated = [(c[field], math.hypot(c[within] or 0.0, cv * c[field])) for c in repeats]
            out[name].append({"group": "/".join(key), "within_only": calibration(
                [(c[field], c[within]) for c in repeats]), "stated": calibration(stated)})
        mode, condition = key
        refs = {c["repeat"]: c for c in groups.get((mode, "M0"), [])}
        if condition != "M0" and refs:
            logs = []
            for c in repeats:
                ref = refs.get(c["repeat"])
                if ref is None:
                    continue
                se = [math.hypot(x["within_se_joules"] or 0.0, cv_e * x["energy_joules"])
                      / x["energy_joules"] for x in (c, ref)]
                logs.append((math.log(c["energy_joules"] / ref["energy_joules"]),
                             math.hypot(*se)))
            out["ratio_joules"].append({"group": f"{mode}/{condition}/M0",
                                        "stated": calibration(logs)})
    for name in ("joules", "seconds", "ratio_joules"):
        pairs = sum(g["stated"].get("pairs", 0) for g in out[name])
        covered = sum(g["stated"].get("covered", 0) for g in out[name])
        out[f"{name}_pairs_covered"] = [covered, pairs]
    within_pairs = sum(g["within_only"].get("pairs", 0) for g in out["joules"])
    within_cov = sum(g["within_only"].get("covered", 0) for g in out["joules"])
    out["joules_within_only_pairs_covered"] = [within_cov, within_pairs]
    return out


def power_agreement(cells: dict) -> dict[str, Any]:
    """The counter against the sampled power's integral, by window length."""
    rows = [(c["inference_seconds"], c["power_check"]["difference_pct"])
            for conditions in cells.values() for repeats in conditions.values()
            for c in repeats if c["power_check"]["difference_pct"] is not None]
    long = [d for t, d in rows if t >= MIN_WINDOW_SECONDS]
    short = [d for t, d in rows if t < MIN_WINDOW_SECONDS]
    hz = [c["power_check"]["achieved_hz"] for conditions in cells.values()
          for repeats in conditions.values() for c in repeats
          if c["power_check"]["achieved_hz"]]
    return {"windows_at_least_2s": len(long),
            "max_abs_difference_pct": max(map(abs, long), default=None),
            "mean_difference_pct": statistics.fmean(long) if long else None,
            "sd_difference_pct": statistics.stdev(long) if len(long) > 1 else None,
            "windows_under_2s": len(short),
            "max_abs_difference_pct_under_2s": max(map(abs, short), default=None),
            "median_achieved_hz": statistics.median(hz) if hz else None}


def idle_summary(cells: dict) -> dict[str, Any]:
    """Every idle sample's watts; the cells whose idle-corrected energy was not a number."""
    every = [c for conditions in cells.values() for repeats in conditions.values()
             for c in repeats]
    watts = [w for c in every for w in c["idle_samples"]]
    return {"samples": len(watts), "min_watts": min(watts, default=None),
            "max_watts": max(watts, default=None),
            "below_zero_cells": [f"{c['repeat']}/{c['cell']}" for c in every
                                 if "idle_corrected_below_zero" in (c["flags"] or [])],
            "within_noise_cells": sum("idle_corrected_within_noise" in (c["flags"] or [])
                                      for c in every), "cells": len(every)}


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
    report["run_to_run"], report["cold_start"] = run_to_run(cells)
    report["coverage"] = coverage(cells)
    report["power_check"] = power_agreement(cells)
    report["idle"] = idle_summary(cells)
    report["m2_over_m0"] = {mode: report["modes"][mode].get("M2", {}).get("ratio_energy_joules")
                            for mode in MODES}
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
