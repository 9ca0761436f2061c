"""``lm-eval-ext run ...``: stock ``lm_eval`` arguments, hf-metered and our tasks registered."""

from __future__ import annotations

import argparse
import sys

HELP = """usage: lm-eval-ext run LM_EVAL_ARGUMENTS...

Runs lm-eval's own `lm_eval run` with hf-metered and this package's tasks registered, without
the start-up hook (for `python -S`, editable installs, or LM_EVAL_EXT_DISABLE=1). Every argument
after `run` goes to lm-eval unchanged, for example:

  lm-eval-ext run --model hf-metered --tasks bbq_subset_25pct --limit 8 --output_path OUT

Without --model (or --config), the model is hf-metered (lm-eval's own default, hf, needs
--model_args pretrained=...). lm-eval's own options: `lm_eval run --help`. hf-metered's
--model_args: docs/hf-metered.md."""

#: the flags that name lm-eval's model (or a config file that may)
MODEL_FLAGS = ("--model", "-M", "--config", "-C")


def with_model(argv: list[str]) -> list[str]:
    """``argv`` with ``--model hf-metered`` where it names no model (and a note saying so)."""
    if any(a in MODEL_FLAGS or a.startswith(("--model=", "--config=")) for a in argv):
        return argv
    print("lm-eval-ext run: no --model given: using hf-metered", file=sys.stderr)
    return ["--model", "hf-metered", *argv]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``run`` (everything after it goes to lm_eval unparsed)."""
    parser = sub.add_parser("run", help="run lm_eval with hf-metered and the tasks registered",
                            add_help=False)
    parser.add_argument("lm_eval_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Hand the arguments to lm-eval's own CLI after registering the extension."""
    from lm_eval_ext.command_preflight import check_command_line
    from lm_eval_ext.plugin.lm_eval_cli import one_line_error, run_lm_eval_cli

    argv = with_model(list(args.lm_eval_args))
    check_command_line(argv)
    # argv[0] stays ours, so our errors are this command's (errors.stock_lm_eval_command: no
    # "lm_eval: error:", the exit code from main)
    try:
        run_lm_eval_cli(argv, "lm-eval-ext")
    except (ValueError, ConnectionError, FileNotFoundError, AssertionError,
            ZeroDivisionError) as exc:
        raise one_line_error(exc) from None
    return 0
