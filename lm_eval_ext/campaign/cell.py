"""One campaign cell: ``python -m lm_eval_ext.campaign.cell LM_EVAL_ARGS...``.

lm-eval's own CLI with hf-metered and our tasks registered (as ``lm-eval-ext run``); when every
task of the cell is one of ours and no ``--include_path`` is given, lm-eval's task index is
narrowed to our task folders (see :func:`lm_eval_ext.registration.narrow_task_index`).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """Run lm-eval's CLI on ``argv``."""
    from lm_eval_ext.registration import activate, narrow_task_index

    activate()
    if "--tasks" in argv and "--include_path" not in argv:
        narrow_task_index(argv[argv.index("--tasks") + 1].split(","))
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *argv]
    cli_evaluate()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
