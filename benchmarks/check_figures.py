"""Every measured figure in README.md and docs/*.md, checked against the committed file it came from.

A figure is a number with a unit (%, pp, s, min, J, W, MB, GB, items/s, tokens/s, x) or a bare
decimal with two or more places, in prose or tables (code blocks and inline code are commands and
examples, not claims). ``benchmarks/results/figures.yaml`` lists, per document, each line holding
figures (found by a phrase of that line, figures in it aside) and its figures in order, each with
its source:

* ``[PRINTED, FILE, KEY]`` or ``[PRINTED, FILE, KEY, SCALE]``: measured; FILE under
  ``benchmarks/results``; KEY a dotted JSON path (list indices as numbers) or, for a CSV,
  ``COLUMN@COL=VALUE,COL=VALUE`` (the one matching row); the file's value x SCALE must round to
  PRINTED at PRINTED's own decimals;
* ``[PRINTED, KIND]`` with KIND one of :data:`NOT_MEASURED`: a setting, a definition, a closed
  form or a citation, not a measurement.

A table written by ``benchmarks/tables.py`` is included whole between ``<!-- generated: FILE -->``
and ``<!-- /generated -->`` (FILE under ``benchmarks/results``): its figures need no entry here;
instead the block must equal FILE and FILE must equal what ``tables.py`` writes from its sources.

Exits 1 on a figure without a source, a stale or differently included generated table, a line
or figure the map lists that the documents no longer hold, a missing file or key, or a value
that does not round to the printed figure.

    python benchmarks/check_figures.py [--root DIR] [--list]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

NOT_MEASURED = ("parameter", "definition", "closed form", "citation", "example", "tested bound",
                "superseded")
MAP = Path("benchmarks/results/figures.yaml")
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


def documents(root: Path) -> list[Path]:
    """README.md and docs/*.md under ``root``."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


GENERATED = re.compile(r"<!-- generated: (\S+) -->")
END_GENERATED = "<!-- /generated -->"


def generated_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line number, table file, included text) of each generated table in a document."""
    blocks, current, body = [], None, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if current is None and (match := GENERATED.search(line)):
            current, body = (number, match.group(1)), []
        elif current is not None and line.strip() == END_GENERATED:
            blocks.append((*current, "\n".join(body) + "\n"))
            current = None
        elif current is not None:
            body.append(line)
    return blocks


def figure_lines(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line number, line, figures) for each line outside code and generated tables."""
    found, in_code, in_span, in_table = [], False, False, False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if GENERATED.search(line) or line.strip() == END_GENERATED:
            in_table = bool(GENERATED.search(line))
            continue
        if in_table:
            continue
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        # an inline code span can wrap onto the next line of its paragraph
        prose = re.sub(r"`[^`]*`", " ", "`" + line if in_span else line)
        in_span = bool(line.strip()) and (in_span != (line.count("`") % 2 == 1))
        prose = re.sub(r"\]\([^)]*\)", "]", prose)  # link targets
        figures = [m.group(0).strip() for m in FIGURE.finditer(prose)]
        if figures:
            found.append((number, line, figures))
    return found


def _masked(text: str) -> str:
    """A line with its figures blanked, so that a phrase still finds a line whose figure changed."""
    return FIGURE.sub("#", text)


def printed_value(text: str) -> tuple[float, int]:
    """The number of a printed figure and its decimals ("+1,234.5 J" -> (1234.5, 1))."""
    number = re.match(r"[+\-\u2212]?[\d,]*\.?\d*", text).group(0)
    number = number.replace(",", "").replace("\u2212", "-").replace("+", "")
    decimals = len(number.split(".")[1]) if "." in number else 0
    return float(number), decimals


def artifact_value(root: Path, file: str, key: str) -> float:
    """The value at ``key`` in a results file (JSON path, or CSV ``COLUMN@COL=V,...``)."""
    path = root / "benchmarks" / "results" / file
    if not path.is_file():
        raise LookupError(f"{file} does not exist")
    if path.suffix == ".csv":
        column, _, where = key.partition("@")
        conditions = dict(part.split("=", 1) for part in where.split(",") if part)
        with open(path, encoding="utf-8", newline="") as handle:
            rows = [r for r in csv.DictReader(handle)
                    if all(r.get(c) == v for c, v in conditions.items())]
        if len(rows) != 1:
            raise LookupError(f"{file}: {len(rows)} rows match {where!r} (need exactly one)")
        if column not in rows[0]:
            raise LookupError(f"{file} has no column {column!r}")
        return float(rows[0][column])
    value, parts = json.loads(path.read_text(encoding="utf-8")), key.split(".")
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


def check(root: Path) -> tuple[list[Figure], list[str]]:
    """Every figure with its source, and every problem found."""
    mapping = yaml.safe_load((root / MAP).read_text(encoding="utf-8")) or {}
    figures, problems = [], []
    for path in documents(root):
        doc = str(path.relative_to(root))
        entries = list(mapping.get(doc) or [])
        used = set()
        for number, line, printed in figure_lines(path):
            where = f"{doc}:{number}"
            matches = [i for i, e in enumerate(entries) if _masked(e["line"]) in _masked(line)]
            if len(matches) != 1:
                problems.append(f"{where}: {', '.join(printed)}: "
                                + ("no line of figures.yaml names this line" if not matches else
                                   f"{len(matches)} phrases of figures.yaml match this line"))
                continue
            entry = entries[matches[0]]
            used.add(matches[0])
            listed = [f[0] for f in entry["figures"]]
            if len(listed) != len(printed):
                problems.append(f"{where}: figures {printed} but figures.yaml lists {listed}")
                continue
            for text, (known, *source) in zip(printed, entry["figures"], strict=True):
                figures.append(Figure(doc, number, text, _check_one(root, where, text, source,
                                                                     problems)))
                if known != text:
                    problems.append(f"{where}: the line prints {text}; figures.yaml lists {known}")
        problems += [f"{doc}: figures.yaml names a line that is gone: {e['line']!r}"
                     for i, e in enumerate(entries) if i not in used]
    problems += [f"figures.yaml names {doc}, which is not a checked document" for doc in mapping
                 if doc not in {str(p.relative_to(root)) for p in documents(root)}]
    return figures, problems + generated_problems(root)


def generated_problems(root: Path) -> list[str]:
    """Generated tables that are stale, or included other than as written."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tables import stale

    problems = [f"benchmarks/results/{name} is stale: python benchmarks/tables.py"
                for name in stale(root / "benchmarks" / "results")]
    for path in documents(root):
        starts = sum(bool(GENERATED.search(line))
                     for line in path.read_text(encoding="utf-8").splitlines())
        if starts != len(generated_blocks(path)):
            problems.append(f"{path.relative_to(root)}: a generated table has no "
                            f"{END_GENERATED} line of its own")
        for number, name, text in generated_blocks(path):
            table = root / "benchmarks" / "results" / name
            if not table.is_file() or table.read_text(encoding="utf-8") != text:
                problems.append(f"{path.relative_to(root)}:{number}: the table included as {name} "
                                "differs from that file (paste it again)")
    return problems


def _check_one(root: Path, where: str, text: str, source: list, problems: list[str]) -> str:
    if len(source) == 1:
        if source[0] not in NOT_MEASURED:
            problems.append(f"{where}: {text}: {source[0]!r} is not one of {NOT_MEASURED}")
        return source[0]
    file, key, *scale = source
    try:
        value = artifact_value(root, file, key) * (scale[0] if scale else 1)
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
    parser.add_argument("--list", action="store_true",
                        help="print PATH:LINE<TAB>VALUE<TAB>ARTIFACT for every figure")
    args = parser.parse_args(argv)
    figures, problems = check(args.root)
    if args.list:
        for f in figures:
            print(f"{f.doc}:{f.line}\t{f.text}\t{f.source}")
    for problem in problems:
        print(f"check_figures: {problem}", file=sys.stderr)
    measured = sum(f.source not in NOT_MEASURED for f in figures)
    print(f"{len(figures)} figures ({measured} measured, each checked against its file); "
          f"{len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
