"""Task names checked before lm-eval builds its task index (a second, not a minute).

lm-eval finds a misspelt ``--tasks`` name only after indexing its whole task tree (60-94 s on
2 busy cores). Every task, group or tag lm-eval can load is named in some YAML file of its tree,
of our folders or of ``--include_path``, so a name that occurs in none of them is certainly
unknown: :func:`unknown_task_names` reads the files as text (about a second) and reports only
those. A name it cannot judge (a path, a glob pattern) is left to lm-eval.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

#: a ``task:``, ``group:`` or ``tag:`` line (what lm-eval's index is built from), for hints
_DECLARED = re.compile(r"^\s*-?\s*(?:task|group|tag)\s*:\s*([A-Za-z0-9_.\-]+)\s*$", re.M)


def _is_pattern_or_path(name: str) -> bool:
    if any(c in name for c in "*?[") or name.endswith(".yaml"):
        return True
    try:
        return Path(name).exists()
    except OSError:  # a name over the file system's limits is no path (and no task either)
        return False


@functools.cache
def _yaml_texts(roots: tuple[str, ...]) -> tuple[str, ...]:
    """The text of every YAML file under ``roots`` (unreadable files are skipped)."""
    texts = []
    for root in roots:
        for path in Path(root).rglob("*.yaml"):
            try:
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
    return tuple(texts)


def _roots(include_paths: Iterable[str | Path]) -> tuple[str, ...]:
    import lm_eval.tasks

    return (str(Path(lm_eval.tasks.__file__).parent), *(str(p) for p in include_paths))


def unknown_task_names(names: Sequence[str], include_paths: Iterable[str | Path]) -> list[str]:
    """The names that no task YAML under lm-eval's tree or ``include_paths`` mentions."""
    candidates = [n for n in names if not _is_pattern_or_path(n)]
    if not candidates:
        return []
    word = {n: re.compile(rf"(?<![A-Za-z0-9_.\-]){re.escape(n)}(?![A-Za-z0-9_\-])")
            for n in candidates}
    left = set(candidates)
    for text in _yaml_texts(_roots(include_paths)):
        left -= {n for n in left if n in text and word[n].search(text)}
        if not left:
            break
    return [n for n in candidates if n in left]


def declared_task_names(include_paths: Iterable[str | Path]) -> list[str]:
    """The task, group and tag names the YAML files declare (for "did you mean" hints)."""
    return sorted({m for text in _yaml_texts(_roots(include_paths))
                   for m in _DECLARED.findall(text)})
