"""Which cheap protocol keeps the claims? Certified from a paired pilot (no I/O).

A pilot runs the reference protocol and candidate protocols (precision x batch, ...) on the
same natural units. A claim ``metric[@contrast]: margin`` is about one contrast: a metric's
value for one model, or the difference between two models (``accuracy@gemma-smollm``). For
every candidate and claim the pilot gives the candidate's **shift** of the contrast against the
reference protocol (its estimate, standard error and studentised bootstrap draws), the
contrast's **leverage** and the standard error of the contrast's own value under the candidate
(see :mod:`.pilot_contrasts`).

* **Certified** (the error-controlled part): a candidate is certified when every claim's shift
  is shown to lie inside ``(-margin, +margin)``. A claim's p (see :mod:`.equivalence`) allows
  for a shift carried by broken units (each moving the contrast by the most a unit can): for
  every broken share ``s`` and every count ``k`` of them the pilot may have caught (no more than
  it shows), the chance of catching exactly ``k`` (hypergeometric where the pilot is a draw of
  the frozen instrument) times a studentised bootstrap (bootstrap-t) test of the pilot less
  those ``k`` units against the rest's share of the margin, over the share of alpha that
  scenario keeps; at ``s = 0`` the plain bootstrap-t, at the largest ``s`` the exact
  hidden-change floor. A candidate's p is the largest of its claims' (intersection-union: all
  claims must pass, so no correction over claims is needed), and the candidates' p-values are
  adjusted by Holm, or by a fixed sequence or weighted Holm declared before the pilot
  (:mod:`.alpha_order`), so that with probability at least ``1 - alpha`` *no* truly
  non-equivalent candidate is certified: the guarantee holds for whichever certified option is
  chosen afterwards (the choice of the cheapest is covered) and jointly over every claim and
  model.
* **Decidable** (planning, not a decision): the MDE of the claim's contrast at ``n`` units,
  ``(z_{1-alpha/2} + z_{power}) * SE_pilot * sqrt(n_pilot / n)``, is at most the margin.

The floor is exact; the bootstrap-t is a large-sample method whose error at the margin
``benchmarks/recommend_simulation.py`` measures over a family of hard nulls (sparse,
one-directional, unit-clustered, all-or-nothing and partly hidden changes, bias scores,
between-model contrasts), drawn from a 500-unit instrument as the product's pilots are. Pilots
under :data:`MIN_PILOT_UNITS` certify nothing. The
recommendation is the cheapest decidable option among the certified candidates and the
reference protocol (which has no shift), cost = cost per item x items. Assumptions: SEs scale
as 1/sqrt(units) (nested natural-unit subsets), the pilot's units are a random sample of the
instrument's, no unit of the instrument can move a claim more than the pilot's most movable
unit (BBQ's units all hold 4 items), the cost per item does not depend on the subset size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from lm_eval_ext.analysis.stats.alpha_order import adjusted_pvalues
from lm_eval_ext.analysis.stats.equivalence import (
    Visible,
    caught_probabilities,
    equivalence_pvalue,
    hidden_change_pvalue,
    rest_margins,
    scenario_weight,
    share_grid,
)

#: below this many natural units the shift's standard error is itself too uncertain to certify
MIN_PILOT_UNITS = 20


@dataclass(frozen=True)
class Claim:
    """A pre-registered claim: a metric's contrast, decidable at ``margin_pp`` points.

    ``pilots`` names the contrast: ``()`` the only pilot's value, ``("a",)`` model a's value,
    ``("a", "b")`` model a minus model b.
    """

    metric: str
    margin_pp: float
    pilots: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``metric``, ``metric@a`` or ``metric@a-b``."""
        return f"{self.metric}@{'-'.join(self.pilots)}" if self.pilots else self.metric

    @property
    def n_models(self) -> int:
        """How many models' shifts add up in the contrast."""
        return max(len(self.pilots), 1)


@dataclass(frozen=True)
class ClaimEstimate:
    """One candidate's pilot figures for one claim's contrast (points)."""

    shift_pp: float  # candidate minus reference, of the contrast
    shift_se_pp: float  # delta-method cluster-robust (CR1) standard error of the shift
    level_se_pp: float  # the standard error of the contrast's value under the candidate
    n_units: int  # natural units in the pilot
    identical: bool = False  # no item changed against the reference in any pilot of the claim
    #: the most the contrast moves per share of units changing answers (None: not known)
    leverage_pp: float | None = None
    #: studentised bootstrap draws (shift* - shift) / se* (None: no resamples)
    t_draws: np.ndarray | None = field(default=None, compare=False, repr=False)
    #: how many units moved the contrast up / down by the full leverage
    full_up: int = 0
    full_down: int = 0
    #: the pilot less its 1, 2, ... units moved furthest up / down (see :mod:`.equivalence`)
    caught_up: tuple[Visible, ...] = field(default=(), compare=False, repr=False)
    caught_down: tuple[Visible, ...] = field(default=(), compare=False, repr=False)

    @property
    def visible(self) -> Visible:
        """What the whole pilot shows."""
        return Visible(self.shift_pp, self.shift_se_pp, self.n_units, self.identical,
                       self.t_draws)


@dataclass(frozen=True)
class Candidate:
    """A protocol, its cost per item and its pilot figures per claim name."""

    name: str
    cost_per_item: float  # joules (or seconds) per item
    estimates: dict[str, ClaimEstimate]


@dataclass(frozen=True)
class Certificate:
    """A candidate's equivalence tests: per claim, the candidate's and Holm's p."""

    candidate: str
    pvalues: dict[str, float]
    pvalue: float  # the largest of the claims' (intersection-union)
    pvalue_adjusted: float
    certified: bool


@dataclass(frozen=True)
class Option:
    """A protocol at a subset size, and how it fares on every claim."""

    candidate: str
    units: int
    items: int
    cost: float
    mde_pp: dict[str, float]
    decidable: bool
    certified: bool

    @property
    def admissible(self) -> bool:  # noqa: D102
        return self.decidable and self.certified


@dataclass(frozen=True)
class Recommendation:
    """Every option (cheapest first), the chosen one, and each candidate's certificate.

    ``chosen`` may be the reference protocol on a smaller subset; None: no option is both
    certified and decidable. ``units_to_certify``: where no candidate was certified, about how
    many pilot units would certify the most promising one were its true shift 0 (with the
    planned power); None where one was certified or no estimate exists.
    """

    options: list[Option]
    chosen: Option | None
    certificates: dict[str, Certificate]
    alpha: float
    units_to_certify: int | None = None
    reasons: list[str] = field(default_factory=list)


def se_from_interval(low: float, high: float, level: float = 0.95) -> float:
    """The standard error a normal interval of ``level`` implies."""
    return (high - low) / (2 * stats.norm.ppf(0.5 + level / 2))


def level_mde_pp(level_se_pp: float, n_pilot_units: int, n_units: int, alpha: float = 0.05,
                 power: float = 0.8) -> float:
    """The MDE of a contrast measured on ``n_units`` (points)."""
    z = stats.norm.isf(alpha / 2) + stats.norm.ppf(power)  # isf: 1 - tiny alpha rounds to 1
    return float(z * level_se_pp * math.sqrt(n_pilot_units / n_units))


def claim_pvalue(estimate: ClaimEstimate, claim: Claim,
                 population_units: int | None = None) -> float:
    """The equivalence p of one claim (1: this pilot cannot certify it; see :mod:`.equivalence`).

    ``population_units``: the instrument the pilot's units were drawn from without replacement
    (None: an unlimited one, which only makes the bound larger).
    """
    if estimate.n_units < MIN_PILOT_UNITS:
        return 1.0
    return equivalence_pvalue(estimate.visible, claim.margin_pp, estimate.leverage_pp,
                              caught_up=estimate.caught_up, caught_down=estimate.caught_down,
                              full_up=estimate.full_up, full_down=estimate.full_down,
                              population_units=population_units)


@dataclass(frozen=True)
class Declared:
    """How alpha is spent over the candidates, named before the pilot (default: Holm)."""

    order: tuple[str, ...] = ()  # a fixed sequence
    weights: dict[str, float] = field(default_factory=dict)  # weighted Holm

    @property
    def rule(self) -> str:
        """The rule's name as the card prints it."""
        if self.order:
            return f"a fixed sequence declared before the pilot ({', '.join(self.order)})"
        if self.weights:
            return "weighted Holm with weights declared before the pilot (" + ", ".join(
                f"{n} {w:g}" for n, w in self.weights.items()) + ")"
        return "Holm"


def certify(candidates: Sequence[Candidate], claims: Sequence[Claim], alpha: float,
            reference: str, declared: Declared = Declared(),
            population_units: int | None = None) -> dict[str, Certificate]:
    """Every non-reference candidate's certificate (Holm, or the declared order or weights)."""
    tested = [c for c in candidates if c.name != reference]
    per_claim = [{k.name: claim_pvalue(c.estimates[k.name], k, population_units)
                  for k in claims} for c in tested]
    joint = np.array([max(p.values()) for p in per_claim], float)
    adjusted = adjusted_pvalues([c.name for c in tested], joint, order=declared.order,
                                weights=declared.weights)
    return {c.name: Certificate(c.name, p, float(j), float(a), bool(a <= alpha))
            for c, p, j, a in zip(tested, per_claim, joint, adjusted, strict=True)}


def projected_pvalue(estimate: ClaimEstimate, claim: Claim, n_units: int, power: float,
                     population_units: int | None = None) -> float:
    """The claim's p at ``n_units`` were the true shift 0, at the planned ``power``.

    The deciding test's terms (:mod:`.equivalence`, no unit caught) with the shift at the
    ``(1 + power) / 2`` quantile of its spread and the pilot's standard error scaled to
    ``n_units``; identical outputs leave only the floor.
    """
    floor = hidden_change_pvalue(claim.margin_pp, estimate.leverage_pp, n_units,
                                 population_units)
    weight = scenario_weight(0)
    if estimate.identical:
        return min(floor / weight, 1.0)
    se = estimate.shift_se_pp
    if estimate.leverage_pp is None or not (se > 0 and math.isfinite(se)):
        return 1.0
    se_n = se * math.sqrt(estimate.n_units / n_units)
    shares = share_grid(claim.margin_pp, estimate.leverage_pp, 200)
    rest = rest_margins(claim.margin_pp, estimate.leverage_pp, shares[1:])
    missed = caught_probabilities(0, shares[:-1], n_units, population_units)
    seen = stats.norm.sf(rest / se_n - stats.norm.isf((1 - power) / 2))
    return float(min(max((missed * seen).max(), floor) / weight, 1.0))


def units_to_certify(candidate: Candidate, claims: Sequence[Claim], alpha_each: float,
                     power: float, population_units: int | None = None) -> float:
    """The fewest pilot units, from the pilot's own up, that would certify ``candidate``.

    Its projected p (see :func:`projected_pvalue`) is then at most ``alpha_each`` for every
    claim (inf: none up to the instrument, or a million units without one). The pilot's own
    size means that it would have certified the candidate were its true shift 0.
    """
    n = max((candidate.estimates[c.name].n_units for c in claims), default=0)
    top = population_units or 10 ** 6

    def passes(units: int) -> bool:
        return all(projected_pvalue(candidate.estimates[c.name], c, units, power,
                                    population_units) <= alpha_each for c in claims)

    low, high = n, top
    if low > high or not passes(high):
        return math.inf
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if passes(mid) else (mid + 1, high)
    return float(max(low, MIN_PILOT_UNITS))


def _advice(best: float, pilot_units: int, power: float, population_units: int | None,
            unknown_answers: bool) -> str:
    """What a larger pilot would do, from :func:`units_to_certify`'s count."""
    if not np.isfinite(best) and unknown_answers:
        return ("some claim's metric does not say which answers an item could get, so no "
                "pilot bounds a change it did not see")
    if not np.isfinite(best):
        return ("were a candidate's true shift 0, no pilot" + (
            f" of the instrument's {population_units} units" if population_units else "")
            + f" would certify it at this margin with probability {power:g}: a wider margin "
            "or a less noisy candidate is needed")
    if best <= pilot_units:
        return (f"a candidate whose true shift is 0 would have been certified by this pilot "
                f"with probability {power:g}, so the shifts it shows are not near 0; a larger "
                "pilot is not the remedy, a wider margin or another candidate is")
    return (f"a pilot of about {math.ceil(best)} units would certify one whose true shift is 0 "
            f"with probability {power:g}")


def _alpha_each(name: str, tested: Sequence[str], alpha: float, declared: Declared) -> float:
    """The level a candidate is first tested at under the rule."""
    if declared.order:
        return alpha if declared.order[0] == name else 0.0
    if declared.weights:
        return alpha * declared.weights.get(name, 0.0) / sum(declared.weights.values())
    return alpha / len(tested)


def recommend(candidates: Sequence[Candidate], claims: Sequence[Claim],
              sizes_units: Sequence[int], items_per_unit: float, *, reference: str,
              alpha: float = 0.05, power: float = 0.8, declared: Declared = Declared(),
              population_units: int | None = None) -> Recommendation:
    """The cheapest decidable option among the certified candidates (see the module)."""
    names = {c.name for c in candidates}
    if reference not in names:
        raise ValueError(f"the reference protocol {reference!r} is not among the candidates")
    unknown = sorted((set(declared.order) | set(declared.weights)) - names)
    if unknown or reference in declared.order or reference in declared.weights:
        raise ValueError(f"the declared order or weights name {(unknown or [reference])[0]!r}, "
                         "which is not a candidate protocol")
    certificates = certify(candidates, claims, alpha, reference, declared, population_units)
    options = []
    for candidate in candidates:
        certified = candidate.name == reference or certificates[candidate.name].certified
        for units in sorted(set(sizes_units)):
            mde = {c.name: level_mde_pp(candidate.estimates[c.name].level_se_pp,
                                        candidate.estimates[c.name].n_units, units, alpha, power)
                   for c in claims}
            items = round(units * items_per_unit)
            options.append(Option(candidate.name, units, items, candidate.cost_per_item * items,
                                  mde, decidable=all(mde[c.name] <= c.margin_pp for c in claims),
                                  certified=certified))
    options.sort(key=lambda o: (o.cost, -o.units, o.candidate))
    chosen = next((o for o in options if o.admissible), None)
    reasons, needed = [], None
    pilot_units = min((e.n_units for c in candidates for e in c.estimates.values()), default=0)
    if pilot_units < MIN_PILOT_UNITS:
        chosen = None
        reasons.append(f"the pilot has {pilot_units} natural units, fewer than the "
                       f"{MIN_PILOT_UNITS} whose standard errors can be trusted")
    tested = [c for c in candidates if c.name != reference]
    if tested and not any(c.certified for c in certificates.values()):
        names_tested = [c.name for c in tested]
        best = min(units_to_certify(c, claims, _alpha_each(c.name, names_tested, alpha,
                                                            declared), power, population_units)
                   for c in tested)
        needed = math.ceil(best) if np.isfinite(best) and best > pilot_units else None
        reasons.append(f"no candidate protocol can be certified with this pilot ({pilot_units} "
                       "natural units): " + _advice(best, pilot_units, power, population_units, any(
                           c.estimates[k.name].leverage_pp is None for c in tested
                           for k in claims)))
    if chosen is None and options:
        reasons.append("no option is both certified and decidable at every claim's margin: a "
                       "larger subset, a wider margin or a larger pilot is needed")
    return Recommendation(options, chosen, certificates, alpha, needed, reasons)

