"""Options and value types that several commands share.

The value types check a flag as argparse reads it, so a bad value is one line naming the flag
(``argument --alpha: 1.2 is not a probability strictly between 0 and 1``), exit code 2, before
anything is loaded or written.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from lm_eval_ext.errors import LmEvalExtError
from lm_eval_ext.files import stream_fd, unexpanded_home


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default where it has one (not for required flags, switches or None)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class CommandParser(argparse.ArgumentParser):
    """Every command's parser: help shows each flag's default; a usage error is one line."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _DefaultsShown)
        super().__init__(*args, **kwargs)
        self.set_defaults(command_prog=self.prog)  # the deepest command's wins

    def positionals_anywhere(self, dest: str) -> None:
        """Let ``dest`` (a list positional) take values given after options too.

        argparse fills a positional once: ``recommend P1 --claim X P2`` left P2 unrecognised.
        """
        self.set_defaults(positionals_anywhere=dest)

    def parse_args(self, args=None, namespace=None):
        """Arguments no (sub)command knows: one line from the command they were given to."""
        parsed, extra = self.parse_known_args(args, namespace)
        dest = getattr(parsed, "positionals_anywhere", None)
        if extra and dest and not any(word.startswith("-") for word in extra):
            getattr(parsed, dest).extend(extra)
            extra = []
        if extra:
            prog = getattr(parsed, "command_prog", self.prog)
            self.exit(2, f"{prog}: error: unrecognized arguments: {' '.join(extra)} "
                         f"(see {prog} --help)\n")
        return parsed

    def error(self, message: str):
        """One line naming the problem and where help is (exit code 2)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(text: str, kind: type) -> float | int:
    try:
        return kind(text)
    except ValueError:
        name = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {name}") from None


#: the smallest probability taken: below it, normal quantiles of alpha / 2 are infinite
#: (subnormal floats), so no test or MDE has a meaning there
SMALLEST_PROBABILITY = 1e-300


def probability(text: str) -> float:
    """A float strictly between 0 and 1 (alpha, beta, power, level), at least 1e-300."""
    value = _number(text, float)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a probability strictly between 0 and 1")
    if value < SMALLEST_PROBABILITY:
        raise argparse.ArgumentTypeError(f"{text} is below {SMALLEST_PROBABILITY:g}, where "
                                         "normal quantiles are infinite; give at least "
                                         f"{SMALLEST_PROBABILITY:g}")
    return value


def points(text: str) -> float:
    """Percentage points from 1e-6 to 100 (a margin, an SD of a rate)."""
    value = _number(text, float)
    if not 1e-6 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text} is not in percentage points from 1e-06 to "
                                         "100")
    return value


def confidence_level(text: str) -> float:
    """A confidence level in [0.5, 1) (analysis/pipeline.py check_settings: the same bounds)."""
    value = _number(text, float)
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a confidence level; use a value in "
                                         "[0.5, 1), e.g. 0.95")
    return value


def share(text: str) -> float:
    """A float above 0 and at most 1 (a rate such as rho_d)."""
    value = _number(text, float)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share above 0 and at most 1")
    return value


def positive_float(text: str) -> float:
    """A finite float above 0."""
    value = _number(text, float)
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return value


def design_effect(text: str) -> float:
    """A finite variance inflation of at least 1 (the floor analyze puts on its estimates)."""
    value = _number(text, float)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of 1 or more")
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text} is below 1: a design effect is 1 for independent items and above 1 for "
            "clustered ones (an estimate below 1 is noise around independent items, used as 1); "
            "give 1 or more, e.g. 1.5")
    return value


#: the largest count taken (items, resamples, draws): above it a float loses whole numbers
LARGEST_COUNT = 10**15


def at_least(minimum: int, maximum: int = LARGEST_COUNT) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` and at most ``maximum``."""
    def parse(text: str) -> int:
        value = _number(text, int)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} must be at least {minimum}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{text[:20]}{'...' if len(text) > 20 else ''} is "
                                             f"too large (above {maximum:.0e})")
        return value

    parse.__name__ = f"at_least_{minimum}"
    return parse


#: an integer of at least 1
positive_int = at_least(1)
#: the analysis' floors (analysis/pipeline.py check_settings): --bootstrap and --mc-draws
RESAMPLES, DRAWS = at_least(100, 10**7), at_least(10, 10**7)  # above: beyond any memory


def non_negative_int(text: str) -> int:
    """An integer of at least 0."""
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def batch_size(text: str) -> str:
    """lm-eval's ``--batch_size``: a positive integer, ``auto`` or ``auto:N``."""
    from lm_eval_ext.backends.model_args import check_batch_size
    from lm_eval_ext.errors import ConfigError

    try:
        check_batch_size("lm_eval", text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"{text} is not a batch size; give a positive integer, "
                                         "auto or auto:N (e.g. 8)") from None
    return text


def check_power_above_alpha(command: str, power: float, alpha: float, given: str,
                            fix: str) -> None:
    """Refuse a power at or below alpha: no effect size has it (with none, alpha is rejected).

    The line names ``given`` (the power as the user set it) and ``fix``.
    """
    if power <= alpha:
        raise LmEvalExtError(f"{command}: {given} is not above --alpha {alpha:g}: with no effect "
                             "at all the test already rejects alpha of the time, so no effect "
                             f"size has that power; {fix}")


def _expanded(text: str) -> Path:
    """A path as typed; an empty one, or a ``~`` the shell did not expand, is refused."""
    if not text.strip():  # Path('') is the current folder: files would land there unasked
        raise argparse.ArgumentTypeError("the path is empty; give a folder or file name "
                                         "(e.g. out)")
    if (meant := unexpanded_home(text)) is not None:
        raise argparse.ArgumentTypeError(
            f"{text}: the ~ was not expanded (the path was quoted), so a folder named "
            f"'{text.split('/')[0]}' would be made here; write {meant}")
    return Path(text)


def folder(text: str) -> Path:
    """An output folder: new or existing, but not an existing file, nor ``-``."""
    if text == "-":  # standard output, in other commands: here a folder named '-'
        raise argparse.ArgumentTypeError("- is not standard output here (it would be a folder "
                                         "named '-'); name the folder to write into")
    path = _expanded(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; name a folder (it is created)")
    return path


def output_file(text: str) -> Path:
    """A file to write: not an existing folder, nor ``-`` (which would name a file ``-``)."""
    if text == "-":
        raise argparse.ArgumentTypeError(
            "- is not standard output here (it would be a file named '-'); name the file to "
            "write, and read it with cat")
    path = _expanded(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; name the file to write")
    return path


class GivenOnce(argparse.Action):
    """An option given at most once: a second value is an error, not a silent replacement."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: D102
        if getattr(namespace, self.dest) is not None:
            parser.error(f"{option_string} is given twice ({getattr(namespace, self.dest)} and "
                         f"{values}); give it once")
        setattr(namespace, self.dest, values)


def refuse_unused(option: str, given: object, needs: str, needed: object) -> None:
    """``option`` given without ``needs``, which it applies to: one line, not silently ignored."""
    if given and not needed:
        raise LmEvalExtError(f"{option} applies to {needs}, which is not given: give {needs}, "
                             f"or leave {option} out")


def refuse_replacing(option: str, path: str | Path, overwrite: bool, why: str) -> None:
    """An existing file at ``path`` is kept unless ``--overwrite``: one line, ``why`` and the fix."""
    if Path(path).is_file() and stream_fd(path) is None and not overwrite:
        raise LmEvalExtError(f"{option} {path} exists ({why}); name another file, or pass "
                             "--overwrite to replace it")


def add_resampling_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap``, ``--seed``, ``--level`` and ``--overwrite`` (analyze, compare-harness)."""
    parser.add_argument("--bootstrap", type=RESAMPLES, default=10_000, help="resamples")
    parser.add_argument("--seed", type=non_negative_int, default=0,
                        help="random seed of the resampling")
    parser.add_argument("--level", type=confidence_level, default=0.95,
                        help="confidence level of the intervals")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier analysis in --out (never mixed with it)")
