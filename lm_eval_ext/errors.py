"""Exception types. Every message says what was wrong and how to fix it."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: set to 1 to see the full traceback of an error that is otherwise printed as one line
TRACEBACK_ENV = "LM_EVAL_EXT_TRACEBACK"

#: the line for Ctrl-C (lm-eval saves its results at the end; ours are written whole or not at all)
INTERRUPTED = "interrupted (Ctrl-C): nothing was saved half-written; run the command again"
#: what a rerun of a multi-step command keeps (its finished steps are never run again)
RESUMES = {"campaign": " (it resumes from its finished cells)",
           "sequential": " (it resumes from its finished looks)"}


def interrupted_line(command: str) -> str:
    """The Ctrl-C line of ``command`` (``lm-eval-ext campaign``: how its rerun resumes)."""
    words = command.split()
    return f"{command}: {INTERRUPTED}" + next(
        (resumes for name, resumes in RESUMES.items() if name in words), "")


def interrupt_once(command: str = "lm-eval-ext", repeat_seconds: float = 0.05) -> None:
    """Ctrl-C raises ``KeyboardInterrupt``; a second one, before the first was said, stops now.

    GNU ``timeout -s INT`` signals the command and then its process group, so a second SIGINT
    could land while the first one's line is printed (a traceback): a SIGINT within
    ``repeat_seconds`` of the last, or once :func:`say_interrupted` has begun, is ignored. A
    later one while the first was never said (a library, or CPython in a finaliser, swallowed
    it, and the run would go on to its end) says ``command``'s line and exits 130 at once: our
    files are written whole or not at all. Python's own handler (or the start-up hook's, for
    ``import lm_eval``) is replaced; another one stays, and outside the main thread nothing is.
    """
    last = [-math.inf]
    _INTERRUPTS.update(saying=0, command=command)  # a command starting (tests run several)

    def interrupt(signum, frame):
        now = time.monotonic()
        if now - last[0] < repeat_seconds or _INTERRUPTS["saying"]:
            return
        if _INTERRUPTS["raised"] > _INTERRUPTS["reported"]:  # the last one never reached us
            _INTERRUPTS["saying"] = 1
            os.write(2, f"\n{interrupted_line(_INTERRUPTS['command'])}\n".encode())
            os._exit(130)
        last[0] = now
        _INTERRUPTS["raised"] += 1
        raise KeyboardInterrupt

    current = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is threading.main_thread() and (
            current is signal.default_int_handler
            or getattr(current, "lm_eval_ext_early", False)):  # the start-up hook's own
        signal.signal(signal.SIGINT, interrupt)
        # a blocked SIGINT, inherited from the parent's mask, would never arrive (a run
        # started from a thread or library that blocks it went on past every Ctrl-C)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def name_command(command: str) -> None:
    """The command :func:`interrupt_once`'s immediate stop names (once it is known)."""
    _INTERRUPTS["command"] = command


def say_interrupted(command: str) -> int:
    """Ctrl-C as one line on standard error, naming ``command``; the exit code (130)."""
    _INTERRUPTS["saying"] = 1  # from here on a Ctrl-C is this one
    _INTERRUPTS["reported"] = _INTERRUPTS["raised"]
    print(f"\n{interrupted_line(command)}", file=sys.stderr)
    return 130


#: Ctrl-Cs raised by :func:`interrupt_once`'s handler, and those said by :func:`say_interrupted`
_INTERRUPTS: dict[str, Any] = {"raised": 0, "reported": 0, "saying": 0,
                                "command": "lm-eval-ext"}


def swallowed_interrupt() -> bool:
    """Whether a Ctrl-C was raised and never reached us.

    A library (or CPython, in a callback) swallowed it, and its repeat was taken for the same.
    """
    return _INTERRUPTS["raised"] > _INTERRUPTS["reported"]


def quiet_closed_stdout() -> None:
    """Point standard output at /dev/null: its reader has gone (a pipe into ``head``).

    Python would otherwise report the closed pipe again when it flushes at exit; a command
    whose output was cut by its reader ends quietly, as other Unix commands do.
    """
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


class LmEvalExtError(Exception):
    """Base class for lm-eval-ext errors: a usage error (exit code 2) unless said otherwise."""

    #: the command's exit code: 2 for a usage error, 1 for a problem of the environment
    exit_code = 2


class EnvironmentProblem(LmEvalExtError):
    """The machine, not the command, failed: a full disk or quota, an I/O error (exit code 1)."""

    exit_code = 1


class DataError(LmEvalExtError):
    """Benchmark data is missing, corrupt or inconsistent."""


class DataMissingError(DataError, FileNotFoundError):
    """A pinned upstream file is not where it should be and could not be downloaded."""


class DataCorruptError(DataError):
    """A pinned upstream file exists but its checksum or row count is wrong."""


class ManifestError(DataError):
    """A subset manifest does not match its fingerprint or the data."""


class ConfigError(LmEvalExtError, ValueError):
    """Bad user input: an unknown option, a conflicting setting, a bad value."""


class PreflightError(LmEvalExtError):
    """A command-line value that would fail or mislead after the model has loaded."""


def check_choice(name: str, value, allowed, hint: str = ""):
    """Return ``value`` if it is one of ``allowed``, else a ConfigError naming the valid ones."""
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not valid; use one of {', '.join(allowed)}"
                          + (f" ({hint})" if hint else ""))
    return value


def stock_lm_eval_command() -> bool:
    """Whether this process is the stock ``lm_eval``/``lm-eval`` command (or ``python -m lm_eval``)."""
    program = sys.argv[0] if sys.argv and sys.argv[0] else ""
    return (os.path.basename(program) in {"lm_eval", "lm-eval"}
            or program.endswith(os.path.join("lm_eval", "__main__.py")))


@contextmanager
def ending_lm_eval_command() -> Iterator[None]:
    """In the stock ``lm_eval`` command, our error ends the run here: one line, its exit code.

    Used where lm-eval calls our code (model construction, the task manager, its saves):
    lm-eval would let the error reach Python's top level, whose exit code is always 1. Outside
    that command (the Python API, ``lm-eval-ext``) the error propagates unchanged.
    """
    try:
        yield
    except LmEvalExtError as exc:
        if not stock_lm_eval_command() or os.environ.get(TRACEBACK_ENV):
            raise
        sys.stderr.write(f"lm_eval: error: {exc}\n")
        raise SystemExit(exc.exit_code) from None
