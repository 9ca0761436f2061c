"""Summarise one lm-eval output folder into a committed JSON (no benchmark text).

Metrics per task, the ``config.metering`` block (energy, idle/forward shares, flags, devices)
and, for generative BBQ tasks, the parser-method counts from the samples log; with
``--time-log``, the process's wall time and peak memory from ``/usr/bin/time -v``.

    /usr/bin/time -v lm_eval --model hf-metered --tasks bbq_subset_25pct \
        --output_path out/headline --log_samples 2> out/time.log
    python benchmarks/summarize_run.py out/headline --time-log out/time.log \
        --out benchmarks/results/headline_cpu.json
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from _harness import environment, write_json


def summarize(folder: Path) -> dict:
    """The summary of the newest run under ``folder``."""
    [results_path] = sorted(folder.rglob("results_*.json"))[-1:]
    results = json.loads(results_path.read_text())
    stamp = results_path.stem.removeprefix("results_")
    tasks = {}
    for task, metrics in results["results"].items():
        methods: Counter = Counter()
        for path in results_path.parent.glob(f"samples_{task}_{stamp}.jsonl"):
            for line in path.read_text().splitlines():
                resps = json.loads(line).get("filtered_resps") or [None]
                if isinstance(resps[0], str) and '"method"' in resps[0]:
                    methods[json.loads(resps[0])["method"]] += 1
        tasks[task] = {"metrics": {k: v for k, v in metrics.items() if k != "alias"},
                       "n_samples": results["n-samples"][task], "parser_methods": dict(methods),
                       "version": results["configs"][task].get("metadata", {}).get("version")}
    config = results["config"]
    return {"results_file": str(results_path), "tasks": tasks,
            "model": config.get("model"), "model_args": config.get("model_args"),
            "metering": config.get("metering"), "hf_metered": config.get("hf_metered"),
            "total_evaluation_time_seconds": results.get("total_evaluation_time_seconds"),
            "lm_eval_version": results.get("lm_eval_version")}


def process_times(log: str) -> dict:
    """Wall seconds, CPU share and peak memory from ``/usr/bin/time -v`` output."""
    def field(name: str) -> str:
        match = re.search(rf"^\s*{re.escape(name)}: (.+)$", log, re.MULTILINE)
        if match is None:
            raise SystemExit(f"no '{name}' line in the time log: run /usr/bin/time -v")
        return match.group(1).strip()

    seconds = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        seconds = 60 * seconds + float(part)
    return {"process_wall_seconds": seconds,
            "process_cpu_percent": float(field("Percent of CPU this job got").rstrip("%")),
            "process_peak_rss_mb": int(field("Maximum resident set size (kbytes)")) / 1024,
            "process_exit_status": int(field("Exit status"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="an lm_eval --output_path folder")
    parser.add_argument("--out", required=True)
    parser.add_argument("--time-log", type=Path, help="the run's /usr/bin/time -v output")
    args = parser.parse_args()
    times = process_times(args.time_log.read_text()) if args.time_log else {}
    write_json(args.out, {"environment": environment(), **summarize(args.folder), **times})


if __name__ == "__main__":
    main()
