"""Whether a ``max_length`` the user gave holds every scored text of a log-likelihood task.

lm-eval scores a (context, continuation) pair on its last ``max_length + 1`` tokens: a longer
pair loses the start of its context (the instruction, the passage) with a log warning per
request, and the cut item is scored as if whole. A length the user chose must hold every pair;
the model's own is lm-eval's business (its warnings stand).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lm_eval_ext.errors import ConfigError


def check_room_for_scoring(max_length_asked: Any, max_length: int,
                           requests: Sequence[tuple[Any, list[int], list[int]]]) -> None:
    """One line when ``max_length_asked`` cuts any of lm-eval's tokenised ``requests``.

    ``requests`` are what lm-eval's ``_loglikelihood_tokens`` receives: ``(key, context tokens,
    continuation tokens)``; ``max_length`` is the model's length in force.
    """
    if max_length_asked is None:
        return
    totals = [len(context) + len(continuation) for _, context, continuation in requests]
    cut = sum(total > max_length + 1 for total in totals)
    if cut:
        need = max(totals) - 1
        raise ConfigError(
            f"--model_args max_length={max_length} cuts {cut} of {len(requests)} scored texts "
            "(lm-eval keeps the last max_length + 1 tokens of a context and its answer): give "
            f"max_length={need} or more (the longest of this run's {len(requests)} contexts "
            "and answers), or leave max_length out (the model's own)")
