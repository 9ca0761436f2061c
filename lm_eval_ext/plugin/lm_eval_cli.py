"""lm-eval's own command line, run in this process with the plug-in active.

Used by ``lm-eval-ext run`` and by a campaign cell (``python -m lm_eval_ext.campaign.cell``).
lm-eval 0.4.13's ``cli_evaluate()`` takes no argument list: it parses ``sys.argv[1:]``, so the
arguments are handed over there (``argv[0]`` names the program in lm-eval's usage errors and
decides :func:`lm_eval_ext.errors.stock_lm_eval_command`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def run_lm_eval_cli(argv: Sequence[str], program: str) -> None:
    """Register the models and task folders, then run ``lm_eval`` on ``argv`` as ``program``."""
    from lm_eval_ext.plugin.registration import activate, narrow_to_command_line

    activate()
    narrow_to_command_line(argv)
    from lm_eval.__main__ import cli_evaluate

    sys.argv = [program, *argv]
    cli_evaluate()
