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
