"""Summarise ``headline_ab.sh``'s runs as JSON: wall and inference seconds, same texts.

    python benchmarks/headline_ab.py OUT_DIR --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _harness import environment, write_json
from summarize_run import summarize


def _texts(folder: Path) -> dict[int, str]:
    [samples] = folder.rglob("samples_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    return {row["doc_id"]: row["resps"][0][0] for row in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", required=True)
    parser.add_argument("--command", help="the commands that made the runs (default: headline_ab.sh's)")
    args = parser.parse_args()
    runs, texts = [], {}
    sides = (args.folder / "sides.txt").read_text().split()  # run order, the reference first
    for time_file in sorted(args.folder.glob("*_*.time"),
                            key=lambda p: (int(p.stem.rsplit("_", 1)[1]),
                                           sides.index(p.stem.rsplit("_", 1)[0]))):
        side, round_ = time_file.stem.rsplit("_", 1)
        run = args.folder / time_file.stem
        metering = summarize(run)["metering"]
        texts.setdefault(side, _texts(run))
        runs.append({"side": side, "round": int(round_),
                     "wall_seconds": float(time_file.read_text().strip()),
                     "inference_seconds": metering["inference_seconds"],
                     f"texts_identical_to_{sides[0]}_round1": sum(
                         a == texts.get(sides[0], {}).get(k) for k, a in _texts(run).items())})
    write_json(args.out, {
        "command": (args.command or f"bash benchmarks/headline_ab.sh OLD {args.folder}")
        + f"; python benchmarks/headline_ab.py {args.folder} --out {args.out}",
        "environment": environment(),
        "commits": {s: (args.folder / f"{s}_commit").read_text().strip() for s in sides},
        "runs": runs})


if __name__ == "__main__":
    main()
