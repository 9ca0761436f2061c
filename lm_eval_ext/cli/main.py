"""lm-eval-ext: run lm-eval with the extension, analyse runs, manage data and the model.

Subcommands (one module each in this package):
    run ...                        stock ``lm_eval`` arguments, hf-metered and our tasks registered
    data verify|fingerprint|manifest|instrument    the benchmark data
    model prepare [--model NAME]   convert the embedded (or a packaged) model once
    analyze --reference R --runs A B --out OUT     did the conclusion change?
    compare-harness H=PATH ... --out OUT           one model through several harnesses
    mde --m M --rho-d R            paired minimum detectable effect and a pre-registration card
    recommend PILOT --claim M=PP   the cheapest protocol that keeps every claim, from a pilot
    sequential ...                 evaluate nested subsets until the claim is settled
    campaign CAMPAIGN.yaml|--preset ... --out DIR  models x conditions x tasks, resumable
    grid GRID.yaml --out DIR       models x configuration axes, then rank flips
    judge RUN_DIR                  Bias Score and Reasoning Quality of generated reasoning
    export-upstream TASK ... --out DIR             our tasks as lm-eval task folders
"""

from __future__ import annotations

import argparse
import errno
import importlib.metadata
import io
import os
import sys
import warnings
from collections.abc import Sequence

from lm_eval_ext.cli import (
    analyze,
    campaign,
    compare_harness,
    data,
    export_upstream,
    judge,
    mde,
    model,
    recommend,
    run,
    sequential,
)
from lm_eval_ext.cli.options import CommandParser
from lm_eval_ext.errors import (
    TRACEBACK_ENV,
    LmEvalExtError,
    name_command,
    quiet_closed_stdout,
    say_interrupted,
    swallowed_interrupt,
)
from lm_eval_ext.files import path_error

COMMANDS = (run, data, model, analyze, compare_harness, mde, recommend, sequential, campaign,
            judge, export_upstream)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lm-eval-ext``."""
    parser = CommandParser(prog="lm-eval-ext", description=(__doc__ or "lm-eval-ext").split("\n")[0],
                           formatter_class=argparse.HelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"lm-eval-ext {importlib.metadata.version('lm-eval-ext')}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def _notes_for_data_warnings() -> None:
    """Warnings about the data (thin subgroups, undefined resamples) print as one-line notes.

    Python's default shows each with its source file and line, which means nothing to a user;
    other warnings keep Python's format.
    """
    from lm_eval_ext.analysis.errors import DegenerateDataWarning

    original = warnings.showwarning
    if getattr(original, "_lm_eval_ext_notes", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DegenerateDataWarning):
            print(f"lm-eval-ext: note: {message}", file=sys.stderr)
        else:
            original(message, category, filename, lineno, file, line)

    show._lm_eval_ext_notes = True
    warnings.showwarning = show


def unnamed_path_error(error: OSError | UnicodeDecodeError) -> LmEvalExtError:
    """One line for a file system error that reached the command: the path it names, the cause."""
    if isinstance(error, OSError):
        writing = error.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT)
        return path_error(error.filename or "a file", error, "write" if writing else "use")
    return path_error("a file", error, "read")


#: commands whose first argument names a sub-command (``model prepare``, ``data verify``)
GROUPS = ("model", "data")


def command_name(argv: Sequence[str]) -> str:
    """``lm-eval-ext`` and the command ``argv`` names (its sub-command too), for messages."""
    words = list(argv[:2] if argv[:1] and argv[0] in GROUPS else argv[:1])
    return " ".join(["lm-eval-ext", *(w for w in words if not w.startswith("-"))])


def _process_problem() -> str | None:
    """What stops every command here: a closed standard output, a deleted current folder."""
    if sys.stdout is None:  # `>&-`: print() would drop every line without a word
        return ("standard output is closed (>&-): the command's results would be lost; "
                "redirect it instead (> FILE, or > /dev/null to discard them)")
    try:
        os.getcwd()
    except FileNotFoundError:
        return ("the current folder no longer exists (it was deleted or moved); cd to an "
                "existing folder and run the command again")
    return None


def _printable_output() -> None:
    """Characters the output's encoding lacks are written escaped, not an error at the end.

    (``PYTHONIOENCODING=ascii`` and a path with ä: the report was written, then printing its
    path failed.)
    """
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``lm-eval-ext``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    problem = _process_problem()
    if problem is not None:
        print(f"{command_name(argv)}: error: {problem}", file=sys.stderr)
        return 2
    _printable_output()
    name_command(command_name(argv))  # for a second Ctrl-C's immediate stop
    try:
        code = _command(argv)
    except KeyboardInterrupt:  # Ctrl-C once loaded (console.py: while loading): nothing half-written
        if os.environ.get(TRACEBACK_ENV):
            raise
        return say_interrupted(command_name(argv))
    if swallowed_interrupt():  # the command ran on past a Ctrl-C: it was asked to stop
        return say_interrupted(command_name(argv))
    return code


def _command(argv: list[str]) -> int:
    """Parse ``argv`` and run its command; our errors as one line each."""
    if argv[:1] == ["run"] and argv[1:] in ([], ["-h"], ["--help"]):
        print(run.HELP)
        return 0
    if argv[:1] == ["run"]:  # everything after `run` belongs to lm_eval, options included
        args = argparse.Namespace(func=run.run, lm_eval_args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    if args.func is not run.run:
        _notes_for_data_warnings()
    try:
        return args.func(args)
    except LmEvalExtError as exc:
        print(f"lm-eval-ext: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # output piped into `head`: its reader left, as Unix commands end
        quiet_closed_stdout()
        return 1
    except (OSError, UnicodeDecodeError) as exc:  # a user's path that no reader named itself
        if args.func is run.run or os.environ.get(TRACEBACK_ENV):
            raise
        from lm_eval_ext.task_building import unreachable_data

        error = unreachable_data(exc) or unnamed_path_error(exc)  # a network error is an OSError
        print(f"{command_name(argv)}: error: {error}", file=sys.stderr)
        return error.exit_code
    except Exception as exc:  # a bug of ours, or lm-eval's own error inside `run`
        if args.func is run.run or os.environ.get(TRACEBACK_ENV):
            raise
        print(f"{command_name(argv)}: unexpected {type(exc).__name__}: {exc} (this is a bug; "
              f"please report it with the command; {TRACEBACK_ENV}=1 shows the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
