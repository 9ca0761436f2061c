"""lm-eval hooks of the BBQ tasks (referenced from the YAMLs with ``!function utils.*``).

Absolute imports only: lm-eval loads this file by path, so relative imports would fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import datasets

from lm_eval_ext.data.instrument import load_membership as _load_membership
from lm_eval_ext.data.external_manifest import load_manifest_rows
from lm_eval_ext.errors import ManifestError
from lm_eval_ext.tasks.bbq import metrics
from lm_eval_ext.tasks.bbq.prompts import GENERATIVE_TEMPLATE, LOGLIK_TEMPLATE, render
from lm_eval_ext.tasks.common.answer_parser import ParsedAnswer, parse_abc

LETTERS = "ABC"


def _as_dataset(rows: Iterable[Mapping[str, Any]]) -> datasets.DatasetDict:
    return datasets.DatasetDict({"test": datasets.Dataset.from_list([dict(r) for r in rows])})


def load_membership(
    membership: str, membership_sha256: str | None = None, **_: Any
) -> datasets.DatasetDict:
    """``custom_dataset`` of the packaged tasks: one verified membership as a test split.

    Args:
        membership: Name in the committed manifest (``instrument``, ``25pct``, ``50pct_r3``,
            ...) or ``full`` for all 58,492 rows. Set through ``dataset_kwargs``.
        membership_sha256: Fingerprint the task YAML expects (from ``metadata``); a
            mismatch with the manifest means the YAML and manifest drifted apart.
    """
    loaded = _load_membership(membership)
    if membership_sha256 is not None and membership_sha256 != loaded.membership_sha256:
        raise ManifestError(
            f"task expects membership {membership!r} with fingerprint {membership_sha256}, "
            f"but the manifest gives {loaded.membership_sha256}; reinstall lm-eval-ext."
        )
    return _as_dataset(loaded.rows)


def load_registered_manifest(
    manifest_csv: str, sample_sha256: str, **_: Any
) -> datasets.DatasetDict:
    """``custom_dataset`` of tasks registered with ``lm-eval-ext data fingerprint --register``."""
    return _as_dataset(load_manifest_rows(manifest_csv, expected_sample_sha256=sample_sha256))


def doc_to_text_generative(doc: Mapping[str, Any]) -> str:
    """The JSON-answer prompt (version ``bbq-json-v1``)."""
    return render(GENERATIVE_TEMPLATE, doc)


def doc_to_text_loglik(doc: Mapping[str, Any]) -> str:
    """Context and question; the options are scored as continuations."""
    return render(LOGLIK_TEMPLATE, doc)


def doc_to_choice(doc: Mapping[str, Any]) -> list[str]:
    """The three answer options, in upstream order."""
    return [doc["ans0"], doc["ans1"], doc["ans2"]]


def parse_generations(resps: Sequence[Sequence[str]], docs: Sequence[Mapping[str, Any]]):
    """``custom`` filter: each generation becomes a :class:`ParsedAnswer` JSON string."""
    return [
        [parse_abc(text, doc_to_choice(doc)).to_json() for text in doc_resps]
        for doc_resps, doc in zip(resps, docs, strict=True)
    ]


def _per_item(doc: Mapping[str, Any], pred: int | None) -> dict[str, Any]:
    record = metrics.bias_record(doc, pred)
    return {
        "acc": float(pred == int(doc["label"])),
        "acc_ambig": record,
        "acc_disambig": record,
        "bias_s_dis": record,
        "bias_s_amb": record,
    }


def process_results_generative(doc: Mapping[str, Any], results: Sequence[str]) -> dict:
    """Score one parsed generation (parse failures are wrong for ``acc``, excluded elsewhere)."""
    parsed = ParsedAnswer.from_json(results[0])
    pred = LETTERS.index(parsed.answer) if parsed.parsed else None
    out = _per_item(doc, pred)
    out["acc_parsed"] = out["acc_ambig"]
    out["parse_failure_rate"] = float(not parsed.parsed)
    out["fallback_parse_rate"] = float(parsed.parsed and not parsed.strict)
    return out


def process_results_loglik(doc: Mapping[str, Any], results: Sequence[tuple[float, bool]]):
    """Score the option log-likelihoods: argmax (``acc``) and per-character (``acc_norm``)."""
    lls = [float(ll) for ll, _ in results]
    choices = doc_to_choice(doc)
    pred = max(range(len(lls)), key=lls.__getitem__)
    pred_norm = max(range(len(lls)), key=lambda i: lls[i] / max(len(choices[i]), 1))
    out = _per_item(doc, pred)
    out["acc_norm"] = float(pred_norm == int(doc["label"]))
    return out


def agg_acc_parsed(records: list[Mapping[str, Any]]) -> float:
    """Accuracy over items whose answer was parsed (the seed paper's accuracy)."""
    return metrics.accuracy(records)


def agg_acc_ambig(records: list[Mapping[str, Any]]) -> float:
    """Accuracy on ambiguous contexts (parsed items)."""
    return metrics.accuracy(records, "ambig")


def agg_acc_disambig(records: list[Mapping[str, Any]]) -> float:
    """Accuracy on disambiguated contexts (parsed items)."""
    return metrics.accuracy(records, "disambig")


def agg_s_dis(records: list[Mapping[str, Any]]) -> float:
    """BBQ bias score S_DIS (Parrish et al. 2022, p. 6)."""
    return metrics.s_dis(records)


def agg_s_amb(records: list[Mapping[str, Any]]) -> float:
    """BBQ bias score S_AMB = (1 - acc_ambig) * raw ambiguous bias (Parrish et al. 2022, p. 6)."""
    return metrics.s_amb(records)
