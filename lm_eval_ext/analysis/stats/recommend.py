"""Which cheap protocol keeps the claims? Planning from a paired pilot (no I/O).

A pilot runs the reference protocol and candidate protocols (precision x batch, ...) on the
same nested subset. For every candidate and metric it gives the candidate's shift against the
reference (a paired delta with its interval) and the precision of the candidate's own value
(its level interval). For a subset of ``n`` natural units, each claim ``metric: margin`` asks:

* **decidable**: the level MDE at ``n`` units, ``(z_{1-alpha/2} + z_{power}) * SE_pilot *
  sqrt(n_pilot / n)``, is at most the margin (an effect of the margin would be detected);
* **not expected to move**: the risk that the candidate shifts the metric by more than the
  margin, ``P(|shift| > margin)`` with the shift ~ Normal(pilot delta, pilot SE) (a flat prior),
  is at most ``max_risk``.

The recommendation is the cheapest (candidate, size) that meets both for every claim, cost =
joules per item x items (inference seconds where energy was not measured). Assumptions: SEs
scale as 1/sqrt(units) (natural-unit subsets, as the frozen memberships are drawn), the
pilot's items stand for the instrument, the cost per item does not depend on the subset size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from scipy import stats


@dataclass(frozen=True)
class Claim:
    """A pre-registered claim about a metric, decidable at ``margin_pp`` points."""

    metric: str
    margin_pp: float


@dataclass(frozen=True)
class PilotMetric:
    """One candidate's pilot figures for one metric (points)."""

    delta_pp: float  # candidate minus reference
    delta_se_pp: float  # the delta's standard error
    level_se_pp: float  # the standard error of the candidate's own value
    n_units: int  # natural units in the pilot


@dataclass(frozen=True)
class Candidate:
    """A cheap protocol and its pilot figures."""

    name: str
    cost_per_item: float  # joules (or seconds) per item
    metrics: dict[str, PilotMetric]


@dataclass(frozen=True)
class Option:
    """A candidate at a subset size, and how it fares on every claim."""

    candidate: str
    units: int
    items: int
    cost: float
    mde_pp: dict[str, float]
    risk: dict[str, float]
    decidable: bool
    safe: bool

    @property
    def admissible(self) -> bool:  # noqa: D102
        return self.decidable and self.safe


@dataclass(frozen=True)
class Recommendation:
    """Every option (cheapest first) and the chosen one (None: no option keeps every claim)."""

    options: list[Option]
    chosen: Option | None
    reasons: list[str] = field(default_factory=list)


def se_from_interval(low: float, high: float, level: float = 0.95) -> float:
    """The standard error a normal interval of ``level`` implies."""
    return (high - low) / (2 * stats.norm.ppf(0.5 + level / 2))


def level_mde_pp(level_se_pp: float, n_pilot_units: int, n_units: int, alpha: float = 0.05,
                 power: float = 0.8) -> float:
    """The MDE of a metric's value measured on ``n_units`` (points)."""
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return float(z * level_se_pp * math.sqrt(n_pilot_units / n_units))


def change_risk(delta_pp: float, delta_se_pp: float, margin_pp: float) -> float:
    """``P(|shift| > margin)`` for a shift ~ Normal(delta, se)."""
    if delta_se_pp <= 0:
        return float(abs(delta_pp) > margin_pp)
    upper = stats.norm.sf((margin_pp - delta_pp) / delta_se_pp)
    lower = stats.norm.cdf((-margin_pp - delta_pp) / delta_se_pp)
    return float(upper + lower)


def recommend(candidates: Sequence[Candidate], claims: Sequence[Claim],
              sizes_units: Sequence[int], items_per_unit: float, *, alpha: float = 0.05,
              power: float = 0.8, max_risk: float = 0.2) -> Recommendation:
    """The cheapest candidate x subset size that keeps every claim (see the module)."""
    options, reasons = [], []
    for candidate in candidates:
        missing = [c.metric for c in claims if c.metric not in candidate.metrics]
        if missing:
            reasons.append(f"{candidate.name}: the pilot has no {', '.join(missing)}")
            continue
        risk = {c.metric: change_risk(candidate.metrics[c.metric].delta_pp,
                                      candidate.metrics[c.metric].delta_se_pp, c.margin_pp)
                for c in claims}
        for units in sorted(set(sizes_units)):
            mde = {c.metric: level_mde_pp(candidate.metrics[c.metric].level_se_pp,
                                          candidate.metrics[c.metric].n_units, units, alpha,
                                          power) for c in claims}
            items = round(units * items_per_unit)
            options.append(Option(
                candidate.name, units, items, candidate.cost_per_item * items, mde, risk,
                decidable=all(mde[c.metric] <= c.margin_pp for c in claims),
                safe=all(risk[c.metric] <= max_risk for c in claims)))
    options.sort(key=lambda o: (o.cost, -o.units, o.candidate))
    chosen = next((o for o in options if o.admissible), None)
    if chosen is None and options:
        reasons.append("no candidate at any size keeps every claim: a larger subset or a "
                       "wider margin is needed, or the reference protocol itself")
    return Recommendation(options, chosen, reasons)
