"""benchmarks/gen_matrix_table.py: issue 22's matrix table against its committed files."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_results

pytestmark = needs_results

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gen_matrix_table import fast_against_plain, rows_of  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "gen_matrix_table.py"
RESULTS = ROOT / "benchmarks" / "results"
MATRIX, MATRIX2, MATRIX3 = (RESULTS / f"gen_2026-12-02_{name}"
                            for name in ("matrix", "matrix2", "matrix3"))
FILES = ["gen_throughput_llama8b_batches_h200.json", "gen_throughput_embedded_b32_h200.json",
         "gen_throughput_embedded_b32_limit100_h200.json", "gen_throughput_llama8b_nf4_h200.json"]


def globbed(folder: Path) -> list[str]:
    """A later lease's files, in the order of the command in the results map (the shell's glob)."""
    return sorted(p.name for p in folder.glob("gen_throughput_*.json"))


@pytest.mark.parametrize("folder, files, n_files", [(MATRIX, FILES, 4),
                                                    (MATRIX2, globbed(MATRIX2), 5),
                                                    (MATRIX3, globbed(MATRIX3), 2)])
def test_committed_table_is_what_the_script_makes_of_the_committed_files(tmp_path, folder, files,
                                                                         n_files):
    assert len(files) == n_files
    out = tmp_path / "matrix.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), *(str(folder / f) for f in files),
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == (folder / "matrix.md").read_text()


def test_fast_against_the_best_generate_mode_from_the_raw_runs():
    payload = json.loads((MATRIX / FILES[0]).read_text())

    def median(path: str) -> float:
        rows = [r["new_tokens_per_s"] for r in payload["runs"]
                if (r["path"], r["batch_size"]) == (path, 32)]
        assert len(rows) == 3
        return statistics.median(rows)

    expected = median("fast") / max(median("generate"), median("generate_static"))
    [row] = [r for r in rows_of(payload) if r[3] == "`fast@32`"]
    assert row[-1] == f"{expected:.2f}" == "1.37"


def test_ratio_uses_the_same_batch_and_the_faster_generate_mode():
    summary = {"fast@8": {"new_tokens_per_s": 100.0}, "generate@8": {"new_tokens_per_s": 80.0},
               "generate_static@8": {"new_tokens_per_s": 125.0},
               "generate@16": {"new_tokens_per_s": 10.0}, "fast@auto": {"new_tokens_per_s": 9.0}}
    assert fast_against_plain(summary) == {"fast@8": 0.8}
