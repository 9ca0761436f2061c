"""The ``lm-eval-ext`` console script: Ctrl-C while the command line loads is one line too."""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Load the command line (its imports take a moment), then run it."""
    try:
        from lm_eval_ext.cli.main import main as run_command
    except KeyboardInterrupt:
        from lm_eval_ext.errors import INTERRUPTED, TRACEBACK_ENV

        if os.environ.get(TRACEBACK_ENV):
            raise
        print(f"\nlm-eval-ext: {INTERRUPTED}", file=sys.stderr)
        return 130
    return run_command()
