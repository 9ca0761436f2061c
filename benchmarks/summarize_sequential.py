"""Summary of `lm-eval-ext sequential` folders (no benchmark text), with GPUs and idle shares.

    python benchmarks/summarize_sequential.py out/seq/bf16_vs_int8 out/seq/bf16_vs_nf4 \
        --out benchmarks/results/h200_sequential_2026-11-30.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _harness import write_json

from lm_eval_ext.analysis import find_results, read_json


def _look_energy(folder: Path) -> dict:
    metering = read_json(find_results([folder])[0])["config"]["metering"]
    return {"gpu_uuids": [g["uuid"] for g in metering.get("gpus") or []],
            "joules": metering.get("energy_joules"), "idle_share": metering.get("idle_share"),
            "forward_share": metering.get("forward_share"),
            "inference_seconds": metering.get("inference_seconds")}


def summarize(folder: Path) -> dict:
    """Decision, looks and per-look, per-arm metering of one sequential folder."""
    result = json.loads((folder / "sequential.json").read_text())
    for look in result["looks"]:
        look["arms"] = {role: _look_energy(folder / "looks" / str(look["look"]) / role)
                        for role in ("reference", "candidate")}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    write_json(args.out, {"command": "bash benchmarks/h200_sequential.sh start (device); "
                          "python benchmarks/summarize_sequential.py FOLDERS --out " + args.out,
                          "comparisons": {f.name: summarize(f) for f in args.folders}})


if __name__ == "__main__":
    main()
