"""The ``lm-eval-ext`` console script: Ctrl-C while the command line loads is one line too."""

from __future__ import annotations

import os


def main() -> int:
    """Load the command line (its imports take a moment), then run it."""
    try:
        from lm_eval_ext.errors import interrupt_once

        interrupt_once()
        from lm_eval_ext.cli.main import main as run_command
    except KeyboardInterrupt:
        from lm_eval_ext.errors import TRACEBACK_ENV, say_interrupted

        if os.environ.get(TRACEBACK_ENV):
            raise
        return say_interrupted("lm-eval-ext")
    return run_command()
