"""Run lm-eval requests task by task and put the answers back in the original order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

R = TypeVar("R")


def by_task(requests: Sequence[Any]) -> dict[str, list[int]]:
    """Indices of ``requests`` grouped by ``Instance.task_name``, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for index, request in enumerate(requests):
        groups.setdefault(str(getattr(request, "task_name", None) or "unknown"), []).append(index)
    return groups


def run_by_task(requests: Sequence[Any], run: Callable[[str, list[Any]], list[R]]) -> list[R]:
    """Call ``run(task, requests_of_task)`` per task; return results in request order."""
    results: list[Any] = [None] * len(requests)
    for task, indices in by_task(requests).items():
        answers = run(task, [requests[i] for i in indices])
        if len(answers) != len(indices):
            raise RuntimeError(f"{task}: {len(answers)} answers for {len(indices)} requests")
        for index, answer in zip(indices, answers, strict=True):
            results[index] = answer
    return results
