"""``lm-eval-ext recommend``'s inputs and card: pilot analysis folders in, a card out.

A pilot is an ``lm-eval-ext analyze`` folder (the reference protocol against candidate
protocols on one nested subset): ``items.csv`` gives every run's per-item outcomes (each claim's
contrast, shift and standard errors come from them), ``runs.csv`` the joules (or seconds) per
item. A study of several models gives one pilot per model; a protocol is then chosen for all of
them at once, and a claim may be about one model's value or the difference between two models.
The statistics are in :mod:`lm_eval_ext.analysis.stats.recommend` and
:mod:`lm_eval_ext.analysis.stats.pilot_contrasts`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.loader import split_run_argument
from lm_eval_ext.analysis.metrics import paired_metrics
from lm_eval_ext.analysis.pilot_checks import (
    DESIGN_COLUMNS,
    check_complete,
    check_distinct,
    check_margin,
    check_one_model,
    check_same_design,
    check_same_items,
    read_table,
)
from lm_eval_ext.analysis.stats.pilot_contrasts import claim_estimates
from lm_eval_ext.analysis.stats.recommend import (
    MIN_PILOT_UNITS,
    Candidate,
    Claim,
    Declared,
    Recommendation,
)
from lm_eval_ext.metering.modes import mode_difference
from lm_eval_ext.metering.uncertainty import ratio_interval

#: the frozen instrument's nested memberships, in natural units (4 items each)
INSTRUMENT_SIZES_UNITS = (62, 125, 250, 500)
ITEMS_PER_UNIT = 4
#: tasks whose items are a membership of the frozen instrument (drawn without replacement)
INSTRUMENT_TASK = re.compile(r"bbq_(subset_\w+|instrument)(_loglik)?")


def population_units(design: dict[str, str]) -> int | None:
    """The frozen instrument's units where the pilot's task is one of its memberships.

    None otherwise: an unlimited population, whose with-replacement bound is larger.
    """
    tasks = [t for t in design.get("tasks", "").split(",") if t]
    if tasks and all(INSTRUMENT_TASK.fullmatch(t.strip()) for t in tasks):
        return max(INSTRUMENT_SIZES_UNITS)
    return None


@dataclass(frozen=True)
class MeasuredError:
    """The largest error at the margin measured for ``recommend``'s own choice over a family.

    Beside it, the error pooled over the family's partly hidden cells (those nearest alpha).
    """

    rate: float
    ci95: tuple[float, float]
    pooled_partly_hidden: float
    pooled_partly_hidden_ci95: tuple[float, float]
    alpha: float
    cells: int
    pilots: int
    source: str
    family: str = ("partly hidden changes (a few units broken outright, the rest of the shift "
                   "one way), all-or-nothing changes with churn, unit-clustered changes, pilots "
                   "of 45 to 250 units drawn without replacement from a 500-unit instrument; "
                   "one candidate, and five in a declared order")


#: ``benchmarks/recommend_simulation.py``'s worst null cell of 2026-12-05 and the partly hidden
#: cells pooled; ``tests/test_recommend.py`` reads them back from the file
MEASURED_ERROR = MeasuredError(
    rate=0.0415, ci95=(0.0332, 0.0512), pooled_partly_hidden=0.018166666666666668,
    pooled_partly_hidden_ci95=(0.0165, 0.0199), alpha=0.05, cells=15,
    pilots=27000,
    source="benchmarks/results/recommend_2026-12-05/recommend_simulation.json")


class Pilot:
    """One pilot analysis folder: its runs' items (same items, same order), reference, costs."""

    def __init__(self, name: str, folder: Path) -> None:
        check_complete(folder)
        runs, items = read_table(folder, "runs.csv"), read_table(folder, "items.csv")
        self.name, self.folder = name, folder
        self.reference = str(runs.loc[runs["is_reference"].astype(bool), "run"].iloc[0])
        check_one_model(runs, self.reference, folder)
        check_same_items(folder, self.reference)
        self.runs = [str(r) for r in runs["run"]]
        frames = {str(run): group.sort_values("item_key").reset_index(drop=True)
                  for run, group in items.groupby("run", sort=False)}
        if set(frames) != set(self.runs):
            raise AnalysisInputError(f"recommend: {folder}/items.csv and runs.csv name different "
                                     "runs; pass a folder written by one `analyze`")
        keys = frames[self.reference]["item_key"].tolist()
        for run, frame in frames.items():
            if frame["item_key"].tolist() != keys:
                raise AnalysisInputError(f"recommend: in {folder}/items.csv run {run} holds "
                                         f"other items than the reference {self.reference}; "
                                         "analyse runs of one item set")
        self.items = frames
        energy = pd.to_numeric(runs["energy_joules"], errors="coerce")
        n_items = pd.to_numeric(runs["n_items"])
        self.joules = dict(zip(self.runs, energy / n_items, strict=True))
        self.seconds = dict(zip(self.runs, pd.to_numeric(runs["inference_seconds"],
                                                         errors="coerce") / n_items, strict=True))
        self.measured_joules = bool((energy > 0).all())
        ses = pd.to_numeric(runs.reindex(columns=["energy_joules_se"])["energy_joules_se"],
                            errors="coerce")
        #: each run's within-run SE of its joules per item (NaN: none) and execution mode
        self.joules_se = dict(zip(self.runs, ses / n_items, strict=True))
        self.modes = dict(zip(self.runs, runs.reindex(columns=["execution_mode"])[
            "execution_mode"].fillna("").astype(str), strict=True))
        files = runs.reindex(columns=["results_sha256", "samples_sha256"]).fillna("")
        #: each run's files (SHA-256 of results and samples): the pilot's content
        self.fingerprints = {f"{r}|{s}" for r, s in files.itertuples(index=False) if r or s}
        reference = runs[runs["run"].astype(str) == self.reference].iloc[0]
        #: the reference run's task, scoring path and item set (pilots of one study share them)
        self.design = {column: "" if pd.isna(reference.get(column)) else str(reference[column])
                       for column in DESIGN_COLUMNS}
        self.metrics = {spec.name: spec for spec in paired_metrics(list(frames.values()))}


def read_pilots(folders: Sequence[str | Path]) -> dict[str, Pilot]:
    """The pilots by name (``NAME=FOLDER``; a bare folder is named after itself).

    They must share the reference and the candidate runs.
    """
    named = [split_run_argument(f) for f in folders]
    names = [name or Path(path).name for name, path in named]
    paths = [Path(path).resolve() for _, path in named]
    if len(set(paths)) < len(paths):
        twice = next(p for p in paths if paths.count(p) > 1)
        raise AnalysisInputError(f"recommend: the pilot {twice} is given twice; give each "
                                 "model's own pilot once (one analyze folder per model)")
    if len(set(names)) < len(names):
        raise AnalysisInputError("recommend: two pilots have one name; name them NAME=FOLDER")
    pilots = {n: Pilot(n, Path(path)) for n, (_, path) in zip(names, named, strict=True)}
    check_distinct({name: pilot.fingerprints for name, pilot in pilots.items()})
    check_same_design({name: pilot.design for name, pilot in pilots.items()})
    references = {p.reference for p in pilots.values()}
    if len(references) > 1:
        raise AnalysisInputError(f"recommend: the pilots' references differ ("
                                 f"{', '.join(sorted(references))}); give every pilot the "
                                 "same reference protocol and run names")
    first = next(iter(pilots.values()))
    for pilot in pilots.values():
        if set(pilot.runs) != set(first.runs):
            odd = sorted(set(pilot.runs).symmetric_difference(first.runs))[0]
            raise AnalysisInputError(f"recommend: candidate {odd} is not in every pilot "
                                     f"({pilot.name} differs); run the same candidates per pilot")
    return pilots


def _contrast(text: str, pilots: Sequence[str]) -> tuple[str, ...] | None:
    """``A`` or ``A-B`` as pilot names (a name may itself hold ``-``); None if neither."""
    if text in pilots:
        return (text,)
    for cut in range(1, len(text)):
        if text[cut] == "-" and text[:cut] in pilots and text[cut + 1:] in pilots:
            return (text[:cut], text[cut + 1:])
    return None


def parse_claims(texts: Sequence[str], pilots: dict[str, Pilot]) -> list[Claim]:
    """``METRIC[@A[-B]]=MARGIN_PP`` strings as claims, checked against the pilots.

    A plain metric is a claim about each model's value when there are several pilots; ``@A``
    is model A's value and ``@A-B`` the difference A minus B.
    """
    names = list(pilots)
    metrics = sorted(set.intersection(*(set(p.metrics) for p in pilots.values())))
    targets = [text.partition("=")[0].strip() for text in texts]
    twice = sorted({t for t in targets if targets.count(t) > 1})
    if twice:  # a second margin for one claim would silently replace the first
        raise AnalysisInputError(f"recommend: --claim {twice[0]} is given twice; give each "
                                 "claim once, with the one margin it must resolve")
    claims = []
    for text in texts:
        target, _, margin = text.partition("=")
        try:
            value = float(margin)
        except ValueError:
            value = float("nan")
        metric, at, contrast = target.partition("@")
        if not metric or not value > 0 or (at and not contrast):
            raise AnalysisInputError(f"recommend: claim {text!r} is not METRIC=MARGIN_PP with a "
                                     "positive margin in points (e.g. --claim accuracy=2, "
                                     "--claim accuracy@gemma-smollm=5)")
        if metric not in metrics:
            raise AnalysisInputError(f"recommend: claim {text!r}: the pilot has no metric "
                                     f"{metric!r}; it has {', '.join(metrics)}")
        _check_defined(text, metric, pilots)
        if at:
            parts = _contrast(contrast, names)
            if parts is None or len(set(parts)) < len(parts):
                raise AnalysisInputError(
                    f"recommend: claim {text!r}: {contrast!r} is not a pilot (A) or a "
                    f"difference of two pilots (A-B); the pilots are {', '.join(names)}")
            check_margin(text, pilots[names[0]].metrics[metric], value, len(parts))
            claims.append(Claim(metric, value, parts))
            continue
        check_margin(text, pilots[names[0]].metrics[metric], value, 1)
        if len(names) > 1:
            claims += [Claim(metric, value, (name,)) for name in names]
        else:
            claims.append(Claim(metric, value))
    return claims


def _check_defined(text: str, metric: str, pilots: dict[str, Pilot]) -> None:
    """A claim's metric has a value on each pilot's reference items (a denominator above 0)."""
    for name, pilot in pilots.items():
        items = pilot.items[pilot.reference]
        if not math.isfinite(pilot.metrics[metric].compute(items)):
            raise AnalysisInputError(
                f"recommend: claim {text!r}: {metric} is undefined on pilot {name}'s "
                f"{len(items)} item(s) (none of them is one it counts), so no margin can be "
                "resolved; claim a metric the pilot measures, or analyse a pilot of more items")


def pilot_candidates(pilots: dict[str, Pilot], claims: Sequence[Claim], *,
                     n_resamples: int = 2000, seed: int = 0
                     ) -> tuple[list[Candidate], dict[str, Any]]:
    """Every protocol (the reference first) with its claims' estimates and cost per item.

    The cost per item is summed over the pilots, in joules where every pilot run measured
    energy, else inference seconds.
    """
    first = next(iter(pilots.values()))
    specs = {m: first.metrics[m] for m in {c.metric for c in claims}}
    try:
        estimates = claim_estimates({n: p.items for n, p in pilots.items()}, first.reference,
                                    claims, specs, n_resamples, seed)
    except ValueError as exc:
        raise AnalysisInputError(f"recommend: {exc}") from exc
    unit = "J" if all(p.measured_joules for p in pilots.values()) else "s"
    cost = {run: float(sum((p.joules if unit == "J" else p.seconds)[run]
                           for p in pilots.values())) for run in first.runs}
    order = [first.reference, *(r for r in first.runs if r != first.reference)]
    candidates = [Candidate(run, cost[run], estimates[run]) for run in order]
    se = {run: math.sqrt(sum(p.joules_se[run] ** 2 for p in pilots.values()))
          if unit == "J" else math.nan for run in first.runs}
    return candidates, {"reference": first.reference, "cost_unit": unit,
                        "pilots": list(pilots), "reference_cost_per_item": cost[first.reference],
                        "cost_per_item": cost, "cost_per_item_se": se,
                        "modes": {run: first.modes[run] for run in first.runs}}


def recommend_from_pilots(folders: Sequence[str | Path], claim_texts: Sequence[str], *,
                          sizes_units: Sequence[int] = INSTRUMENT_SIZES_UNITS,
                          alpha: float = 0.05, power: float = 0.8, n_resamples: int = 2000,
                          seed: int = 0, order: Sequence[str] = (),
                          weights: Mapping[str, float] | None = None) -> dict[str, Any]:
    """``lm-eval-ext recommend`` as a function: pilot folders and claims in, the card out.

    ``order`` (a fixed sequence) or ``weights`` (weighted Holm) spend alpha over the
    candidates as declared before the pilot; by default Holm.
    """
    from lm_eval_ext.analysis.stats.recommend import recommend

    pilots = read_pilots(folders)
    claims = parse_claims(claim_texts, pilots)
    declared = Declared(tuple(order), dict(weights or {}))
    candidates, reference = pilot_candidates(pilots, claims, n_resamples=n_resamples,
                                             seed=seed)
    check_declared(declared, [c.name for c in candidates], reference["reference"])
    population = population_units(next(iter(pilots.values())).design)
    result = recommend(candidates, claims, sizes_units, ITEMS_PER_UNIT,
                       reference=reference["reference"], alpha=alpha, power=power,
                       declared=declared, population_units=population)
    return card(result, claims, reference, max(sizes_units), {
        "alpha": alpha, "power": power, "sizes_units": list(sizes_units),
        "pilots": [str(f) for f in folders], "n_resamples": n_resamples, "seed": seed,
        "alpha_rule": declared.rule, "population_units": population})


def check_declared(declared: Declared, runs: Sequence[str], reference: str) -> None:
    """A declared order or weights name candidate runs of the pilot, with weights > 0."""
    named = [*declared.order, *declared.weights]
    candidates = [r for r in runs if r != reference]
    odd = next((n for n in named if n not in candidates), None)
    if odd is not None:
        raise AnalysisInputError(f"recommend: {odd!r} in --order/--weights is not a candidate "
                                 f"run of the pilot; name some of {', '.join(candidates)}")
    if declared.order and declared.weights:
        raise AnalysisInputError("recommend: give --order or --weights, not both")
    twice = next((n for n in declared.order if declared.order.count(n) > 1), None)
    if twice is not None:
        raise AnalysisInputError(f"recommend: --order names {twice} twice; a fixed sequence "
                                 "tests each candidate once: name each run once, in the order "
                                 "to test them")
    if any(not (w > 0 and math.isfinite(w)) for w in declared.weights.values()):
        raise AnalysisInputError("recommend: --weights must be positive numbers (e.g. "
                                 "--weights int8=0.8,nf4=0.2)")


def guarantee(rec: Recommendation, reference: str, n_claims: int, smaller: bool = True,
              rule: str = "Holm") -> str:
    """What the card promises about the chosen protocol (selection and every claim included).

    ``smaller``: the chosen size is below the full instrument; ``rule``: how alpha is spent
    over the candidates.
    """
    tested = len(rec.certificates)
    if rec.chosen is None:
        return "nothing is recommended, so nothing is promised"
    if rec.chosen.candidate == reference:
        return ("the reference protocol itself" + (" on a smaller subset" if smaller else "")
                + ": no protocol shift; each claim is decidable at its margin (the MDE at "
                "this size, from the pilot)")
    m = MEASURED_ERROR
    claims = f"the {n_claims} named claims'" if n_claims > 1 else "the named claim's"
    return (f"P(the recommended protocol shifts {claims} contrast by its margin or more) <= "
            f"{rec.alpha:g}: each claim by a studentised bootstrap "
            "(bootstrap-t) equivalence test, never below the exact chance that the pilot missed "
            "every unit a protocol would have to change, and allowing for a shift partly hidden "
            "in units the pilot did not draw or carried by units it caught moving fully; all "
            f"claims jointly (intersection-union); {rule} over {tested} candidate "
            f"protocol{'s' * (tested > 1)}, so choosing the cheapest certified one is covered. "
            "The floor is exact, the bootstrap-t "
            f"asymptotic: the largest error measured for this choice over {m.cells} simulated "
            f"hard cases ({m.pilots:,} pilots) at alpha {m.alpha:g} was {100 * m.rate:.1f}% "
            f"(95% CI {100 * m.ci95[0]:.1f}-{100 * m.ci95[1]:.1f}%), and "
            f"{100 * m.pooled_partly_hidden:.1f}% (95% CI "
            f"{100 * m.pooled_partly_hidden_ci95[0]:.1f}-"
            f"{100 * m.pooled_partly_hidden_ci95[1]:.1f}%) pooled over the partly hidden cases "
            f"({m.source})")


#: what the guarantee is about, and what it is not
COVERED = ("the shift of each named claim's contrast (its value, or a difference between "
           "models) against the reference protocol")
NOT_COVERED = ("a significance verdict, a ranking or a subgroup, unless it is named as a claim",
               "the subset size: it is a power estimate (each claim's MDE at that size is at "
               "most its margin at the planned power), not part of the guarantee")


def card(rec: Recommendation, claims: Sequence[Claim], reference: dict[str, Any],
         full_units: int, settings: dict[str, Any]) -> dict[str, Any]:
    """The recommendation card: the protocol, what it saves, and why (JSON-ready)."""
    unit = reference["cost_unit"]
    baseline = reference["reference_cost_per_item"] * full_units * ITEMS_PER_UNIT
    chosen = rec.chosen
    out: dict[str, Any] = {
        "reference_protocol": reference["reference"], "cost_unit": unit,
        "baseline": {"protocol": reference["reference"], "units": full_units,
                     "items": full_units * ITEMS_PER_UNIT, "cost": baseline},
        "claims": {c.name: c.margin_pp for c in claims}, "settings": settings,
        "recommended": None, "reasons": rec.reasons,
        "guarantee": guarantee(rec, reference["reference"], len(claims),
                               chosen is None or chosen.units < full_units,
                               settings.get("alpha_rule", "Holm")),
        "covered": COVERED, "not_covered": list(NOT_COVERED),
        "measured_error": {"largest": MEASURED_ERROR.rate, "ci95": list(MEASURED_ERROR.ci95),
                           "pooled_partly_hidden": MEASURED_ERROR.pooled_partly_hidden,
                           "pooled_partly_hidden_ci95":
                               list(MEASURED_ERROR.pooled_partly_hidden_ci95),
                           "alpha": MEASURED_ERROR.alpha, "cells": MEASURED_ERROR.cells,
                           "pilots": MEASURED_ERROR.pilots,
                           "family": MEASURED_ERROR.family, "source": MEASURED_ERROR.source},
        "units_to_certify": rec.units_to_certify,
        "certificates": {name: {"p_value": c.pvalue, "p_adjusted": c.pvalue_adjusted,
                                "p_per_claim": c.pvalues, "certified": c.certified}
                         for name, c in rec.certificates.items()},
        "options": [{"candidate": o.candidate, "units": o.units, "items": o.items,
                     "cost": o.cost, "mde_pp": o.mde_pp, "decidable": o.decidable,
                     "certified": o.certified} for o in rec.options],
        "assumptions": [
            "standard errors scale as 1/sqrt(natural units) (nested natural-unit subsets)",
            "the pilot's units are a random sample of the instrument's (the exact floor and "
            "the bootstrap both rest on it)" + (
                f", drawn without replacement from its {settings['population_units']} units: a "
                "membership is one fixed draw of the frozen instrument, the same for every user "
                "of that membership, so the guarantee is over the draw, not for each membership"
                if settings.get("population_units") else "") + "; the cost per item does not "
            "depend on the subset size",
            "how far one unit's answers can move a claim is read off the pilot's units: no unit "
            "of the instrument moves it more than the pilot's most movable one (BBQ's units "
            "all hold 4 items); for a bias score, to first order at the pilot's counts",
            f"a pilot of fewer than {MIN_PILOT_UNITS} natural units certifies nothing"]}
    if chosen is not None:
        out["recommended"] = {
            "protocol": chosen.candidate, "units": chosen.units, "items": chosen.items,
            "cost": chosen.cost, "saved": baseline - chosen.cost,
            "saved_share": (baseline - chosen.cost) / baseline if baseline else None,
            **saving_interval(reference, chosen.candidate, chosen.cost, baseline),
            "mde_pp": chosen.mde_pp,
            "p_adjusted": rec.certificates[chosen.candidate].pvalue_adjusted
            if chosen.candidate in rec.certificates else None}
    return out


def saving_interval(reference: dict[str, Any], candidate: str, cost: float,
                    baseline: float) -> dict[str, Any]:
    """The saved share's 95% interval (the per-item costs' within-run errors) and its caveats.

    ``saved_share_ci95`` is None where a side has no interval (derived energy, a short window,
    seconds as the cost); ``cost_note`` names a difference in execution mode.
    """
    per_item, se = reference.get("cost_per_item", {}), reference.get("cost_per_item_se", {})
    ref = reference["reference"]
    scale = cost / per_item[candidate] if per_item.get(candidate) else math.nan
    low, high = ratio_interval(cost, se.get(candidate, math.nan) * scale, baseline,
                               se.get(ref, math.nan) * baseline / per_item[ref]
                               if per_item.get(ref) else None)
    bad = low is None or not all(map(math.isfinite, (low, high)))
    modes = reference.get("modes", {})
    note = mode_difference(modes.get(ref), modes.get(candidate))
    return {"saved_share_ci95": None if bad else [1 - high, 1 - low],
            "cost_note": f"{note}: the saving measures the mode as well as the change"
            if note else None}


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def card_markdown(data: dict[str, Any]) -> str:
    """The card as Markdown."""
    unit = data["cost_unit"]
    lines = ["# Recommendation card", ""]
    chosen = data["recommended"]
    base = data["baseline"]
    if chosen is None:
        lines += ["No option is recommended: " + "; ".join(data["reasons"]) + ".", ""]
    else:
        lines += [f"**Run {chosen['protocol']} on {chosen['items']} items ({chosen['units']} "
                  f"natural units)**: expected {_amount(chosen['cost'])} {unit} against "
                  f"{_amount(base['cost'])} {unit} for {base['protocol']} on the full instrument "
                  f"({100 * chosen['saved_share']:.1f}% saved"
                  + (f", 95% interval for measurement noise {100 * chosen['saved_share_ci95'][0]:.1f}-"
                     f"{100 * chosen['saved_share_ci95'][1]:.1f}%"
                     if chosen.get("saved_share_ci95") else "")
                  + ")." + (f" {chosen['cost_note']}." if chosen.get("cost_note") else ""), "",
                  f"Guarantee: {data['guarantee']}.", "",
                  f"Covered: {data['covered']}. Not covered: "
                  + "; ".join(data["not_covered"]) + ".", ""]
        certificate = data["certificates"].get(chosen["protocol"])
        lines += ["| claim | margin (pp) | MDE at this size (pp) | equivalence p (this claim) |",
                  "|---|---:|---:|---:|"]
        for name, margin in data["claims"].items():
            p = f"{certificate['p_per_claim'][name]:.4f}" if certificate else "(no shift)"
            lines.append(f"| {name} | {margin:g} | {chosen['mde_pp'][name]:.2f} | {p} |")
        lines.append("")
        if data["reasons"]:
            lines += ["Note: " + "; ".join(data["reasons"]) + ".", ""]
    if data["certificates"]:
        lines += [f"Candidates (equivalence p adjusted by {data['settings'].get('alpha_rule', 'Holm')}"
                  ", certified at <= alpha = "
                  f"{data['settings']['alpha']:g}): " + ", ".join(
                      f"{name} {c['p_adjusted']:.3g}{' (certified)' if c['certified'] else ''}"
                      for name, c in data["certificates"].items()) + ".", ""]
    lines += ["Assumptions: " + "; ".join(data["assumptions"]) + ".", "",
              f"Options considered: {len(data['options'])} (cheapest first in the JSON)."]
    return "\n".join(lines) + "\n"
