"""Every piece of advice in a raised message names a flag that exists, and a test triggers it.

A census over the package's source: the string parts of each ``raise`` expression are read with
``ast``; each ``--flag`` in them must be an option of an ``lm-eval-ext`` command, of lm-eval's own
command line, or of the outside tool the message names (pip, Inspect AI). A stale or misspelt
flag in advice fails here before a user follows it.

And every message that advises (names a ``--flag``, or tells the user to rerun, pass or use
something) must have a distinctive literal fragment of it in some test under ``tests/``: a test
that triggers the message and asserts it. Messages built outside the ``raise`` (a variable) are
not seen.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import lm_eval
import pytest

from lm_eval_ext.cli.main import build_parser

PACKAGE = Path(__file__).resolve().parents[1] / "lm_eval_ext"
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*[a-z0-9])")
#: flags of other tools that messages name with the tool ("pip install --no-deps", "inspect")
OUTSIDE = {"--no-deps": "pip", "--log-dir": "inspect", "--no-score": "inspect",
           "--scorer": "inspect", "--overwrite": "inspect"}


def _help(argv: list[str]) -> str:
    """What ``lm-eval-ext ARGV --help`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return out.getvalue()


def _options(argv: tuple[str, ...] = ()) -> set[str]:
    """Every option of every ``lm-eval-ext`` command and subcommand, read from their help."""
    text = _help(list(argv))
    commands = re.search(r"^  \{([\w,-]+)\}", text, re.MULTILINE) if len(argv) < 2 else None
    found = set(FLAG.findall(text))
    for command in commands.group(1).split(",") if commands else ():
        found |= _options((*argv, command))
    return found


def _lm_eval_options() -> set[str]:
    cli = Path(lm_eval.__file__).parent / "_cli"
    return {flag for path in cli.glob("*.py")
            for flag in re.findall(r"\"(--[a-zA-Z][\w-]*)\"", path.read_text(encoding="utf-8"))}


def _pieces(node: ast.AST):
    """The literal text of an expression in order, ``None`` where a value is formatted in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (ast.JoinedStr, ast.BinOp)):  # f"..{x}..", "a" + "b"
        for part in (node.values if isinstance(node, ast.JoinedStr) else (node.left, node.right)):
            yield from _pieces(part)
    else:
        yield None
        for child in ast.iter_child_nodes(node):
            yield from _pieces(child)
            yield None


def _literal_parts(node: ast.AST) -> list[str]:
    """The runs of literal text in an expression, split where a value is formatted in (adjacent
    literals are one constant already: ``"a" "b"`` gives ``["ab"]``, ``f"a{x}b"`` ``["a", "b"]``)."""
    text = "".join("\x00" if piece is None else piece for piece in _pieces(node))
    return [part for part in text.split("\x00") if part]


def _raise_messages(source: str = "", where: str = "") -> list[tuple[str, list[str]]]:
    """(``path:line``, literal parts) of every ``raise`` in the package (or in ``source``)."""
    files = [(where, source)] if source else [
        (str(p.relative_to(PACKAGE.parent)), p.read_text(encoding="utf-8"))
        for p in sorted(PACKAGE.rglob("*.py"))]
    return [(f"{name}:{node.lineno}", _literal_parts(node.exc)) for name, text in files
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Raise) and node.exc is not None]


def _advised_flags() -> dict[str, list[str]]:
    advised: dict[str, list[str]] = {}
    for where, parts in _raise_messages():
        for flag in FLAG.findall("\x00".join(parts)):
            advised.setdefault(flag, []).append(where)
    return advised


def test_every_flag_in_advice_exists():
    known = _options() | _lm_eval_options() | set(OUTSIDE)
    advised = _advised_flags()
    assert len(advised) > 40  # the census reads the messages (it can fail)
    assert {flag: where for flag, where in advised.items() if flag not in known} == {}


def test_the_census_sees_a_stale_flag():
    source = 'raise ValueError(f"{x}: rerun analyze with --overwritee")'
    flags = [f for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) for f in FLAG.findall(node.value)]
    assert flags == ["--overwritee"]
    assert "--overwritee" not in _options() | _lm_eval_options()


#: a message advises when it names a flag or tells the user to rerun, pass or use something
ADVISES = re.compile(r"(?<![\w-])--[a-z]|\b(?:rerun|pass|use)\b", re.IGNORECASE)
#: the shortest fragment of a message that counts as asserted (then whole words, and one that no
#: other message holds, where the message has one; a message of shorter literal parts only
#: counts its longest part)
FRAGMENT = 20
TESTS = Path(__file__).resolve().parent
#: messages no test can trigger on this machine, as ``path: fragment of the message``, each with
#: why
CANNOT_TRIGGER = {
}
#: messages that still want a test (the census was written before them): shrink this list
NOT_YET = [
]


def _asserted_text() -> str:
    """Every string literal of the tests (docstrings and this census left out), regex escapes
    undone."""
    found = []
    for path in sorted(set(TESTS.rglob("*.py")) - {Path(__file__).resolve()}):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        found += [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and isinstance(node.value, str) and id(node) not in docstrings]
    return re.sub(r"\\(.)", r"\1", "\x00".join(found))


def _fragments(part: str, others: str) -> list[str]:
    """From each word of ``part`` on, the shortest run of whole words (``FRAGMENT`` characters
    at least) that no other message holds."""
    found = []
    for start in (m.start() for m in re.finditer(r"(?<!\w)\w", part)):
        ends = [m.end() for m in re.finditer(r"\w(?!\w)", part) if m.end() - start >= FRAGMENT]
        found += [part[start:end] for end in ends if part[start:end] not in others][:1]
    return found


def _unasserted(messages: list[tuple[str, list[str]]], asserted: str) -> list[str]:
    """``path:line`` and the message of each advising ``raise`` no test asserts."""
    advising = [(where, parts) for where, parts in messages if ADVISES.search("\x00".join(parts))]
    texts = ["\x00".join(parts) for _, parts in advising]
    missing = []
    for index, (where, parts) in enumerate(advising):
        others = "\x01".join(texts[:index] + texts[index + 1:])
        fragments = ([f for part in parts for f in _fragments(part.strip(), others)]
                     or [f for part in parts for f in _fragments(part.strip(), "")]
                     or [max(parts, key=len).strip()])  # short parts only: the longest
        if not any(fragment in asserted for fragment in fragments):
            missing.append(f"{where} {'...'.join(parts)}")
    return missing


def _listed(line: str, keys) -> bool:
    """Whether a census line is one of ``keys`` (``path: fragment of the message``)."""
    return any(line.startswith(f"lm_eval_ext/{path}:") and fragment in line
               for path, fragment in (key.split(": ", 1) for key in keys))


def test_every_piece_of_advice_is_triggered_and_asserted_by_a_test():
    messages = _raise_messages()
    assert len(messages) > 300  # the census reads the package's raises (it can fail)
    missing = _unasserted(messages, _asserted_text())
    listed = [*CANNOT_TRIGGER, *NOT_YET]
    assert [line for line in missing if not _listed(line, listed)] == []
    # an entry whose message a test now asserts (or that is gone) leaves the lists
    assert [key for key in listed if not any(_listed(line, [key]) for line in missing)] == []


def test_the_census_sees_an_unasserted_message():
    source = ('raise ValueError(f"{path} holds no zebra samples; rerun the zebra census "\n'
              '                 f"with --zebra (got {n})")')
    messages = _raise_messages(source, "x.py")
    assert _unasserted(messages, _asserted_text()) == [
        "x.py:1  holds no zebra samples; rerun the zebra census with --zebra (got ...)"]
    assert _unasserted(messages, "x holds no zebra samples; rerun") == []
    assert _unasserted(messages, "x holds no zebra") != []  # too short to be distinctive
