"""Quiet two lines of lm-eval output that runs of our tasks print without the user's doing.

- ``fatal: not a git repository`` on stderr: lm-eval records the git hash of the working
  folder by running ``git describe``, whose error goes straight to the terminal outside a
  checkout. The quiet version records the same hash (None outside a checkout).
- "Custom kwargs can be passed to `--metadata`": lm-eval's hint for every task whose data
  comes from a ``custom_dataset`` function. Ours take no ``--metadata`` kwargs (the hint
  stays for lm-eval's own such tasks).
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
from collections.abc import Callable

from lm_eval_ext.plugin.wrapping import wrap_once

_METADATA_HINT = "Custom kwargs can be passed to `--metadata`"


def git_commit_hash() -> str | None:
    """lm-eval's ``get_git_commit_hash`` with git's own error message kept off the terminal."""
    from lm_eval.loggers.utils import get_commit_from_path

    try:
        described = subprocess.check_output(["git", "describe", "--always"],  # noqa: S607
                                            stderr=subprocess.DEVNULL)
        return described.strip().decode()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return get_commit_from_path(os.getcwd())


@wrap_once("lm_eval.evaluator", "get_git_commit_hash")
def quiet_git_hash(get_git_commit_hash: Callable) -> Callable:
    """Point lm-eval's evaluator module at :func:`git_commit_hash` (lm-eval's is not called)."""
    return git_commit_hash


class _DropMetadataHint(logging.Filter):
    @functools.cached_property
    def our_tasks(self) -> frozenset[str]:
        from lm_eval_ext.plugin.task_folders import our_task_names

        return our_task_names()

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if _METADATA_HINT not in message:
            return True
        return message.split(":", 1)[0] not in self.our_tasks


def drop_metadata_hint() -> None:
    """Filter lm-eval's ``--metadata`` hint for ``custom_dataset`` tasks (once per process)."""
    task_logger = logging.getLogger("lm_eval.api.task")
    if not any(isinstance(f, _DropMetadataHint) for f in task_logger.filters):
        task_logger.addFilter(_DropMetadataHint())
