"""Where a profiled command's time went: a cProfile file summarised as JSON (no source text).

Named shares (own time of the functions that match) and the functions with the most own time.
cProfile's own overhead inflates Python-heavy parts, and work queued on a GPU is charged to
whichever call waits for it, so the figures locate the time, they do not time the command
(``/usr/bin/time`` does).

    python -m cProfile -o $OUT/headline.prof "$(command -v lm-eval-ext)" run --model hf-metered \\
        --tasks bbq_subset_25pct --output_path /tmp/h_prof
    python benchmarks/profile_summary.py $OUT/headline.prof --out benchmarks/results/X.json
    python -X importtime -c "import lm_eval_ext.backends.hf.metered" 2> imports.txt
    python benchmarks/profile_summary.py imports.txt --importtime --out benchmarks/results/Y.json
"""

from __future__ import annotations

import argparse
import pstats
import re

from _harness import write_json

#: named parts of a start-up: key -> (what it is, pattern over "file:line(function)")
PARTS = {
    "compiling_sources": ("compiling Python sources to bytecode (no .pyc beside them)",
                          r"method builtins\.compile>"),
    "sleeping": ("sleeping (the metering's idle-power sample)", r"method time\.sleep>"),
    "custom_op_registration": ("registering torch custom operators at import",
                               r"custom_ops\.py:\d+\(_register_to_dispatcher\)"),
    "cuda_graph_capture": ("recording and instantiating CUDA graphs (the fast path's decode)",
                           r"torch/cuda/graphs\.py:"),
    "metadata_scan": ("reading every installed distribution's metadata (importlib.metadata)",
                      r"importlib/metadata/__init__\.py:\d+\(packages_distributions\)"),
}


def summarise(path: str, top: int = 15) -> dict:
    """Total seconds, the named parts' own seconds and calls, the top functions by own time."""
    stats = pstats.Stats(path).stats  # (file, line, function) -> (calls, prim, own, cum, callers)
    rows = [(f"{file}:{line}({name})", calls, own) for (file, line, name), (calls, _, own, _, _)
            in stats.items()]
    parts = {}
    for key, (what, pattern) in PARTS.items():
        hits = [r for r in rows if re.search(pattern, r[0])]
        parts[key] = {"what": what, "own_seconds": sum(r[2] for r in hits),
                      "calls": sum(r[1] for r in hits)}
    rows.sort(key=lambda r: -r[2])
    return {"profile_total_seconds": sum(r[2] for r in rows), "parts": parts,
            "top_own_seconds": [{"function": f, "calls": c, "own_seconds": s}
                                for f, c, s in rows[:top]]}


def importtime_top(path: str, top: int = 30) -> list[dict]:
    """The modules with the most cumulative import time in ``python -X importtime`` output."""
    rows = []
    for line in open(path, encoding="utf-8"):
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append({"module": parts[2].strip(), "own_seconds": int(parts[0]) / 1e6,
                         "cumulative_seconds": int(parts[1]) / 1e6})
    return sorted(rows, key=lambda r: -r["cumulative_seconds"])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a cProfile file, or -X importtime output with --importtime")
    parser.add_argument("--out", required=True)
    parser.add_argument("--command", help="the profiled command, recorded in the JSON")
    parser.add_argument("--importtime", action="store_true",
                        help="PROFILE is python -X importtime's stderr: the slowest imports")
    args = parser.parse_args()
    summary = ({"slowest_imports": importtime_top(args.profile)} if args.importtime
               else summarise(args.profile))
    write_json(args.out, {"command": args.command, **summary})


if __name__ == "__main__":
    main()
