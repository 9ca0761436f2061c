"""Turn one task's logged samples into one row per item.

Our BBQ tasks log the prepared row (``doc.item_key``, ``doc.unit_id``, ...) and a per-item bias
record; other lm-eval tasks fall back to ``doc_id`` keys and their ``acc`` value. Columns:

``task, doc_id, item_key, unit_id, category, context_condition, question_polarity,
stereotyped_groups, benchmark_group, label, pred, answer, parsed, correct, parse_method,
target_loc, unknown_loc`` plus ``judge_*`` scores when a sample carries them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lm_eval_ext.tasks.common.answer_parser import LETTERS


class SampleError(ValueError):
    """A logged sample lacks a field the analysis needs (the loader names the file)."""


def _num(value: Any) -> float:
    """lm-eval stringifies leaves: ``"-3.48"``, ``"False"``, ``"NaN"``."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return float(lowered == "true")
        return float(value)
    return float(value)


def _loglik_argmax(filtered: Sequence[Any]) -> int | None:
    try:
        scores = [_num(entry[0] if isinstance(entry, (list, tuple)) else entry)
                  for entry in filtered]
    except (TypeError, ValueError):
        return None
    return max(range(len(scores)), key=scores.__getitem__) if scores else None


def _parsed_record(filtered: Sequence[Any]) -> Mapping[str, Any] | None:
    if not filtered or not isinstance(filtered[0], str):
        return None
    try:
        record = json.loads(filtered[0])
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and "method" in record else None


def _bbq_row(sample: Mapping[str, Any], output_type: str) -> dict[str, Any]:
    doc = sample["doc"]
    record = sample.get("bias_s_dis") if isinstance(sample.get("bias_s_dis"), dict) else {}
    parsed = _parsed_record(sample.get("filtered_resps", []))
    if output_type == "generate_until":
        answer = parsed.get("answer") if parsed else None
        pred = LETTERS.index(answer) if answer else None
        method = parsed.get("method") if parsed else "failure"
        reasoning = parsed.get("reasoning") if parsed else None
    else:
        pred = record.get("pred", _loglik_argmax(sample.get("filtered_resps", [])))
        answer = None if pred is None else LETTERS[pred]
        method, reasoning = "loglik", None
    return {
        "item_key": doc["item_key"], "unit_id": doc["unit_id"],
        "template_id": template_id(doc), "category": doc["category"],
        "context_condition": doc["context_condition"],
        "question_polarity": doc["question_polarity"],
        "stereotyped_groups": "|".join(doc.get("stereotyped_groups") or []),
        "benchmark_group": doc["category"],
        "label": int(doc["label"]), "pred": pred, "answer": answer,
        "parsed": pred is not None, "correct": pred is not None and pred == int(doc["label"]),
        "parse_method": method, "reasoning": reasoning,
        "target_loc": doc.get("target_loc"), "unknown_loc": doc.get("unknown_loc"),
    }


def template_id(doc: Mapping[str, Any]) -> str:
    """BBQ's template (category x question_index), shared by several natural units; else the unit.

    In the instrument, 406 of the 500 units (81.2%) share one of 231 templates with another
    unit (up to 7 per template), so their outcomes may correlate beyond the unit:
    ``analyze --cluster template`` resamples templates.
    """
    if doc.get("question_index") is None:
        return doc["unit_id"]
    return f"{doc['category']}:q{doc['question_index']}"


#: per-item 0/1 scores read as "correct", in order of preference (lm-eval's own names)
CORRECTNESS_METRICS = ("acc", "exact_match", "acc_norm", "em", "correct")
#: per-item scores a task logs besides its correctness, kept as columns of their own
ITEM_SCORES = ("mc2",)


def _correctness_metric(task: str, sample: Mapping[str, Any]) -> str:
    """The per-item 0/1 score that counts as correct; an error when the task has none.

    Upstream tasks often score ``exact_match`` rather than ``acc``; reading a missing ``acc``
    as 0 would compare 0 with 0 and report "no change".
    """
    for name in CORRECTNESS_METRICS:
        value = sample.get(name)
        if value is not None and not isinstance(value, dict):
            try:
                if _num(value) in (0.0, 1.0):
                    return name
            except (TypeError, ValueError):
                continue
    raise SampleError(f"no per-item 0/1 score among {', '.join(CORRECTNESS_METRICS)} in task {task} "
                   f"(its metrics: {', '.join(map(str, sample.get('metrics') or [])) or 'none'}); "
                   "the analysis compares per-item correctness")


def _generic_row(task: str, sample: Mapping[str, Any], output_type: str) -> dict[str, Any]:
    """Our other tasks (docs with ``item_key``) and any upstream task (``doc_id`` keys).

    ``correct`` is the task's own per-item ``acc`` (for CrowS-Pairs: the less stereotyping
    sentence preferred; for XSTest: appropriate behaviour); the answer is the parsed letter, the
    XSTest response class, or the log-likelihood argmax.
    """
    doc = sample.get("doc") or {}
    key = doc.get("item_key") or f"{task}:{sample.get('doc_hash') or sample['doc_id']}"
    filtered = sample.get("filtered_resps", [])
    record = _parsed_record(filtered)
    classified = None
    if filtered and isinstance(filtered[0], str) and '"response_class"' in filtered[0]:
        classified = json.loads(filtered[0])
    if classified:
        pred, answer, method = None, classified["response_class"], classified["rule"]
    elif record is not None:
        answer, method = record.get("answer"), record.get("method")
        pred = LETTERS.index(answer) if answer else None
    elif output_type == "multiple_choice":
        pred, method = _loglik_argmax(filtered), "loglik"
        answer = None if pred is None else LETTERS[pred]
    else:
        pred, answer, method = None, None, "task_metric"
    correct = bool(_num(sample[_correctness_metric(task, sample)]))
    per_item = {name: _num(sample[name]) for name in ITEM_SCORES if name in sample}
    return {
        **per_item,
        "item_key": key, "unit_id": doc.get("unit_id", key),
        "template_id": doc.get("unit_id", key), "category": doc.get("category"),
        "context_condition": None, "question_polarity": None, "stereotyped_groups": "",
        "benchmark_group": doc.get("benchmark_group", doc.get("category")),
        "label": doc.get("label") if isinstance(doc.get("label"), int) else None,
        "pred": pred, "answer": answer,
        "parsed": answer is not None or method in ("loglik", "task_metric"),
        "correct": correct, "parse_method": method,
        "reasoning": record.get("reasoning") if record else None,
        "target_loc": None, "unknown_loc": None, "split": doc.get("split"),
    }


def _judge_scores(sample: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in sample.items():
        if key.startswith("judge_"):
            try:
                number = _num(value) if value is not None else math.nan
            except (TypeError, ValueError):
                number = math.nan
            out[key] = number
    return out


def _check_fields(sample: Mapping[str, Any]) -> None:
    """The fields every lm-eval sample has: an integer ``doc_id`` and a ``filtered_resps`` list.

    Without them an item would count as unparsed or land on the wrong key, silently.
    """
    doc_id = sample.get("doc_id")
    if isinstance(doc_id, bool) or not (isinstance(doc_id, int) or str(doc_id).isdigit()):
        raise SampleError(f"doc_id is {doc_id!r}, not the item's number lm-eval writes")
    if not isinstance(sample.get("filtered_resps"), list):
        raise SampleError("no filtered_resps list (the answers after lm-eval's filters)")


def extract_items(task: str, task_config: Mapping[str, Any],
                  samples: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per logged item of ``task``."""
    output_type = task_config.get("output_type", "")
    rows = []
    for number, sample in enumerate(samples, start=1):
        doc = sample.get("doc") or {}
        try:
            _check_fields(sample)
            row = (_bbq_row(sample, output_type) if "item_key" in doc and "context_condition" in doc
                   else _generic_row(task, sample, output_type))
            rows.append({"task": task, "doc_id": int(sample["doc_id"]), **row,
                         **_judge_scores(sample)})
        except SampleError as exc:
            raise SampleError(f"sample {number} of task {task}: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise SampleError(f"sample {number} of task {task}: missing or damaged field "
                              f"{exc}") from exc
    frame = pd.DataFrame(rows)
    frame["pred"] = frame["pred"].astype("Int64")
    for column in ("target_loc", "unknown_loc", "label"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("Int64")
    return frame
