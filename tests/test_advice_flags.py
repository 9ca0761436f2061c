"""Every ``--flag`` a raised message tells the user to pass is a flag that exists.

A census over the package's source: the string parts of each ``raise`` expression are read with
``ast``; each ``--flag`` in them must be an option of an ``lm-eval-ext`` command, of lm-eval's own
command line, or of the outside tool the message names (pip, Inspect AI). A stale or misspelt
flag in advice fails here before a user follows it.
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
OUTSIDE = {"--no-deps": "pip", "--log-dir": "inspect"}


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


def _advised_flags() -> dict[str, list[str]]:
    advised: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                for part in ast.walk(node.exc):
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        for flag in FLAG.findall(part.value):
                            advised.setdefault(flag, []).append(
                                f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
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
