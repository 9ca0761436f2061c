"""One campaign cell: ``python -m lm_eval_ext.campaign.cell LM_EVAL_ARGS...``.

lm-eval's own CLI with hf-metered and our tasks registered, as ``lm-eval-ext run`` (lm-eval's task
index narrowed when every task is ours: :func:`lm_eval_ext.plugin.task_folders.narrow_to_command_line`).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """Run lm-eval's CLI on ``argv`` (as the stock ``lm_eval`` command: its one-line errors)."""
    from lm_eval_ext.plugin.lm_eval_cli import run_lm_eval_cli

    run_lm_eval_cli(argv, "lm_eval")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
