"""A run's answers as one fingerprint, the same from the model's side and from the samples file.

A samples file moved under another run's results file (a bf16 run's lines beside an fp32
results file) passes every check of its own lines when the aggregates agree. The metered
models therefore record, per task, a SHA-256 over every answer they gave (``config.responses``
in the results file: ``{task: {"responses": N, "sha256": ...}}``); the loader recomputes it
from the samples file's ``resps`` and refuses a mismatch.

Each answer is the line ``doc_id:idx:JSON`` with the answer as lm-eval logs it (every leaf a
string, tuples as lists: lm-eval's ``sanitize_list``); the fingerprint hashes the sorted lines,
so the order in which requests ran does not matter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: the key of ``config`` in lm-eval's results file that holds the fingerprints
CONFIG_KEY = "responses"


def _logged(value: Any) -> Any:
    """An answer as lm-eval's samples file holds it (``sanitize_list``, tuples as lists)."""
    if isinstance(value, list | tuple):
        return [_logged(item) for item in value]
    return value if isinstance(value, str) else str(value)


def answer_line(doc_id: Any, idx: int, answer: Any) -> str:
    """One answer as a line of the fingerprint."""
    return f"{doc_id}:{idx}:{json.dumps(_logged(answer), ensure_ascii=False)}"


def fingerprint(lines: Iterable[str]) -> dict[str, Any]:
    """``{"responses": N, "sha256": ...}`` of answer lines (in any order)."""
    ordered = sorted(lines)
    return {"responses": len(ordered),
            "sha256": hashlib.sha256("\n".join(ordered).encode("utf-8")).hexdigest()}


class AnswerLog:
    """The answers a model gave, per task (lm-eval's ``Instance.task_name``)."""

    def __init__(self) -> None:
        self._lines: dict[str, list[str]] = {}

    def add(self, requests: Sequence[Any], answers: Sequence[Any]) -> None:
        """Record one batch of requests and the model's answers, in the same order."""
        for request, answer in zip(requests, answers, strict=False):
            task = getattr(request, "task_name", None)
            if task is not None:
                self._lines.setdefault(str(task), []).append(
                    answer_line(request.doc_id, request.idx, answer))

    def reset(self) -> None:
        """Forget every answer (a new run on the same loaded model)."""
        self._lines.clear()

    def report(self) -> dict[str, dict[str, Any]]:
        """Each task's fingerprint (the ``config.responses`` block)."""
        return {task: fingerprint(lines) for task, lines in self._lines.items()}


def samples_fingerprint(samples: Sequence[Mapping[str, Any]],
                        by_position: bool = False) -> dict[str, Any]:
    """The fingerprint of a samples file's answers (one line per doc: the first filter's).

    ``by_position``: each doc by its rank among the file's doc ids, as the model saw it in a
    run of selected items (lm-eval's ``--samples``: requests carry the item's position among
    those selected, the samples file the item's index).
    """
    ids = [sample.get("doc_id") for sample in samples]
    rank = ({doc_id: position for position, doc_id in enumerate(sorted(set(ids)))}
            if by_position and all(isinstance(i, int) for i in ids) else None)
    seen: set[Any] = set()
    lines = []
    for sample in samples:
        doc_id = sample.get("doc_id")
        if doc_id in seen:
            continue
        seen.add(doc_id)
        shown = rank[doc_id] if rank is not None else doc_id
        for idx, answers in enumerate(sample.get("resps") or []):
            lines += [answer_line(shown, idx, a) for a in answers]
    return fingerprint(lines)
