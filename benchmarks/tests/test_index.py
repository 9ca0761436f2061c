"""benchmarks/README.md indexes every script, and names no script that is gone."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]


def test_every_script_is_indexed_and_every_indexed_script_exists_or_is_retired():
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} | {p.name for p in BENCHMARKS.glob("*.sh")}
    assert scripts - set(re.findall(r"`([\w.]+\.(?:py|sh))`", index)) == set()
    current, _, retired = index.partition("## Retired")
    named = set(re.findall(r"^\| `([\w.]+\.(?:py|sh))`", current, flags=re.M))
    assert named and named <= scripts  # the current tables name only scripts that exist
    gone = set(re.findall(r"`([\w.]+\.(?:py|sh))`", retired)) - scripts
    assert {"static_decode_ab.py", "gen_matrix_table.py"} <= gone
