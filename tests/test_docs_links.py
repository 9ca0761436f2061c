"""Every relative link in the project's Markdown resolves: the file exists, and an anchor names a
heading of it (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    """README.md, docs/, benchmarks/ and examples/ pages, and the task folders' READMEs."""
    found = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("benchmarks/**/*.md"),
             *ROOT.glob("examples/**/*.md"), *ROOT.glob("lm_eval_ext/**/*.md")]
    return [p for p in found if ".venv" not in p.parts]


def slugs(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (lowercase, punctuation dropped, spaces to -)."""
    out, in_code = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if not in_code and (match := re.match(r"#{1,6}\s+(.*)", line)):
            text = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


def broken_links() -> list[str]:
    broken = []
    for page in pages():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked offline
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)} -> {target}"
            if not file.exists():
                broken.append(f"{where}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in slugs(file):
                broken.append(f"{where}: no such heading")
    return broken


def test_every_relative_link_resolves():
    assert pages() and broken_links() == []


def test_a_dead_link_and_a_dead_anchor_are_found(tmp_path, monkeypatch):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    (tmp_path / "README.md").write_text("# Top heading\n\n[ok](docs/page.md#a-b-c)\n")
    page.write_text("## A, b: c\n\n[gone](../nowhere.md) [bad](../README.md#missing) "
                    "[fine](../README.md#top-heading) [web](https://example.org/x)\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert broken_links() == ["docs/page.md -> ../nowhere.md: no such file",
                              "docs/page.md -> ../README.md#missing: no such heading"]
