"""Per-item scoring shared by the multiple-choice tasks (both scoring paths; stdlib only)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from lm_eval_ext.tasks.common.answer_parser import LETTERS, AnswerParser, ParsedAnswer


@lru_cache(maxsize=8)
def _parser(n_options: int) -> AnswerParser:
    return AnswerParser(LETTERS[:n_options])


def parse_letter_generations(resps: Sequence[Sequence[str]],
                             docs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """``custom`` filter: each generation becomes a :class:`ParsedAnswer` JSON string."""
    return [[_parser(len(doc["options"])).parse(text, doc["options"]).to_json()
             for text in doc_resps] for doc_resps, doc in zip(resps, docs, strict=True)]


def is_correct(doc: Mapping[str, Any], pred: int | None) -> bool:
    """``pred`` is a gold option (``doc["label"]``: one index, or a list of true indices)."""
    if pred is None:
        return False
    label = doc["label"]
    return pred in label if isinstance(label, (list, tuple)) else pred == int(label)


def generative_prediction(results: Sequence[str]) -> tuple[int | None, ParsedAnswer]:
    """The chosen option index (None on a parse failure) and the parse record."""
    parsed = ParsedAnswer.from_json(results[0])
    return (LETTERS.index(parsed.answer) if parsed.parsed else None), parsed


def loglik_prediction(doc: Mapping[str, Any], results: Sequence[tuple[float, bool]]
                      ) -> tuple[int, int, list[float]]:
    """Argmax option, argmax of per-character log-likelihood, and the log-likelihoods."""
    lls = [float(ll) for ll, _ in results]
    options = doc["options"]
    pred = max(range(len(lls)), key=lls.__getitem__)
    pred_norm = max(range(len(lls)), key=lambda i: lls[i] / max(len(options[i]), 1))
    return pred, pred_norm, lls


def generative_metrics(doc: Mapping[str, Any], results: Sequence[str]) -> tuple[dict, int | None]:
    """Acc (a parse failure is wrong), parse_failure_rate, fallback_parse_rate; and pred."""
    pred, parsed = generative_prediction(results)
    return {"acc": float(is_correct(doc, pred)), "parse_failure_rate": float(not parsed.parsed),
            "fallback_parse_rate": float(parsed.parsed and not parsed.strict)}, pred


def loglik_metrics(doc: Mapping[str, Any], results: Sequence[tuple[float, bool]]
                   ) -> tuple[dict, int]:
    """Acc and acc_norm of the log-likelihood argmax; and pred."""
    pred, pred_norm, _ = loglik_prediction(doc, results)
    return {"acc": float(is_correct(doc, pred)), "acc_norm": float(is_correct(doc, pred_norm))}, pred


def mean_of_present(values: list[float | None]) -> float:
    """Mean over items that have a value (None marks a parse failure); NaN if none do."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else float("nan")
