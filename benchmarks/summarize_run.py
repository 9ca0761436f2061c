"""Summarise one lm-eval output folder into a committed JSON (no benchmark text).

Metrics per task, the ``config.metering`` block (energy, idle/forward shares, flags, devices)
and, for generative BBQ tasks, the parser-method counts from the samples log.

    python benchmarks/summarize_run.py out/headline --out benchmarks/results/headline_cpu.json
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="an lm_eval --output_path folder")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    write_json(args.out, {"environment": environment(), **summarize(args.folder)})


if __name__ == "__main__":
    main()
