"""Errors and warnings of the analysis package."""

from __future__ import annotations

from lm_eval_ext.errors import LmEvalExtError


class AnalysisInputError(LmEvalExtError):
    """An lm-eval output cannot be analysed; the message names the file and the remedy."""


class DegenerateDataWarning(UserWarning):
    """A statistic is undefined for these data (too few items/clusters, no discordance)."""
