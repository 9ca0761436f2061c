"""Write lm-eval-format BBQ runs with simulated answers (known truth, for tests and benchmarks).

The outputs have the layout and fields of real ``hf-metered`` runs of the log-likelihood BBQ
tasks (``results_*.json`` + ``samples_<task>_*.jsonl`` with the prepared rows as ``doc``), so
the analysis reads them exactly as it reads real runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lm_eval_ext.analysis.integrity import line_hashes, task_hash
from lm_eval_ext.tasks.bbq.metrics import bias_record, s_amb, s_dis

#: the metrics a line logs, and their aggregation as the task's metric_list names it
_METRICS = {"acc": "mean", "acc_ambig": "agg_acc_ambig", "acc_disambig": "agg_acc_disambig",
            "bias_s_dis": "agg_s_dis", "bias_s_amb": "agg_s_amb"}


def simulate_predictions(rows: Sequence[Mapping[str, Any]], accuracy: float, rng,
                         base: np.ndarray | None = None, flip_rate: float = 0.0) -> np.ndarray:
    """Predicted option per row.

    Correct with probability ``accuracy``, else a random wrong option; with ``base``, each
    prediction is copied from it unless it flips (probability ``flip_rate``).
    """
    labels = np.array([int(r["label"]) for r in rows])
    wrong = (labels + rng.integers(1, 3, size=len(labels))) % 3
    fresh = np.where(rng.random(len(labels)) < accuracy, labels, wrong)
    if base is None:
        return fresh
    return np.where(rng.random(len(labels)) < flip_rate, fresh, base)


def write_run(out: Path, task: str, rows: Sequence[Mapping[str, Any]], preds: np.ndarray, *,
              model: str = "synthetic-model", precision: str = "bf16", batch_size: int = 1,
              energy_joules: float | None = None, inference_seconds: float | None = None,
              stamp: str = "2026-01-01T00-00-00.000000", extra_config: dict | None = None) -> Path:
    """Write one run; returns the results file path."""
    folder = out / model
    folder.mkdir(parents=True, exist_ok=True)
    records, lines = [], []
    with open(folder / f"samples_{task}_{stamp}.jsonl", "w", encoding="utf-8") as handle:
        for doc_id, (row, pred) in enumerate(zip(rows, preds, strict=False)):
            record = bias_record(row, int(pred))
            records.append(record)
            lls = [-5.0 - i for i in range(3)]
            lls[int(pred)] = -1.0
            prompt = f"{row.get('context', '')} {row.get('question', '')}"
            line = {"doc_id": doc_id, "doc": dict(row), "target": str(row["label"]),
                    "arguments": [[prompt, f" {i}"] for i in range(3)],
                    "filtered_resps": [[str(ll), "False"] for ll in lls], "filter": "none",
                    "metrics": list(_METRICS), "acc": float(pred == row["label"]),
                    "acc_ambig": record, "acc_disambig": record, "bias_s_dis": record,
                    "bias_s_amb": record}
            line.update(line_hashes(line["doc"], prompt, line["target"]))
            lines.append(line)
            handle.write(json.dumps(line) + "\n")
    results = {
        "results": {task: {"alias": task, "acc,none": float(np.mean(
            [p == r["label"] for p, r in zip(preds, rows, strict=False)])),
            "acc_stderr,none": float("nan"),  # lm-eval writes bare NaN where it has none
            "bias_s_dis,none": s_dis(records), "bias_s_amb,none": s_amb(records)}},
        "configs": {task: {"task": task, "output_type": "multiple_choice",
                           "metric_list": [{"metric": m, "aggregation": a}
                                           for m, a in _METRICS.items()],
                           "metadata": {"version": 1.0}}},
        "task_hashes": {task: task_hash(lines)},
        "n-shot": {task: 0},
        "n-samples": {task: {"original": len(rows), "effective": len(rows)}},
        "config": {"model": "hf-metered", "model_args": f"pretrained={model},precision={precision}",
                   "batch_size": batch_size,
                   "metering": {"precision": precision, "batch_size": batch_size,
                                "energy_joules": energy_joules,
                                "inference_seconds": inference_seconds,
                                "energy_source": "nvml" if energy_joules else "unavailable",
                                "flags": []},
                   **(extra_config or {})},
    }
    # the evaluation's wall time holds its inference windows (and a second of the rest)
    written = results["config"].get("metering") or {}
    inference = written.get("inference_seconds") if isinstance(written, dict) else None
    results["total_evaluation_time_seconds"] = str(
        (inference if isinstance(inference, (int, float)) and inference > 0 else 0.0) + 1.0)
    path = folder / f"results_{stamp}.json"
    # allow_nan: lm-eval writes bare NaN; the loader must accept it
    path.write_text(json.dumps(results, indent=1, allow_nan=True), encoding="utf-8")
    return path


def move_answers(correct: np.ndarray, shift: float, churn: float,
                 rng: np.random.Generator) -> np.ndarray:
    """Answers moved so that accuracy shifts by ``shift`` (a probability) where half are right.

    A wrong answer becomes right with chance ``churn + |shift| + shift``, a right one wrong with
    ``churn + |shift| - shift``: the expected shift is ``shift`` exactly when the chance of a
    right answer averages 1/2 (as ``expit(N(0, 1))`` does), ``churn`` answers change either way.
    """
    moved = churn + abs(shift)
    u = rng.random(correct.shape)
    return np.where(correct, u >= moved - shift, u < moved + shift)


def two_model_grid(gaps_pp: Sequence[float], rng: np.random.Generator, n_units: int = 250,
                   correlated: bool = False) -> tuple[Any, dict[int, Any]]:
    """A rank-flip grid with known truth: two models x one condition per gap, 4 items a unit.

    A unit's chance of a correct answer is ``expit(N(0, 1))``, shared by both models (the same
    items). In condition ``c`` model a's true accuracy moves by ``+gaps_pp[c] / 2`` points and
    model b's by ``-gaps_pp[c] / 2`` (each answer moves right or wrong with chances that make the
    shift exact), so the true gap a - b there is ``gaps_pp[c]``. ``correlated`` conditions start
    from one draw per model and move 5% of its answers each (as precisions of one model do);
    otherwise each condition is a fresh draw. Returns the cells (benchmark, config, model,
    value) and each cell's per-unit ``correct``/``n`` sums, as ``rank_flip_intervals`` takes.
    """
    import pandas as pd
    from scipy import stats

    p = stats.logistic.cdf(rng.normal(0.0, 1.0, n_units))[:, None] * np.ones((1, 4))
    base = {m: rng.random(p.shape) < p for m in ("a", "b")}
    rows, sums = [], {}
    for c, gap in enumerate(gaps_pp):
        for model, direction in (("a", 1), ("b", -1)):
            start = base[model] if correlated else rng.random(p.shape) < p
            correct = move_answers(start, direction * gap / 200, 0.05 if correlated else 0.0,
                                   rng)  # each model moves half the gap
            sums[len(rows)] = pd.DataFrame({"correct": correct.sum(1).astype(float),
                                            "n": np.full(n_units, 4.0)},
                                           index=[f"u{i}" for i in range(n_units)])
            rows.append({"benchmark": "bbq", "config": f"c{c}", "model": model,
                         "value": float(correct.mean())})
    return pd.DataFrame(rows), sums
