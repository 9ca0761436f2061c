"""One model through several harnesses: scores, item-level agreement, and why they differ.

For each benchmark and each harness against the reference harness (the first one named):

* **scores**: every metric as the harness itself computes it (its extraction, items and
  formula; for HELM its own ``BBQMetric``: bias counted from its reference tags, S_AMB scaled by
  ``1 - accuracy over all items``), plus S_AMB under both scalings with the upstream bias rule;
* **agreement** on the items both evaluated (joined on our item keys): same answer, same
  correctness, and paired deltas with natural-unit cluster-bootstrap CIs and permutation p;
* **attribution** of ``total = native(other) - native(reference)`` into parts that add up to it.
  Each harness's native score is walked step by step to lm-eval-ext's definition on the
  common items, one change at a time, and each part is the other harness's step minus the
  reference's:

  - ``item_set``: the metric on all its items minus on the common items;
  - ``bias_rule``: its own bias counting minus the upstream rule (``target_loc``);
  - ``s_amb_scaling``: its S_AMB scaling minus Parrish et al.'s (``1 - acc_ambig``);
  - ``answer_extraction``: its extraction minus lm-eval-ext's parser on its raw outputs;
  - ``prompt_and_decoding``: what is left, lm-eval-ext's definition on both harnesses' outputs
    (prompt text, shots, chat template, decoding), paired on the common items, with a CI.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.items import LETTERS
from lm_eval_ext.analysis.metrics import (
    ACCURACY,
    BIAS_S_AMB,
    BIAS_S_AMB_HELM,
    BIAS_S_DIS,
    HELM_NATIVE_S_AMB,
    HELM_NATIVE_S_DIS,
    MetricSpec,
)
from lm_eval_ext.analysis.stats.bootstrap import ClusterDesign
from lm_eval_ext.analysis.stats.paired import answer_agreement, paired_delta
from lm_eval_ext.cards import FACTORS, differing_axes
from lm_eval_ext.cross_harness.readers import FOREIGN_EXTRACTION, HarnessRun
from lm_eval_ext.tasks.common.answer_parser import AnswerParser

#: how each harness scores, per metric name (where it differs from lm-eval-ext's definition)
NATIVE_FORMULAS = {"helm": {"bias_s_dis": HELM_NATIVE_S_DIS, "bias_s_amb": HELM_NATIVE_S_AMB}}
#: the same with the upstream bias rule: only the S_AMB scaling is the harness's own
SCALED_FORMULAS = {"helm": {"bias_s_amb": BIAS_S_AMB_HELM}}


def metrics_of(benchmark: str) -> list[MetricSpec]:
    """The metrics compared for a benchmark (BBQ: accuracy and both bias scores)."""
    return [ACCURACY, BIAS_S_DIS, BIAS_S_AMB] if benchmark == "bbq" else [ACCURACY]


def native_spec(harness: str, spec: MetricSpec) -> MetricSpec:
    """The metric as ``harness`` computes it."""
    return NATIVE_FORMULAS.get(harness, {}).get(spec.name, spec)


def scaled_spec(harness: str, spec: MetricSpec) -> MetricSpec:
    """The metric with the upstream bias rule and ``harness``'s S_AMB scaling."""
    return SCALED_FORMULAS.get(harness, {}).get(spec.name, spec)


def _steps(harness: str, spec: MetricSpec, all_items: pd.DataFrame, common: pd.DataFrame,
           ours: pd.DataFrame) -> dict[str, float]:
    """A harness's native score walked to lm-eval-ext's definition, one change at a time."""
    native, scaled = native_spec(harness, spec), scaled_spec(harness, spec)
    return {"all": native.compute(all_items), "common": native.compute(common),
            "upstream_rule": scaled.compute(common), "parrish": spec.compute(common),
            "our_parser": spec.compute(ours)}


def foreign_extraction(items: pd.DataFrame) -> bool:
    """Whether the answers came from another harness's extraction (re-parsing can differ)."""
    return bool(items["parse_method"].isin(FOREIGN_EXTRACTION).any()
                and items["raw_output"].notna().any())


def reparsed(items: pd.DataFrame) -> pd.DataFrame:
    """The same items with our BBQ parser run on each raw output.

    A letter means the option the harness showed under it (``display_options``), mapped to our
    row's order (``option_texts``), so a harness that shuffles options is read correctly.
    """
    out = items.copy()
    preds, answers, methods = [], [], []
    for raw, display, ours in zip(items["raw_output"], items["display_options"],
                                  items["option_texts"], strict=True):
        parsed = AnswerParser(LETTERS[:len(display)]).parse(raw, list(display))
        pred = None
        if parsed.parsed:
            pred = list(ours).index(display[LETTERS.index(parsed.answer)])
        preds.append(pred)
        answers.append(None if pred is None else LETTERS[pred])
        methods.append(parsed.method)
    out["pred"] = pd.array(preds, dtype="Int64")
    out["answer"], out["parse_method"] = answers, methods
    out["parsed"] = out["pred"].notna().to_numpy()
    out["correct"] = (out["pred"] == out["label"]).fillna(False).to_numpy(dtype=bool)
    return out


@dataclass(frozen=True)
class HarnessComparison:
    """The three tables of a harness comparison."""

    scores: pd.DataFrame
    agreement: pd.DataFrame
    attribution: pd.DataFrame
    notes: list[str]

    def totals(self) -> list[dict]:
        """Each harness's total difference from the reference, per benchmark and metric.

        With the part that different item sets make (``item_set_pp``) and the item counts.
        """
        keys = ["benchmark", "harness", "metric"]
        parts = self.attribution.set_index([*keys, "component"])["value_pp"]
        counts = self.agreement.set_index(keys)[["n_common", "n_reference", "n_harness"]]
        rows = []
        for row in self.attribution[self.attribution["component"] == "total"].to_dict("records"):
            key = tuple(row[k] for k in keys)
            rows.append({**row, "item_set_pp": parts.get((*key, "item_set"), np.nan),
                         **counts.loc[key].to_dict()})
        return rows

    def total_lines(self) -> list[str]:
        """One console line per total; a total the item sets drive says so."""
        lines = []
        native = self.scores[self.scores["formula"] == "native"].set_index(
            ["harness", "benchmark", "metric"])["value"]
        for row in self.totals():
            line = f"{row['benchmark']} {row['metric']}: {row['harness']} - {row['reference']} = "
            if pd.isna(row["value_pp"]):  # a bias score no item counts toward
                empty = [name for name in (row["harness"], row["reference"])
                         if pd.isna(native.get((name, row["benchmark"], row["metric"])))]
                lines.append(line + "not estimable (no value for " + " and ".join(empty or [
                    "either run"]) + ": none of its items counts toward the metric)")
                continue
            line += f"{row['value_pp']:+.2f} pp"
            if row["n_common"] < max(row["n_reference"], row["n_harness"]):
                line += (f" (different item sets: {row['n_common']} common of {row['n_harness']}"
                         f" and {row['n_reference']}; {row['item_set_pp']:+.2f} pp of it from "
                         "the item sets alone, see the attribution)")
            lines.append(line)
        return lines


def _unambiguous(items: pd.DataFrame) -> set[str]:
    """Item keys known for sure (a content match shared by several BBQ rows is not)."""
    return set(items.loc[items["content_matches"] <= 1, "item_key"])


def _common(ref: pd.DataFrame, other: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    keys = sorted(_unambiguous(ref) & _unambiguous(other))
    return (ref.set_index("item_key").loc[keys].reset_index(),
            other.set_index("item_key").loc[keys].reset_index())


def _scores(run: HarnessRun, benchmark: str, items: pd.DataFrame) -> list[dict]:
    rows = []
    for spec in metrics_of(benchmark):
        rows.append({"harness": run.name, "benchmark": benchmark, "metric": spec.name,
                     "formula": "native", "n_items": len(items),
                     "value": native_spec(run.harness, spec).compute(items)})
    if benchmark == "bbq":
        for label, spec in (("upstream_rule_parrish_scaling", BIAS_S_AMB),
                            ("upstream_rule_helm_scaling", BIAS_S_AMB_HELM)):
            rows.append({"harness": run.name, "benchmark": benchmark, "metric": "bias_s_amb",
                         "formula": label, "n_items": len(items), "value": spec.compute(items)})
    return rows


def _pair(ref_run: HarnessRun, run: HarnessRun, benchmark: str, ref_all: pd.DataFrame,
          other_all: pd.DataFrame, n_resamples: int, seed: int, level: float
          ) -> tuple[list[dict], list[dict]]:
    ref_c, other_c = _common(ref_all, other_all)
    if len(ref_c) < 2 and len(ref_c) == min(len(ref_all), len(other_all)):
        raise AnalysisInputError(
            f"{benchmark}: {run.name} and {ref_run.name} share {len(ref_c)} item(s), every "
            "item the smaller run holds; a paired comparison needs 2 or more: run on more "
            "items (e.g. a larger --limit)")
    if len(ref_c) < 2:
        raise AnalysisInputError(
            f"{benchmark}: {run.name} and {ref_run.name} share {len(ref_c)} item(s); run them on "
            "the same items (`lm-eval-ext data manifest` writes a run's item list)")
    design = ClusterDesign.build(ref_c["unit_id"], n_resamples, seed)
    foreign = foreign_extraction(other_c)
    other_ours = reparsed(other_c) if foreign else other_c
    ref_ours = reparsed(ref_c) if foreign_extraction(ref_c) else ref_c
    agreement = {
        "benchmark": benchmark, "reference": ref_run.name, "harness": run.name,
        "n_common": len(ref_c), "n_reference": len(ref_all), "n_harness": len(other_all),
        "answer_agreement": answer_agreement(ref_c["answer"], other_c["answer"]),
        "correctness_agreement": float(np.mean(ref_c["correct"].to_numpy(bool)
                                               == other_c["correct"].to_numpy(bool))),
        "answer_agreement_our_parser": answer_agreement(ref_ours["answer"],
                                                        other_ours["answer"]),
    }
    agreement_rows, attribution = [], []
    for spec in metrics_of(benchmark):
        delta = paired_delta(spec, ref_ours, other_ours, design, level=level)
        agreement_rows.append({**agreement, "metric": spec.name,
                               "reference_value": delta.reference, "harness_value": delta.value,
                               "delta_pp": delta.statistic * spec.scale,
                               "ci_low_pp": delta.ci.low * spec.scale,
                               "ci_high_pp": delta.ci.high * spec.scale,
                               "p_value": delta.pvalue, "test": delta.test,
                               "answers": "lm-eval-ext's parser" if foreign else "harness"})
        o = _steps(run.harness, spec, other_all, other_c, other_ours)
        r = _steps(ref_run.harness, spec, ref_all, ref_c, ref_ours)

        def step(a: str, b: str) -> float:
            return (o[a] - o[b]) - (r[a] - r[b])  # noqa: B023 (used in this iteration only)

        parts = {
            "total": (o["all"] - r["all"], "native scores, each harness on all its items"),
            "item_set": (step("all", "common"), f"all items vs the {len(ref_c)} common ones"),
            "bias_rule": (step("common", "upstream_rule"), "own bias counting vs the upstream "
                          "rule (target_loc), same answers"),
            "s_amb_scaling": (step("upstream_rule", "parrish"), "own S_AMB scaling vs "
                              "1 - acc_ambig, same answers"),
            "answer_extraction": (step("parrish", "our_parser"), "own extraction vs "
                                  "lm-eval-ext's parser on the raw outputs"),
            "prompt_and_decoding": (o["our_parser"] - r["our_parser"], "the rest: prompt text, "
                                    "shots, chat template, decoding" + _path_note(ref_run, run)
                                    + " (paired, common items)"),
        }
        if spec.name != "bias_s_amb":
            del parts["s_amb_scaling"]
        if not spec.name.startswith("bias_"):
            del parts["bias_rule"]
        for component, (value, note) in parts.items():
            ci = delta.ci if component == "prompt_and_decoding" else None
            attribution.append({
                "benchmark": benchmark, "reference": ref_run.name, "harness": run.name,
                "metric": spec.name, "component": component, "value_pp": value * spec.scale,
                "ci_low_pp": ci.low * spec.scale if ci else np.nan,
                "ci_high_pp": ci.high * spec.scale if ci else np.nan, "note": note})
    return agreement_rows, attribution


def _path_note(reference: HarnessRun, run: HarnessRun) -> str:
    """Where the two runs' answers were had differently: what the rest then includes too."""
    if reference.scoring_path == run.scoring_path:
        return ""
    return (f", and the scoring path ({reference.name} {reference.scoring_path}, {run.name} "
            f"{run.scoring_path})")


def _model_name(run: HarnessRun) -> str:
    """``hf/HuggingFaceTB/SmolLM2-135M-Instruct`` -> ``smollm2-135m-instruct``."""
    return run.model.rstrip("/").rsplit("/", 1)[-1].lower()


def _same_model_name(a: HarnessRun, b: HarnessRun) -> bool:
    """Whether two harnesses' model names may name one model.

    One name holds the other: a checkpoint folder adds a hash to the model's name.
    """
    first, second = _model_name(a), _model_name(b)
    return first in second or second in first


def _setting_note(reference: HarnessRun, run: HarnessRun) -> str | None:
    """What besides the harness differs between two runs (None: nothing known).

    Two lm-eval runs of differently named models are refused: a comparison of models is
    ``analyze``'s. Their cards' other settings outside prompt_and_decoding (weights, model
    settings, precision, batch size, task version) are a note; other harnesses name a model
    their own way: names that differ are a note.
    """
    if reference.card is not None and run.card is not None:
        ref_model, model = (str(c.get("model")) for c in (reference.card, run.card))
        if ref_model.lower() != model.lower():
            raise AnalysisInputError(
                f"compare-harness: {run.name} ran model {model} and {reference.name} "
                f"{ref_model}; compare-harness follows one model through several harnesses: "
                "compare models with `lm-eval-ext analyze --reference A=RUN_A --runs B=RUN_B`")
        outside = [axis for axis in differing_axes(reference.card, run.card)
                   if FACTORS[axis] in ("model", "model_settings", "precision", "batch_size",
                                        "task_version")]
        if not outside:
            return None
        shown = "; ".join(f"{axis}: {reference.card.get(axis)} -> {run.card.get(axis)}"
                          for axis in outside)
        return (f"{run.name} differs from {reference.name} in more than its harness ({shown}): "
                "prompt_and_decoding includes it")
    if not _same_model_name(reference, run):
        return (f"{run.name} names its model {run.model} and {reference.name} {reference.model}: "
                "if they are different models, every difference here includes the change of "
                "model, not the harness alone")
    return None


def compare_harnesses(runs: Sequence[HarnessRun], n_resamples: int = 10_000, seed: int = 0,
                      level: float = 0.95) -> HarnessComparison:
    """Compare every run with the first (the reference), per benchmark both evaluated."""
    if len(runs) < 2:
        raise AnalysisInputError("compare-harness needs at least two runs: give two or more "
                                 "HARNESS=PATH (e.g. lm_eval=out/a inspect=logs/b.eval)")
    names = [r.name for r in runs]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise AnalysisInputError(
            f"compare-harness: the name {twice} is given twice; compare different runs, each "
            "named once (HARNESS:NAME=PATH names a second run of one harness)")
    seen: dict[tuple[str, ...], HarnessRun] = {}
    for run in runs:
        if run.fingerprint is not None and run.fingerprint in seen:
            first = seen[run.fingerprint]
            raise AnalysisInputError(
                f"compare-harness: {first.name} ({first.source}) and {run.name} ({run.source}) "
                "are copies of one run (identical results and samples files); a comparison "
                "needs two different runs")
        if run.fingerprint is not None:
            seen[run.fingerprint] = run
    ref_run, others = runs[0], runs[1:]
    ours = set(ref_run.items["benchmark"])
    for run in others:
        theirs = set(run.items["benchmark"])
        if not ours & theirs:
            raise AnalysisInputError(
                f"compare-harness: {run.name} evaluated {', '.join(sorted(theirs))} and "
                f"{ref_run.name} {', '.join(sorted(ours))}: no benchmark in common, so there "
                "is nothing to compare; give runs of the same benchmark")
    scores, agreement, attribution = [], [], []
    notes = [f"{r.name}: {note}" for r in runs for note in r.notes]
    notes += [note for run in others if (note := _setting_note(ref_run, run))]
    for benchmark in sorted(set(ref_run.items["benchmark"])):
        ref_items = ref_run.items[ref_run.items["benchmark"] == benchmark]
        scores += _scores(ref_run, benchmark, ref_items)
        for run in others:
            items = run.items[run.items["benchmark"] == benchmark]
            if items.empty:
                notes.append(f"{run.name} has no {benchmark} items")
                continue
            scores += _scores(run, benchmark, items)
            if run.scoring_path != ref_run.scoring_path:
                notes.append(f"{benchmark}: {run.name}'s answers are {run.scoring_path} and "
                             f"{ref_run.name}'s {ref_run.scoring_path}: prompt_and_decoding "
                             "includes the change of scoring path; compare runs of one path "
                             "to attribute the rest")
            a, b = _pair(ref_run, run, benchmark, ref_items, items, n_resamples, seed, level)
            agreement += a
            attribution += b
    return HarnessComparison(pd.DataFrame(scores), pd.DataFrame(agreement),
                             pd.DataFrame(attribution), notes)


#: every file ``compare-harness --out`` writes (anything else in the folder is the user's)
HARNESS_OUTPUTS = frozenset({"harness_scores.csv", "harness_agreement.csv",
                             "harness_attribution.csv", "harness_runs.json", "harness_report.md"})


def write_harness_report(comparison: HarnessComparison, runs: Sequence[HarnessRun],
                         out: str | Path) -> Path:
    """``harness_*.csv``, ``harness_runs.json`` and ``harness_report.md`` under ``out``."""
    from lm_eval_ext.analysis.report_markdown import markdown_table

    def _table(frame: pd.DataFrame) -> str:
        return markdown_table(frame, max_rows=max(len(frame), 1))  # every row

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    comparison.scores.to_csv(out / "harness_scores.csv", index=False)
    comparison.agreement.to_csv(out / "harness_agreement.csv", index=False)
    comparison.attribution.to_csv(out / "harness_attribution.csv", index=False)
    (out / "harness_runs.json").write_text(json.dumps(
        [{"name": r.name, "harness": r.harness, "source": str(r.source), "model": r.model,
          "n_items": len(r.items), "notes": r.notes} for r in runs], indent=2) + "\n")
    lines = ["# Same model, several harnesses\n",
             f"Reference: **{runs[0].name}** ({runs[0].harness}). Runs: "
             + ", ".join(f"{r.name} ({r.harness}, {r.model}, {len(r.items)} items)"
                         for r in runs) + ".\n",
             "## Scores as each harness defines them\n", _table(comparison.scores),
             "\n## Agreement on the common items (paired, natural-unit cluster bootstrap)\n",
             _table(comparison.agreement),
             "\n## Why the scores differ (parts add up to the total, in points)\n",
             _table(comparison.attribution)]
    if comparison.notes:
        lines += ["\n## Notes\n"] + [f"- {note}\n" for note in comparison.notes]
    report = out / "harness_report.md"
    report.write_text("\n".join(lines), encoding="utf-8")
    return report
