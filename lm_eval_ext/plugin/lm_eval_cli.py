"""lm-eval's own command line with the plug-in: run in this process, or the stock ``lm_eval``.

:func:`run_lm_eval_cli` serves ``lm-eval-ext run`` and a campaign cell. lm-eval 0.4.13's
``cli_evaluate()`` parses ``sys.argv[1:]``, so the arguments are handed over there (``argv[0]``
decides :func:`lm_eval_ext.errors.stock_lm_eval_command`). In the stock command the start-up
hook checks the command line first and makes our errors one line.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence

from lm_eval_ext.errors import (
    TRACEBACK_ENV,
    ConfigError,
    LmEvalExtError,
    ending_lm_eval_command,
    interrupt_once,
    quiet_closed_stdout,
    say_interrupted,
    stock_lm_eval_command,
)
from lm_eval_ext.plugin.wrapping import wrap_once
from lm_eval_ext.task_building import unreachable_data


def run_lm_eval_cli(argv: Sequence[str], program: str) -> None:
    """Register the models and task folders, then run ``lm_eval`` on ``argv`` as ``program``.

    A ``--config`` file's ``batch_size`` goes in as the flag it stands for
    (:func:`~lm_eval_ext.command_preflight.config_batch_size_typed`).
    """
    from lm_eval_ext.command_preflight import config_batch_size_typed
    from lm_eval_ext.plugin.registration import activate
    from lm_eval_ext.plugin.task_folders import narrow_to_command_line

    say_config_overrides(argv)
    activate()
    narrow_to_command_line(argv)
    from lm_eval.__main__ import cli_evaluate

    sys.argv = [program, *config_batch_size_typed(argv)]
    cli_evaluate()


def say_config_overrides(argv: Sequence[str]) -> None:
    """A note per ``--config`` option the command line replaces (lm-eval says nothing)."""
    from lm_eval_ext.command_preflight import config_overrides

    for note in config_overrides(argv):
        print(f"lm-eval-ext: note: {note}", file=sys.stderr, flush=True)


def config_problem(argv: Sequence[str]) -> LmEvalExtError | None:
    """What is wrong with the command line's ``--config`` file (None: nothing, or none given)."""
    from lm_eval_ext.command_preflight import PreflightError, check_config_of

    try:
        check_config_of(argv)
    except PreflightError as problem:
        return problem
    return None


def one_line_error(error: BaseException) -> BaseException:
    """lm-eval's "Tasks not found: NAMES" as our one-line error with the closest names.

    A task whose data set needs the Hugging Face hub or the web, which cannot be reached, is one
    line too.
    """
    text = str(error)
    config = config_problem(sys.argv[1:])
    if config is not None:  # lm-eval reads --config first: its YAML or type error, named
        return config
    unreachable = unreachable_data(error)
    if unreachable is not None:
        return unreachable
    if isinstance(error, ValueError) and text.startswith("Specify --output_path if "):
        from lm_eval_ext.command_preflight import SAMPLES_NEED_OUTPUT_PATH, PreflightError

        return PreflightError(SAMPLES_NEED_OUTPUT_PATH)
    if isinstance(error, ZeroDivisionError) and _raised_in(error, "_batch_scheduler"):
        from lm_eval_ext.command_preflight import PreflightError

        return PreflightError("--batch_size auto:N asks lm-eval to find the batch size N times, "
                              "more often than this run has requests (lm-eval then divides by "
                              "zero): give a smaller N (e.g. auto:2) or auto")
    items = re.search(r"k=(\d+)", text) if isinstance(error, AssertionError) else None
    if items is not None and text.startswith("Elements of --samples should "):
        from lm_eval_ext.command_preflight import PreflightError

        n = int(items.group(1))
        return PreflightError(f"--samples: an index is beyond a task's {n} items; give "
                              f"indices from 0 to {n - 1}")
    if isinstance(error, ValueError) and text.startswith("Tasks not found: "):
        from lm_eval_ext.command_preflight import PreflightError, unknown_task_message
        from lm_eval_ext.plugin.task_folders import COMMAND_LINE, full_task_index

        return PreflightError(unknown_task_message(
            text.removeprefix("Tasks not found: "),
            list(full_task_index(COMMAND_LINE.include_path))))
    return error


def _raised_in(error: BaseException, function: str) -> bool:
    """Whether ``error``'s traceback passes through a function of that name."""
    frame = error.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_name == function:
            return True
        frame = frame.tb_next
    return False


@wrap_once("sys", "excepthook")
def install_one_line_errors(excepthook: Callable) -> Callable:
    """Our own errors in the stock ``lm_eval`` command: one line, not lm-eval's traceback.

    lm-eval-ext's errors (:class:`~lm_eval_ext.errors.LmEvalExtError`: a bad model arg, a
    missing file) already say what was wrong and the fix; every other exception keeps Python's
    traceback. ``LM_EVAL_EXT_TRACEBACK=1`` shows ours in full too. Ctrl-C interrupts once
    (:func:`~lm_eval_ext.errors.interrupt_once`).
    """
    if stock_lm_eval_command():
        interrupt_once("lm_eval")

    def one_line_excepthook(kind, value, traceback) -> None:
        if isinstance(value, BrokenPipeError):  # `lm_eval ls tasks | head`: the reader left
            quiet_closed_stdout()
            return
        if isinstance(value, KeyboardInterrupt) and not os.environ.get(TRACEBACK_ENV):
            say_interrupted("lm_eval")
            return
        shown = None if os.environ.get(TRACEBACK_ENV) else one_line_error(value)
        if isinstance(shown, LmEvalExtError):
            sys.stderr.write(f"lm_eval: error: {shown}\n")
        else:
            excepthook(kind, value, traceback)
    return one_line_excepthook


def start_stock_command() -> None:
    """In the stock ``lm_eval``, as ``import lm_eval`` starts: one-line errors and Ctrl-C."""
    if stock_lm_eval_command():
        install_one_line_errors()


def check_stock_arguments() -> None:
    """In the stock ``lm_eval``, before lm-eval parses: what its parser refuses in poor words."""
    if not stock_lm_eval_command():
        return
    from lm_eval_ext.command_preflight import (
        check_arguments_lm_eval_parses,
        config_batch_size_typed,
    )

    with ending_lm_eval_command():  # one line, exit 2
        check_disable_value()
        check_arguments_lm_eval_parses(sys.argv[1:])
        say_config_overrides(sys.argv[1:])
        sys.argv[1:] = config_batch_size_typed(sys.argv[1:])  # before lm-eval parses it


#: the start-up hook's switch (read by ``autoload.install``, which runs as its own module at
#: start-up: 1/true/yes/on turn the hook off) and the words it reads, on or off
DISABLE_ENV = "LM_EVAL_EXT_DISABLE"
_DISABLE_WORDS = ("1", "true", "yes", "on", "", "0", "false", "no", "off")


def check_disable_value() -> None:
    """``LM_EVAL_EXT_DISABLE`` set to a word the hook does not read (``y``): the hook ran on."""
    value = os.environ.get(DISABLE_ENV, "")
    if value.strip().lower() not in _DISABLE_WORDS:
        raise ConfigError(f"{DISABLE_ENV}={value} is neither on nor off: set "
                          f"{DISABLE_ENV}=1 to turn lm-eval-ext's hook off (lm_eval is then "
                          f"lm-eval alone), or unset it to keep the hook")


def check_stock_user_tasks() -> None:
    """In the stock ``lm_eval``: the user's own tasks built (their data read).

    Once ``lm_eval.evaluator`` (and so ``lm_eval.tasks``) has loaded, before the model does.
    """
    if not stock_lm_eval_command():
        return
    from lm_eval_ext.command_preflight import check_user_tasks

    with ending_lm_eval_command():
        check_user_tasks(sys.argv[1:])


def check_stock_command_line() -> None:
    """In the stock ``lm_eval`` command: its command line checked, lm-eval's index narrowed."""
    if not stock_lm_eval_command():  # lm-eval imports its task manager before it loads the model
        return
    from lm_eval_ext.command_preflight import check_command_line
    from lm_eval_ext.plugin.task_folders import narrow_to_command_line

    install_one_line_errors()
    with ending_lm_eval_command():  # one line, exit 2 (1: a full disk), no model loaded
        check_command_line(sys.argv[1:], build_user_tasks=False)  # lm_eval.tasks still loads
    narrow_to_command_line(sys.argv[1:])
