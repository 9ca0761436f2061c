"""One campaign cell: ``python -m lm_eval_ext.campaign.cell LM_EVAL_ARGS...``.

lm-eval's own CLI with hf-metered and our tasks registered, as ``lm-eval-ext run`` (lm-eval's task
index narrowed when every task is ours: :func:`lm_eval_ext.registration.narrow_to_command_line`).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """Run lm-eval's CLI on ``argv``."""
    from lm_eval_ext.registration import activate, narrow_to_command_line

    activate()
    narrow_to_command_line(argv)
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *argv]
    cli_evaluate()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
