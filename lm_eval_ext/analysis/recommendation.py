"""``lm-eval-ext recommend``'s inputs and card: a pilot's analysis folder in, a card out.

The pilot is an ``lm-eval-ext analyze`` folder (the reference protocol against candidate
protocols on one nested subset): ``deltas.csv`` gives each candidate's shift and level
intervals per metric, ``runs.csv`` the joules (or seconds) per item. A study of several
models gives one pilot per model; a protocol is then chosen for all of them at once. The
statistics are in :mod:`lm_eval_ext.analysis.stats.recommend`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.loader import split_run_argument
from lm_eval_ext.analysis.stats.recommend import (
    Candidate,
    Claim,
    PilotMetric,
    Recommendation,
    se_from_interval,
)

#: the frozen instrument's nested memberships, in natural units (4 items each)
INSTRUMENT_SIZES_UNITS = (62, 125, 250, 500)
ITEMS_PER_UNIT = 4


def _read(folder: Path, name: str) -> pd.DataFrame:
    path = folder / name
    if not path.is_file():
        raise AnalysisInputError(f"recommend: {path} not found; pass the folder that "
                                 "`lm-eval-ext analyze --out` wrote for the pilot")
    return pd.read_csv(path)


def _one_pilot(folder: Path, level: float) -> tuple[list[Candidate], dict[str, Any]]:
    """The candidates of one pilot analysis, and its reference, cost unit and costs."""
    deltas, runs = _read(folder, "deltas.csv"), _read(folder, "runs.csv")
    needed = {"value_ci_low", "value_ci_high"} - set(deltas.columns)
    if needed:
        raise AnalysisInputError(f"recommend: {folder}/deltas.csv has no {sorted(needed)[0]}; "
                                 "analyse the pilot again with this version")
    energy = pd.to_numeric(runs["energy_joules"], errors="coerce")
    seconds = pd.to_numeric(runs["inference_seconds"], errors="coerce")
    items = pd.to_numeric(runs["n_items"])
    joules = dict(zip(runs["run"], energy / items, strict=True))
    time = dict(zip(runs["run"], seconds / items, strict=True))
    reference = runs.loc[runs["is_reference"].astype(bool), "run"].iloc[0]
    overall = deltas[deltas["subgroup_type"] == "all"]
    candidates = []
    for run, rows in overall.groupby("run", sort=False):
        metrics = {}
        for _, row in rows.iterrows():
            metrics[row["metric"]] = PilotMetric(
                delta_pp=float(row["delta_pp"]),
                delta_se_pp=se_from_interval(row["ci_low"], row["ci_high"], level),
                level_se_pp=100 * se_from_interval(row["value_ci_low"], row["value_ci_high"],
                                                   level),
                n_units=int(row["n_clusters"]))
        candidates.append(Candidate(str(run), float("nan"), metrics))
    candidates.insert(0, _reference_candidate(str(reference), overall, level))
    return candidates, {"reference": str(reference), "joules": joules, "seconds": time,
                        "measured_joules": bool((energy > 0).all())}


def _reference_candidate(reference: str, overall: pd.DataFrame, level: float) -> Candidate:
    """The reference protocol itself on a smaller subset: no shift, its own level intervals."""
    first = overall[overall["run"] == overall["run"].iloc[0]]
    return Candidate(reference, float("nan"), {
        row["metric"]: PilotMetric(
            delta_pp=0.0, delta_se_pp=0.0,
            level_se_pp=100 * se_from_interval(row["reference_ci_low"],
                                               row["reference_ci_high"], level),
            n_units=int(row["n_clusters"])) for _, row in first.iterrows()})


def _name(raw: str | Path) -> tuple[str, Path]:
    name, path = split_run_argument(raw)
    return (name or Path(path).name), Path(path)


def pilot_candidates(folders: Sequence[str | Path], level: float = 0.95
                     ) -> tuple[list[Candidate], dict[str, Any]]:
    """The candidates of one or more pilot analyses, and the reference's cost and its unit.

    Several pilots (``NAME=FOLDER``, one per system, e.g. one per model) are one protocol
    choice: a candidate must be in every pilot; its cost per item is the sum over the
    pilots, and its metrics are named ``METRIC@NAME`` (see :func:`claims_for`). The cost
    unit is joules where every pilot run measured energy, else inference seconds.
    """
    pilots = dict(_name(f) for f in folders)
    if len(pilots) < len(folders):
        raise AnalysisInputError("recommend: two pilots have one name; name them NAME=FOLDER")
    read = {name: _one_pilot(folder, level) for name, folder in pilots.items()}
    references = {info["reference"] for _, info in read.values()}
    if len(references) > 1:
        raise AnalysisInputError(f"recommend: the pilots' references differ ("
                                 f"{', '.join(sorted(references))}); give every pilot the "
                                 "same reference protocol and run names")
    names = [c.name for c in next(iter(read.values()))[0]]
    for pilot, (candidates, _) in read.items():
        have = {c.name for c in candidates}
        if have != set(names):
            odd = sorted(have.symmetric_difference(names))[0]
            raise AnalysisInputError(f"recommend: candidate {odd} is not in every pilot "
                                     f"({pilot} differs); run the same candidates per pilot")
    unit = "J" if all(info["measured_joules"] for _, info in read.values()) else "s"
    cost = {name: info["joules" if unit == "J" else "seconds"] for name, (_, info)
            in read.items()}
    several = len(read) > 1
    merged = []
    for name in names:
        metrics = {}
        for pilot, (candidates, _) in read.items():
            own = next(c for c in candidates if c.name == name).metrics
            metrics.update({f"{m}@{pilot}" if several else m: v for m, v in own.items()})
        merged.append(Candidate(name, float(sum(cost[p][name] for p in read)), metrics))
    reference = references.pop()
    return merged, {"reference": reference, "cost_unit": unit, "pilots": list(read),
                    "reference_cost_per_item": float(sum(cost[p][reference] for p in read))}


def claims_for(claims: Sequence[Claim], pilots: Sequence[str]) -> list[Claim]:
    """Each claim for every pilot (``METRIC@PILOT``) when there are several, else as given."""
    if len(pilots) < 2:
        return list(claims)
    return [Claim(f"{c.metric}@{p}", c.margin_pp) for c in claims for p in pilots]


def parse_claims(texts: list[str]) -> list[Claim]:
    """``METRIC=MARGIN_PP`` strings as claims."""
    claims = []
    for text in texts:
        metric, _, margin = text.partition("=")
        try:
            value = float(margin)
        except ValueError:
            value = float("nan")
        if not metric or not value > 0:
            raise AnalysisInputError(f"recommend: claim {text!r} is not METRIC=MARGIN_PP with a "
                                     "positive margin in points (e.g. --claim accuracy=2)")
        claims.append(Claim(metric, value))
    return claims


def card(rec: Recommendation, claims: list[Claim], reference: dict[str, Any],
         full_units: int, settings: dict[str, Any]) -> dict[str, Any]:
    """The recommendation card: the protocol, what it saves, and why (JSON-ready)."""
    unit = reference["cost_unit"]
    baseline = reference["reference_cost_per_item"] * full_units * ITEMS_PER_UNIT
    chosen = rec.chosen
    out: dict[str, Any] = {
        "reference_protocol": reference["reference"], "cost_unit": unit,
        "baseline": {"protocol": reference["reference"], "units": full_units,
                     "items": full_units * ITEMS_PER_UNIT, "cost": baseline},
        "claims": {c.metric: c.margin_pp for c in claims}, "settings": settings,
        "recommended": None, "reasons": rec.reasons,
        "options": [{"candidate": o.candidate, "units": o.units, "items": o.items,
                     "cost": o.cost, "mde_pp": o.mde_pp, "risk_of_change": o.risk,
                     "decidable": o.decidable, "not_expected_to_move": o.safe}
                    for o in rec.options],
        "assumptions": [
            "standard errors scale as 1/sqrt(natural units) (nested natural-unit subsets)",
            "the pilot's items stand for the instrument; the cost per item does not depend on "
            "the subset size",
            "the risk of a changed conclusion is P(|shift| > margin) for a shift ~ Normal("
            "pilot delta, pilot SE): a flat prior on the shift"]}
    if chosen is not None:
        out["recommended"] = {
            "protocol": chosen.candidate, "units": chosen.units, "items": chosen.items,
            "cost": chosen.cost, "saved": baseline - chosen.cost,
            "saved_share": (baseline - chosen.cost) / baseline if baseline else None,
            "mde_pp": chosen.mde_pp, "risk_of_change": chosen.risk}
    return out


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def card_markdown(data: dict[str, Any]) -> str:
    """The card as Markdown."""
    unit = data["cost_unit"]
    lines = ["# Recommendation card", ""]
    chosen = data["recommended"]
    base = data["baseline"]
    if chosen is None:
        lines += ["No candidate keeps every claim: " + "; ".join(data["reasons"]), ""]
    else:
        lines += [f"**Run {chosen['protocol']} on {chosen['items']} items ({chosen['units']} "
                  f"natural units)**: expected {_amount(chosen['cost'])} {unit} against "
                  f"{_amount(base['cost'])} {unit} for {base['protocol']} on the full instrument "
                  f"({100 * chosen['saved_share']:.1f}% saved).", ""]
        lines += ["| claim | margin (pp) | MDE at this size (pp) | risk of a changed conclusion |",
                  "|---|---:|---:|---:|"]
        for metric, margin in data["claims"].items():
            lines.append(f"| {metric} | {margin:g} | {chosen['mde_pp'][metric]:.2f} | "
                         f"{chosen['risk_of_change'][metric]:.3f} |")
        lines.append("")
    lines += ["Assumptions: " + "; ".join(data["assumptions"]) + ".", "",
              f"Options considered: {len(data['options'])} (cheapest first in the JSON)."]
    return "\n".join(lines) + "\n"
