"""benchmarks/check_figures.py: every figure of README.md and docs/*.md against its results file."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import needs_results

pytestmark = needs_results

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "check_figures.py"
#: the commit that results no longer in the tree are cited at; a shallow clone lacks it
HISTORY = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", "7d6eb86^{commit}"],
                         capture_output=True).returncode == 0
needs_history = pytest.mark.skipif(not HISTORY, reason="a shallow clone: commit 7d6eb86 is "
                                   "not here (git fetch --unshallow)")


def _check(root: Path, *args: str) -> subprocess.CompletedProcess:
    history = [] if HISTORY else ["--skip-history"]
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), "--history",
                           str(ROOT), *history, *args], capture_output=True, text=True,
                          timeout=120)


def test_every_figure_in_the_docs_matches_its_file():
    proc = _check(ROOT, "--list")
    assert proc.returncode == 0, proc.stderr
    assert "0 problem(s)" in proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert all(len(row) == 3 and re.fullmatch(r"[\w/.-]+\.md:\d+", row[0]) for row in rows)
    assert ["93.3%", "primary_test_characteristics_2026-12-01.json:coverage.coverage"] in [
        row[1:] for row in rows if row[0].startswith("docs/analysis.md:")]
    assert sum(row[2] not in ("parameter", "closed form") for row in rows) > 100
    # results no longer in the tree are read from git history, by commit (counted, not
    # checked, in a shallow clone)
    assert any("@7d6eb86" in row[2] for row in rows)
    assert HISTORY or "from git history not checked" in proc.stderr


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy(ROOT / "README.md", root / "README.md")
    shutil.copytree(ROOT / "benchmarks" / "results", root / "benchmarks" / "results")
    return root


def test_a_changed_figure_and_a_figure_without_a_source_fail(tmp_path):
    root = _copy(tmp_path)
    analysis = root / "docs" / "analysis.md"
    text = analysis.read_text(encoding="utf-8")
    analysis.write_text(text.replace("covered the true delta in 93.3%",
                                     "covered the true delta in 95.2%"), encoding="utf-8")
    (root / "docs" / "tasks.md").write_text(
        (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
        + "\nThe whole pass took 12.5 s on the H200.\n"
        + "\nIt decoded 4,321 new tokens/s.\n"
        + "\nA run (`bench.py --size\n8b`, `x.json`): 9.75 s with `y`.\n", encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1
    assert re.search(r"docs/analysis\.md:\d+: figures \[.*'95\.2%'.*\] but "
                     r"docs/sources/analysis\.yaml:\S+ lists \[.*'93\.3%'.*\]", proc.stderr)
    assert re.search(r"docs/tasks\.md:\d+: 12\.5 s: no sources for this block", proc.stderr)
    assert re.search(r"docs/tasks\.md:\d+: 4,321 new tokens/s: no sources", proc.stderr)
    # a throughput with its metric's name between number and unit
    assert re.search(r"docs/tasks\.md:\d+: 9\.75 s: no sources", proc.stderr)
    # (after a code span that wrapped from the line before)


@needs_history
def test_a_copy_edit_passes_and_sources_are_checked_value_by_value(tmp_path):
    """Prose may change freely; a source that names the figure but not its value fails, also
    for a file cited from git history."""
    root = _copy(tmp_path)
    analysis = root / "docs" / "analysis.md"
    text = analysis.read_text(encoding="utf-8")
    assert "covered the true delta in 93.3%" in text
    analysis.write_text(text.replace("covered the true delta in 93.3%",
                                     "covered the real delta in 93.3%"), encoding="utf-8")
    assert _check(root).returncode == 0
    page = root / "docs" / "sources" / "measurements-gpu-generation.yaml"
    page_text = page.read_text(encoding="utf-8")
    cited = "2.32 J/item = gen_2026-12-01/fast_decode_ab_h200.json@7d6eb86 runs.6.j_per_item"
    assert cited in page_text
    page.write_text(page_text.replace(cited, cited.replace("runs.6", "runs.4")), encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1
    assert re.search(r"measurements-gpu-generation\.md:\d+: 2\.32 J/item but gen_2026-12-01/"
                     r"fast_decode_ab_h200\.json@7d6eb86:runs\.4\.j_per_item gives", proc.stderr)
    page.write_text(page_text.replace("@7d6eb86 runs.6", "@0000000 runs.6"), encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1 and "is not in commit 0000000" in proc.stderr


def test_sources_live_beside_the_page_and_settings_need_none(tmp_path):
    """A block names its sources; the page's sidecar lists them. Settings (alpha 0.05, a 95%
    interval, the 12.5% subset) are not figures; a sidecar block no page names, a name the
    sidecar lacks, and sources written in the page all fail."""
    root = _copy(tmp_path)
    tasks = root / "docs" / "tasks.md"
    base = tasks.read_text(encoding="utf-8")
    tasks.write_text(base + "\nAt alpha 0.05 with a 95% interval on the 12.5% subset.\n",
                     encoding="utf-8")
    assert _check(root).returncode == 0
    tasks.write_text(base + "\nIt took 5.8 s.\n<!-- sources: speed -->\n", encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1 and "block 'speed' is not in docs/sources/tasks.yaml" in proc.stderr
    side = root / "docs" / "sources" / "tasks.yaml"
    side.write_text(side.read_text(encoding="utf-8")
                    + "speed:\n- 5.8 s = analysis_speed.json seconds_total\n", encoding="utf-8")
    assert _check(root).returncode == 0
    tasks.write_text(base, encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1 and "block 'speed' is on no line of docs/tasks.md" in proc.stderr
    tasks.write_text(base + "\nIt took 5.8 s.\n<!-- sources: 5.8 s = analysis_speed.json "
                     "seconds_total -->\n", encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1 and "sources written in the page" in proc.stderr


def test_a_results_file_that_changed_fails(tmp_path):
    root = _copy(tmp_path)
    speed = root / "benchmarks" / "results" / "analysis_speed.json"
    speed.write_text(speed.read_text().replace('"seconds_total": 5.8', '"seconds_total": 6.8'))
    proc = _check(root)
    assert proc.returncode == 1
    assert "5.8 s but analysis_speed.json:seconds_total gives 6.8" in proc.stderr


def test_a_generated_table_that_drifts_from_its_source_fails(tmp_path):
    """A table included whole must equal what tables.py renders from its sources now."""
    root = _copy(tmp_path)
    page = root / "docs" / "measurements-public-generation.md"
    text = page.read_text(encoding="utf-8")
    assert "<!-- generated: generation_public_2026-12-02/side_by_side -->" in text
    assert _check(root).returncode == 0
    page.write_text(text.replace("| 1.35 |", "| 1.25 |", 1), encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1 and ("the table generation_public_2026-12-02/side_by_side "
                                     "differs from what its sources give now") in proc.stderr
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from tables import paste

    assert paste(root) == [page] and _check(root).returncode == 0  # pasted from its sources
    page.write_text(text.replace("|\n<!-- /generated -->", "|<!-- /generated -->", 1),
                    encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1 and "has no <!-- /generated --> line" in proc.stderr
    page.write_text(text.replace("generation_public_2026-12-02/side_by_side -->",
                                 "generation_public_2026-12-02/side_by_sid -->", 1),
                    encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1 and "no table generation_public_2026-12-02/side_by_sid" in \
        proc.stderr
    page.write_text(text, encoding="utf-8")
    source = root / "benchmarks" / "results" / "generation_public_2026-12-02" / (
        "side_by_side_headline_tf524.json")
    source.write_text(source.read_text(encoding="utf-8").replace(
        '"inference_seconds": 1.', '"inference_seconds": 9.', 1), encoding="utf-8")
    proc = _check(root)
    assert proc.returncode == 1 and "side_by_side differs from what its sources" in proc.stderr