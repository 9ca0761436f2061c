"""Agreement of the rule-based XSTest response classifier with the human labels.

For each of the 5 models in XSTest's ``model_completions/`` (450 human-labelled completions
each): agreement and Cohen's kappa over the three classes, and over two classes (compliance vs
any refusal), side by side with XSTest's own string-match classifier when its labels
(``evaluation/automated_evaluation_labels/*_streval.csv``) are present. Rules were written
while reading gpt4 and llama2new only; the other three models are held out.

    LM_EVAL_EXT_DATA=../shared/data python benchmarks/xstest_classifier_agreement.py \
        --out benchmarks/results/xstest_classifier_agreement.json
"""

from __future__ import annotations

import argparse
import csv
import os
from collections import Counter
from pathlib import Path

from _harness import write_json
from sklearn_free_kappa import cohen_kappa

DEV_MODELS = ("gpt4", "llama2new")


def _binary(label: str) -> str:
    return "compliance" if label == "full_compliance" else "refusal"


def _strmatch_labels(model: str) -> dict[int, str] | None:
    root = os.environ.get("LM_EVAL_EXT_DATA")
    path = Path(root or "") / "xstest/evaluation/automated_evaluation_labels" / \
        f"xstest_v2_completions_{model}_streval.csv"
    if not root or not path.is_file():
        return None
    with open(path, encoding="utf-8", newline="") as handle:
        return {int(r["id"].split("-")[-1]): r["strmatch_label"] for r in csv.DictReader(handle)}


def _scores(human: list[str], predicted: list[str]) -> dict:
    n = len(human)
    return {
        "n": n,
        "agreement_3class": sum(h == p for h, p in zip(human, predicted, strict=False)) / n,
        "kappa_3class": cohen_kappa(human, predicted),
        "agreement_2class": sum(_binary(h) == _binary(p) for h, p in zip(human, predicted, strict=False)) / n,
        "kappa_2class": cohen_kappa([_binary(h) for h in human], [_binary(p) for p in predicted]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from lm_eval_ext.data.sources import XSTEST_COMPLETION_MODELS
    from lm_eval_ext.data.text_benchmarks import xstest_completions
    from lm_eval_ext.tasks.xstest.classifier import classify_response

    per_model, pooled_h, pooled_p, held_h, held_p = {}, [], [], [], []
    confusion: Counter = Counter()
    for model in XSTEST_COMPLETION_MODELS:
        rows = xstest_completions(model)
        human = [r["final_label"].split("_", 1)[1] for r in rows]
        predicted = [classify_response(r["completion"]).response_class for r in rows]
        entry = {"dev_model": model in DEV_MODELS, "ours": _scores(human, predicted),
                 "human_label_counts": dict(Counter(human))}
        strmatch = _strmatch_labels(model)
        if strmatch:
            theirs = [strmatch[r["xstest_id"]].split("_", 1)[1] for r in rows]
            entry["xstest_strmatch"] = _scores(human, theirs)
        per_model[model] = entry
        pooled_h += human
        pooled_p += predicted
        if model not in DEV_MODELS:
            held_h += human
            held_p += predicted
        confusion.update(zip(human, predicted, strict=False))
    write_json(args.out, {
        "benchmark": "XSTest rule-based classifier vs human labels",
        "command": "LM_EVAL_EXT_DATA=../shared/data python benchmarks/xstest_classifier_agreement.py "
                   f"--out {args.out}",
        "all_models": _scores(pooled_h, pooled_p),
        "held_out_models": _scores(held_h, held_p),
        "per_model": per_model,
        "confusion_human_to_ours": {f"{h}->{p}": n for (h, p), n in sorted(confusion.items())},
    })
    all_scores = _scores(pooled_h, pooled_p)
    print(f"all 5 models: agreement {all_scores['agreement_3class']:.3f}, "
          f"kappa {all_scores['kappa_3class']:.3f} (3 classes); held-out models: "
          f"{_scores(held_h, held_p)['agreement_3class']:.3f}")


if __name__ == "__main__":
    main()
