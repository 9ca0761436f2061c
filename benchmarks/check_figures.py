"""Every measured figure in README.md and docs/*.md, checked against the committed file it came from.

A figure is a number with a unit (%, pp, s, min, J, W, MB, GB, items/s, tokens/s, x) or a bare
decimal with two or more places, in prose or tables (code blocks and inline code are commands and
examples, not claims); the settings in :data:`SETTINGS` (alpha, an interval's level, the
instrument's nested subset sizes) are not figures. Each paragraph, list or table holding
figures names its block on the line right under it, in an HTML comment (invisible when
rendered), and the page's sidecar ``docs/sources/PAGE.yaml`` lists that block's figures in
order, one ``PRINTED = SOURCE`` each::

    <!-- sources: cpu-headline -->                      (in docs/measurements-cpu-and-scoring.md)
    cpu-headline:                               (in docs/sources/measurements-cpu-and-scoring.yaml)
    - 187.9 s = generation_public_2026-12-02/cpu_headline_ab.json runs.3.wall_seconds

* ``PRINTED = FILE KEY [xSCALE]``: measured; FILE under ``benchmarks/results`` (``FILE@COMMIT``:
  that file as git holds it at COMMIT, for results no longer in the tree); KEY a dotted JSON path
  (list indices as numbers), for a CSV ``COLUMN@COL=VALUE,COL=VALUE`` (the one matching row),
  for a text file (a log, a timing) ``/REGEX/`` or ``/REGEX/N`` (group 1 of the N-th match);
  the file's value x SCALE must round to PRINTED at PRINTED's own decimals;
* ``PRINTED = KIND`` with KIND one of :data:`NOT_MEASURED`: a setting, a definition, a closed
  form or a citation, not a measurement.

Copy-edits of the prose need no other change; a figure that changes, appears or goes must change
its block's sources too. A sidecar block that no page names is a problem as well.

A table of ``benchmarks/tables.py`` is included whole between ``<!-- generated: FOLDER/NAME -->``
and ``<!-- /generated -->``: its figures need no sources; instead the block must equal what
``tables.py`` renders from its sources now.

Exits 1 on a figure without a source, sources that list other figures than the paragraph
prints, a stale or differently included generated table, a missing file, commit or key, or a
value that does not round to the printed figure.

    python benchmarks/check_figures.py [--root DIR] [--history GIT_TREE] [--skip-history] [--list]
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from _pages import END_GENERATED, GENERATED, documents, generated_blocks
from tables import stale

NOT_MEASURED = ("parameter", "definition", "closed form", "citation", "example", "tested bound",
                "superseded")
SOURCES = re.compile(r"^<!-- sources: (.*) -->\s*$")
#: printed settings that are never measurements on these pages: alpha, an interval's level, the
#: instrument's nested subset sizes
SETTINGS = frozenset({"0.05", "95%", "12.5%", "37.5%", "50%", "75%"})
_UNIT = r"(?:\s?(?:%|pp\b|s\b|ms\b|min\b|J/item\b|kJ\b|J\b|W\b|MB\b|GB\b|GiB\b|items/s\b|" \
        r"new tokens/s\b|tokens/s\b|x\b))"
#: a version number is not a figure ("transformers 5.17", "torch 2.11", "vLLM 0.24")
_VERSION = r"(?<!transformers )(?<!torch )(?<!vLLM )(?<!Python )(?<!lm-eval )"
_NUMBER = _VERSION + r"(?<![\w.\-/])[+\-\u2212]?\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(rf"{_NUMBER}{_UNIT}|{_VERSION}(?<![\w.\-/])[+\-\u2212]?\d+\.\d{{2,}}(?![\w.])")


@dataclass(frozen=True)
class Figure:
    """One figure as printed in a document."""

    doc: str
    line: int
    text: str
    source: str  # a file's key, or a NOT_MEASURED kind


@dataclass
class Block:
    """A paragraph, list or table: its figures (line, text) and its sources comment."""

    figures: list[tuple[int, str]]
    sources: str | None = None
    sources_line: int = 0
    last_line: int = 0


def blocks(path: Path) -> list[Block]:
    """Every block outside code and generated tables, with its figures and sources."""
    found, current = [], None
    in_code = in_span = in_table = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if GENERATED.search(line) or line.strip() == END_GENERATED:
            in_table, current = bool(GENERATED.search(line)), None
            continue
        if in_table:
            continue
        if line.lstrip().startswith("```"):
            in_code, current = not in_code, None
            continue
        if in_code:
            continue
        if not line.strip():
            current, in_span = None, False
            continue
        if (match := SOURCES.match(line.strip())) is not None:
            target = current if current is not None and current.sources is None else Block([])
            if target is not current:
                found.append(target)  # a comment with no paragraph of its own: reported
            target.sources, target.sources_line = match.group(1), number
            current = None
            continue
        if current is None:
            current = Block([])
            found.append(current)
        current.last_line = number
        # an inline code span can wrap onto the next line of its paragraph
        prose = re.sub(r"`[^`]*`", " ", "`" + line if in_span else line)
        in_span = in_span != (line.count("`") % 2 == 1)
        prose = re.sub(r"\]\([^)]*\)", "]", prose)  # link targets
        current.figures += [(number, m.group(0).strip()) for m in FIGURE.finditer(prose)
                            if m.group(0).strip() not in SETTINGS]
    return found


def sidecar(page: Path) -> Path:
    """The file holding a page's sources: ``docs/sources/PAGE.yaml`` (README's too)."""
    root = page.parent if page.parent.name == "docs" else page.parent / "docs"
    return root / "sources" / f"{page.stem}.yaml"


def read_sidecar(page: Path) -> dict[str, list[str]]:
    """Block name -> its ``PRINTED = SOURCE`` entries ({} when the page has no sidecar)."""
    path = sidecar(page)
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {str(k): [str(e) for e in (v or [])] for k, v in data.items()}


def parse_sources(entries: list[str]) -> list[tuple[str, str]]:
    """``PRINTED = SOURCE`` entries as (printed, source) pairs."""
    pairs = []
    for entry in (e.strip() for e in entries):
        printed, sep, source = entry.partition(" = ")
        pairs.append((printed.strip(), source.strip()) if sep else (entry, ""))
    return pairs


def printed_value(text: str) -> tuple[float, int]:
    """The number of a printed figure and its decimals ("+1,234.5 J" -> (1234.5, 1))."""
    number = re.match(r"[+\-\u2212]?[\d,]*\.?\d*", text).group(0)
    number = number.replace(",", "").replace("\u2212", "-").replace("+", "")
    decimals = len(number.split(".")[1]) if "." in number else 0
    return float(number), decimals


@functools.cache
def results_text(root: Path, file: str, history: Path | None = None) -> str:
    """A results file's text: from the tree, or ``FILE@COMMIT`` as git holds it at COMMIT (in
    ``history``'s repository, by default ``root``'s)."""
    name, _, commit = file.partition("@")
    if not commit:
        path = root / "benchmarks" / "results" / name
        if not path.is_file():
            raise LookupError(f"{name} does not exist")
        return path.read_text(encoding="utf-8")
    shown = subprocess.run(["git", "-C", str(history or root), "show",
                            f"{commit}:benchmarks/results/{name}"], capture_output=True, text=True)
    if shown.returncode != 0:
        raise LookupError(f"{name} is not in commit {commit} (a shallow clone? git fetch "
                          "--unshallow)")
    return shown.stdout


def artifact_value(root: Path, file: str, key: str, history: Path | None = None) -> float:
    """The value at ``key`` in a results file (JSON path, or CSV ``COLUMN@COL=V,...``)."""
    text = results_text(root, file, history)
    if key.startswith("/"):  # a text file (a log): /REGEX/ or /REGEX/N, group 1 of match N
        pattern, _, nth = key[1:].rpartition("/")
        matches = re.findall(pattern, text)
        index = int(nth or 1)
        if len(matches) < index:
            raise LookupError(f"{file}: {len(matches)} match(es) of /{pattern}/ (need {index})")
        found = matches[index - 1]
        return float(found[0] if isinstance(found, tuple) else found)
    if file.partition("@")[0].endswith(".csv"):
        column, _, where = key.partition("@")
        conditions = dict(part.split("=", 1) for part in where.split(",") if part)
        rows = [r for r in csv.DictReader(io.StringIO(text, newline=""))
                if all(r.get(c) == v for c, v in conditions.items())]
        if len(rows) != 1:
            raise LookupError(f"{file}: {len(rows)} rows match {where!r} (need exactly one)")
        if column not in rows[0]:
            raise LookupError(f"{file} has no column {column!r}")
        return float(rows[0][column])
    value, parts = json.loads(text), key.split(".")
    while parts:  # a key may hold dots itself ("0.5", "m500_rho0.1"): the longest that exists
        for n in range(len(parts), 0, -1):
            part = ".".join(parts[:n])
            if isinstance(value, dict) and part in value:
                break
            if isinstance(value, list) and n == 1 and part.isdigit() and int(part) < len(value):
                break
        else:
            raise LookupError(f"{file} has no key {key!r} (stops at {parts[0]!r})")
        value = value[int(part)] if isinstance(value, list) else value[part]
        parts = parts[n:]
    return float(value)


def check(root: Path, history: Path | None = None, skip_history: bool = False
          ) -> tuple[list[Figure], list[str]]:
    """Every figure with its source, and every problem found."""
    figures, problems = [], []
    for path in documents(root):
        doc = str(path.relative_to(root))
        entries, named = read_sidecar(path), set()
        for block in blocks(path):
            if not block.figures and block.sources is None:
                continue
            printed = [text for _, text in block.figures]
            first = block.figures[0][0] if block.figures else block.sources_line
            where = f"{doc}:{first}"
            side = sidecar(path).relative_to(root)
            if block.sources is None:
                problems.append(f"{where}: {', '.join(printed)}: no sources for this block (add "
                                f"<!-- sources: NAME --> under it and NAME's list to {side})")
                continue
            name = block.sources.strip()
            if " = " in name:
                problems.append(f"{where}: sources written in the page: name the block "
                                f"(<!-- sources: NAME -->) and list them under NAME in {side}")
                continue
            if name not in entries:
                problems.append(f"{where}: block {name!r} is not in {side}")
                continue
            named.add(name)
            listed = parse_sources(entries[name])
            if [p for p, _ in listed] != printed:
                problems.append(f"{where}: figures {printed} but {side}:{name} lists "
                                f"{[p for p, _ in listed]}")
                continue
            for (number, text), (_, source) in zip(block.figures, listed, strict=True):
                if skip_history and "@" in source.split(" ")[0]:
                    figures.append(Figure(doc, number, text, "not checked: " + source))
                    continue
                figures.append(Figure(doc, number, text,
                                      _check_one(root, f"{doc}:{number}", text, source, problems,
                                                 history)))
        problems += [f"{sidecar(path).relative_to(root)}: block {name!r} is on no line of {doc}"
                     for name in sorted(set(entries) - named)]
    return figures, problems + generated_problems(root)


def generated_problems(root: Path) -> list[str]:
    """Generated tables that are stale, name no table, or have no end marker."""
    problems = []
    for path in documents(root):
        starts = sum(bool(GENERATED.search(line))
                     for line in path.read_text(encoding="utf-8").splitlines())
        if starts != len(generated_blocks(path)):
            problems.append(f"{path.relative_to(root)}: a generated table has no "
                            f"{END_GENERATED} line of its own")
    return problems + stale(root)


def _check_one(root: Path, where: str, text: str, source: str, problems: list[str],
               history: Path | None = None) -> str:
    if source in NOT_MEASURED or " " not in source:
        if source not in NOT_MEASURED:
            problems.append(f"{where}: {text}: {source!r} is neither FILE KEY nor one of "
                            f"{NOT_MEASURED}")
        return source
    file, *key_words = source.split(" ")
    scale = []
    if len(key_words) > 1 and re.fullmatch(r"x-?[\d.]+", key_words[-1]):
        scale = [float(key_words.pop()[1:])]
    key = " ".join(key_words)
    try:
        value = artifact_value(root, file, key, history) * (scale[0] if scale else 1)
    except (LookupError, ValueError) as exc:
        problems.append(f"{where}: {text}: {exc}")
        return f"{file}:{key}"
    printed, decimals = printed_value(text)
    if abs(value - printed) > 0.5 * 10 ** -decimals + 1e-9:  # not this figure, rounded
        problems.append(f"{where}: {text} but {file}:{key} gives {value:.{decimals + 2}f}")
    return f"{file}:{key}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--history", type=Path, default=None,
                        help="a git work tree holding the commits that FILE@COMMIT names "
                             "(default: --root)")
    parser.add_argument("--skip-history", action="store_true",
                        help="leave FILE@COMMIT figures unchecked (a shallow clone); counted")
    parser.add_argument("--list", action="store_true",
                        help="print PATH:LINE<TAB>VALUE<TAB>ARTIFACT for every figure")
    args = parser.parse_args(argv)
    figures, problems = check(args.root, args.history, args.skip_history)
    if args.list:
        for f in figures:
            print(f"{f.doc}:{f.line}\t{f.text}\t{f.source}")
    for problem in problems:
        print(f"check_figures: {problem}", file=sys.stderr)
    unchecked = sum(f.source.startswith("not checked: ") for f in figures)
    measured = sum(f.source not in NOT_MEASURED for f in figures) - unchecked
    skipped = f"; {unchecked} from git history not checked (--skip-history)" if unchecked else ""
    print(f"{len(figures)} figures ({measured} measured, each checked against its file{skipped}); "
          f"{len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
