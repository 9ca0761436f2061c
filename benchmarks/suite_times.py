"""Wall time of both test tiers on this machine, as the README runs them (JSON out).

    python benchmarks/suite_times.py --out benchmarks/results/suite_times.json

Runs ``pytest -n 2 --dist loadfile -m "not slow"`` (the tier for every change), then the full
suite (what CI runs), one after the other, and records each tier's wall seconds and pytest's own
closing line (counts). Nothing else should run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from _harness import command_line, environment, write_json

TIERS = {"quick": ["-m", "not slow"], "full": []}


def run_tier(extra: list[str]) -> dict:
    """One pytest run: wall seconds, exit code and the closing summary line."""
    command = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile",
               "-p", "no:cacheprovider", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"command": " ".join(["python", *command[1:]]), "wall_seconds": wall,
            "returncode": done.returncode, "summary": lines[-1] if lines else ""}


def main() -> None:
    """CLI."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results = {name: run_tier(extra) for name, extra in TIERS.items()}
    write_json(args.out, {"benchmark": "test suite wall time, both tiers",
                          "command": command_line("suite_times.py", args), "tiers": results,
                          "environment": environment()})


if __name__ == "__main__":
    main()
