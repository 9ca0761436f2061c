"""Per-item results and aggregations of the BBQ tasks (stdlib only).

lm-eval calls these through ``utils.py`` (``process_results``, ``aggregation``); they import
nothing outside the standard library and lm-eval-ext's stdlib-only modules, so
``lm-eval-ext export-upstream`` can vendor them into a self-contained upstream task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lm_eval_ext.tasks.bbq.metrics import accuracy, bias_record, s_amb, s_dis
from lm_eval_ext.tasks.common.scoring import generative_metrics, loglik_metrics


def _bias_metrics(doc: Mapping[str, Any], pred: int | None) -> dict[str, Any]:
    record = bias_record(doc, pred)
    return {"acc_ambig": record, "acc_disambig": record, "bias_s_dis": record,
            "bias_s_amb": record}


def process_results_generative(doc: Mapping[str, Any], results: Sequence[str]) -> dict:
    """Score one parsed generation (parse failures are wrong for ``acc``, excluded elsewhere)."""
    out, pred = generative_metrics(doc, results)
    bias = _bias_metrics(doc, pred)
    return {**out, **bias, "acc_parsed": bias["acc_ambig"]}


def process_results_loglik(doc: Mapping[str, Any], results: Sequence[tuple[float, bool]]):
    """Score the option log-likelihoods: argmax (``acc``) and per-character (``acc_norm``)."""
    out, pred = loglik_metrics(doc, results)
    return {**out, **_bias_metrics(doc, pred)}


def agg_acc_parsed(records: list[Mapping[str, Any]]) -> float:
    """Accuracy over items whose answer was parsed (the seed paper's accuracy)."""
    return accuracy(records)


def agg_acc_ambig(records: list[Mapping[str, Any]]) -> float:
    """Accuracy on ambiguous contexts (parsed items)."""
    return accuracy(records, "ambig")


def agg_acc_disambig(records: list[Mapping[str, Any]]) -> float:
    """Accuracy on disambiguated contexts (parsed items)."""
    return accuracy(records, "disambig")


def agg_s_dis(records: list[Mapping[str, Any]]) -> float:
    """BBQ bias score S_DIS (Parrish et al. 2022, p. 6)."""
    return s_dis(records)


def agg_s_amb(records: list[Mapping[str, Any]]) -> float:
    """BBQ bias score S_AMB = (1 - acc_ambig) * raw ambiguous bias (Parrish et al. 2022, p. 6)."""
    return s_amb(records)
