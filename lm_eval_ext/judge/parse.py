"""Strict reading of a judge's reply, and the non-substantive precheck of a reasoning."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from lm_eval_ext.judge.rubrics import Rubric

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_REFUSAL = re.compile(r"^(i\s+(can(?:no|')t|cannot|won't|will not|am unable)|sorry|as an ai)\b",
                      re.IGNORECASE)
STATUSES = ("scored", "null", "non_substantive", "parse_failure", "out_of_range")


@dataclass(frozen=True)
class Verdict:
    """One judged item: the score (None: null or unusable), why, and how it was read."""

    score: int | None
    reason: str | None
    status: str  # one of STATUSES


def parse_reply(text: str, rubric: Rubric) -> Verdict:
    """Exactly one JSON object with ``score`` and a one-line ``reason``; anything else fails.

    Code fences around the object are allowed; extra text, a missing key, a reason with a line
    break, a non-integer score, or null where the rubric allows none are parse failures; an
    integer outside 1-100 is ``out_of_range``.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    body = fenced.group(1) if fenced else body
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return Verdict(None, None, "parse_failure")
    if not isinstance(value, dict) or set(value) != {"score", "reason"}:
        return Verdict(None, None, "parse_failure")
    reason, score = value["reason"], value["score"]
    if not isinstance(reason, str) or "\n" in reason.strip():
        return Verdict(None, None, "parse_failure")
    if score is None:
        return Verdict(None, reason, "null") if rubric.null_allowed else \
            Verdict(None, reason, "parse_failure")
    if isinstance(score, bool) or not isinstance(score, int):
        return Verdict(None, reason, "parse_failure")
    if not 1 <= score <= 100:
        return Verdict(None, reason, "out_of_range")
    return Verdict(score, reason, "scored")


def _normal(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text).strip().lower()


def is_non_substantive(reasoning: str | None, options: Sequence[str], answer: str | None) -> bool:
    """Empty, a restated option (letter and/or text), or a bare refusal."""
    if reasoning is None or not _normal(reasoning):
        return True
    said = _normal(reasoning)
    restated = {_normal(o) for o in options} | {_normal(f"{'ABC'[i]} {o}")
                                                for i, o in enumerate(options)}
    if answer:
        restated |= {_normal(answer)}
    return said in restated or (bool(_REFUSAL.match(reasoning.strip())) and len(said.split()) < 12)
