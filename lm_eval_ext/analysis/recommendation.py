"""``lm-eval-ext recommend``'s inputs and card: a pilot's analysis folder in, a card out.

The pilot is an ``lm-eval-ext analyze`` folder (the reference protocol against candidate
protocols on one nested subset): ``deltas.csv`` gives each candidate's shift and level
intervals per metric, ``runs.csv`` the joules (or seconds) per item. The statistics are in
:mod:`lm_eval_ext.analysis.stats.recommend`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from lm_eval_ext.analysis.errors import AnalysisInputError
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


def pilot_candidates(folder: Path, level: float = 0.95
                     ) -> tuple[list[Candidate], dict[str, Any]]:
    """The candidates of a pilot analysis, and the reference's cost and its unit."""
    deltas, runs = _read(folder, "deltas.csv"), _read(folder, "runs.csv")
    needed = {"value_ci_low", "value_ci_high"} - set(deltas.columns)
    if needed:
        raise AnalysisInputError(f"recommend: {folder}/deltas.csv has no {sorted(needed)[0]}; "
                                 "analyse the pilot again with this version")
    energy = pd.to_numeric(runs["energy_joules"], errors="coerce")
    unit = "J" if (energy > 0).all() else "s"
    total = energy if unit == "J" else pd.to_numeric(runs["inference_seconds"], errors="coerce")
    per_item = dict(zip(runs["run"], total / pd.to_numeric(runs["n_items"]), strict=True))
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
        candidates.append(Candidate(str(run), float(per_item[run]), metrics))
    return candidates, {"reference": str(reference), "cost_unit": unit,
                        "reference_cost_per_item": float(per_item[reference])}


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
