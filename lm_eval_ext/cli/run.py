"""``lm-eval-ext run ...``: stock ``lm_eval`` arguments, hf-metered and our tasks registered."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``run`` (everything after it goes to lm_eval unparsed)."""
    parser = sub.add_parser("run", help="run lm_eval with hf-metered and the tasks registered",
                            add_help=False)
    parser.add_argument("lm_eval_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Hand the arguments to lm-eval's own CLI after registering the extension."""
    from lm_eval_ext.registration import activate, narrow_to_command_line

    activate()
    narrow_to_command_line(args.lm_eval_args)
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *args.lm_eval_args]
    cli_evaluate()
    return 0
