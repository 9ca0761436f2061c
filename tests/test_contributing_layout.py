"""docs/contributing.md's layout names every module of the package, each under its top-level
folder, and names no module that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lm_eval_ext"
MODULE = re.compile(r"(?<![\w.])(\w+)\.py\b")


def layout_sections() -> dict[str, str]:
    """The layout's text per top-level folder of the package ("" for the package's own files)."""
    text = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    tree = text.split("## Layout", 1)[1].split("```", 2)[1]
    sections: dict[str, list[str]] = {}
    current = None
    for line in tree.splitlines():
        if line.startswith("lm_eval_ext/"):
            current = ""
        elif re.match(r"\S", line):  # tests/, benchmarks/, ...: outside the package
            current = None
        elif (match := re.match(r"  (\w+)/", line)) is not None:
            current = match.group(1)
        if current is not None:
            sections.setdefault(current, []).append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def package_modules() -> dict[str, set[str]]:
    """Each top-level folder's module names ("" for the package's own files), ``__init__`` aside
    except the package's own."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        if path.name == "__init__.py" and len(parts) > 1:
            continue
        found.setdefault(parts[0] if len(parts) > 1 else "", set()).add(path.stem)
    return found


def test_the_layout_names_every_module_and_no_gone_one():
    sections, modules = layout_sections(), package_modules()
    assert set(sections) == set(modules)
    for folder, names in modules.items():
        named = set(MODULE.findall(sections[folder]))
        where = f"lm_eval_ext/{folder}" if folder else "lm_eval_ext"
        assert names - named == set(), f"docs/contributing.md's layout omits these in {where}"
        gone = named - names - {"__init__"}  # every folder has one
        assert gone == set(), f"docs/contributing.md's layout names gone modules in {where}"
