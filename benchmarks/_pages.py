"""The pages whose figures are checked, and the markers of a generated table inside them.

Shared by ``check_figures.py`` (which checks the pages) and ``tables.py`` (which pastes tables
into them).
"""

from __future__ import annotations

import re
from pathlib import Path

GENERATED = re.compile(r"<!-- generated: (\S+) -->")
END_GENERATED = "<!-- /generated -->"


def documents(root: Path) -> list[Path]:
    """README.md and docs/*.md under ``root``."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def generated_blocks(page: Path) -> list[tuple[int, str, str]]:
    """(line number, table name, included text) of each generated table in a page."""
    blocks, current, body = [], None, []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if current is None and (match := GENERATED.search(line)):
            current, body = (number, match.group(1)), []
        elif current is not None and line.strip() == END_GENERATED:
            blocks.append((*current, "\n".join(body) + "\n"))
            current = None
        elif current is not None:
            body.append(line)
    return blocks
