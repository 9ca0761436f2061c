"""A pilot's per-item runs -> each claim's contrast shift, its bootstrap-t draws (no I/O).

Input: per pilot (one model each) and protocol (run), the pilot's item frame (lm-eval-ext's
per-item table). All pilots of a between-model claim must hold the same natural units. One
natural-unit cluster bootstrap per set of units (the same draw for every pilot and run on it,
since the same units were evaluated everywhere) gives every metric value under every resample;
each run's value is the metric as that run reports it (a judge mean over the items the judge
scored in that run, not only those scored in every run); a claim's
contrast is a weighted sum of pilots' values (``+1``: a model's value; ``+1, -1``: model a minus
model b), so its shift ``contrast(candidate) - contrast(reference)`` keeps every covariance
between models and protocols.

Per claim and run: the shift; its delta-method cluster-robust standard error (each unit's
influence on the contrast's shift, from the metric's gradient at the run's feature sums; CR1),
computed again inside every resample for the studentised draws ``T*`` that the bootstrap-t
equivalence test reads (:mod:`.equivalence`); the bootstrap SD of the contrast's level (for the
MDE); and the contrast's **leverage**: the most it moves, in points, per share of units that
change their answers, from each item's features under every answer it could get (100 for one
model's accuracy, 200 for a difference of two models' accuracies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lm_eval_ext.analysis.metrics import MetricSpec
from lm_eval_ext.analysis.stats.bootstrap import as_rng, bootstrap_counts, cluster_sums, resampled
from lm_eval_ext.analysis.stats.equivalence import MAX_CAUGHT, Visible, studentised
from lm_eval_ext.analysis.stats.linearised import cluster_robust_se, gradients
from lm_eval_ext.analysis.stats.recommend import Claim, ClaimEstimate

#: frames[pilot][run]: the run's items, every run of a pilot on the same items
Frames = Mapping[str, Mapping[str, pd.DataFrame]]


@dataclass(frozen=True)
class _Run:
    """One pilot's run of one metric: per-unit feature sums and their resampled gradients."""

    sums: np.ndarray  # (C x k) per unit
    value: float  # observed, in points
    draws: np.ndarray  # (B,) resampled value, in points
    gradient: np.ndarray  # (k,) at the observed sums, in points per feature unit
    resampled_gradient: np.ndarray  # (B x k) at each resample's sums
    features: np.ndarray | None  # (n x k) per kept item (None: built from unit sums)


def _weights(claim: Claim, pilots: Sequence[str]) -> dict[str, float]:
    if not claim.pilots:
        return {pilots[0]: 1.0}
    if len(claim.pilots) == 1:
        return {claim.pilots[0]: 1.0}
    return {claim.pilots[0]: 1.0, claim.pilots[1]: -1.0}


def _run(spec: MetricSpec, features: np.ndarray, codes: np.ndarray, n_units: int,
         draw: np.ndarray) -> _Run:
    """One run's metric on the pilot's units, observed and under every row of ``draw``."""
    return _run_on(spec, cluster_sums(codes, n_units, features), draw, features)


def _run_on(spec: MetricSpec, sums: np.ndarray, draw: np.ndarray,
            features: np.ndarray | None = None) -> _Run:
    """One run's metric from its per-unit feature sums, observed and under ``draw``."""
    totals = draw @ sums
    return _Run(sums, float(spec.value(sums.sum(0))) * spec.scale,
                resampled(spec.value, draw, sums, np.float64) * spec.scale,
                gradients(spec, sums.sum(0)[None, :])[0] * spec.scale,
                gradients(spec, totals) * spec.scale, features)


def unit_leverage(spec: MetricSpec, items: pd.DataFrame, codes: np.ndarray,
                  gradient: np.ndarray) -> float | None:
    """The most the metric moves (points) per share of units changing answers, to first order.

    Each item's features under every answer it could get (``spec.alternatives``) span a range
    along the metric's gradient; a unit's range is its items' sum, and the busiest unit's range
    times the number of units is the shift were every unit like it to swing fully. None when
    the metric does not say what answers an item could get.
    """
    if spec.alternatives is None:
        return None
    along = spec.alternatives(items.reset_index(drop=True)) @ gradient  # (n x A)
    per_unit = np.bincount(codes, along.max(1) - along.min(1))
    present = np.bincount(codes) > 0
    return float(per_unit.max() * present.sum()) if present.any() else None


def claim_estimates(frames: Frames, reference: str, claims: Sequence[Claim],
                    specs: Mapping[str, MetricSpec], n_resamples: int = 2000,
                    rng=0) -> dict[str, dict[str, ClaimEstimate]]:
    """``{run: {claim name: ClaimEstimate}}`` for every run of the pilots, the reference too.

    ``specs`` maps a claim's metric to its :class:`MetricSpec`. The reference's shift is 0 by
    construction (its level SE is the reference's own).
    """
    pilots = list(frames)
    generator = as_rng(rng)
    runs = list(next(iter(frames.values())))
    unit_sets: dict[frozenset[str], np.ndarray] = {}  # each set of units, its one draw
    table: dict[tuple[str, str, str], _Run] = {}
    leverage: dict[tuple[str, str], float | None] = {}
    members: dict[str, frozenset[str]] = {}
    for pilot, by_run in frames.items():
        first = by_run[reference]
        ids = first["unit_id"].astype(str)
        members[pilot] = frozenset(ids)
        units = sorted(members[pilot])
        if members[pilot] not in unit_sets:
            unit_sets[members[pilot]] = bootstrap_counts(len(units), n_resamples, generator)
        draw = unit_sets[members[pilot]]
        codes = ids.map({u: i for i, u in enumerate(units)}).to_numpy()
        for metric in {c.metric for c in claims}:
            spec = specs[metric]
            for run in runs:
                table[pilot, run, metric] = _run(spec, spec.features(by_run[run]), codes,
                                                 len(units), draw)
            leverage[pilot, metric] = unit_leverage(spec, first, codes,
                                                    table[pilot, reference, metric].gradient)
    out: dict[str, dict[str, ClaimEstimate]] = {run: {} for run in runs}
    for claim in claims:
        weights = _weights(claim, pilots)
        involved = list(weights)
        if len({members[p] for p in involved}) > 1:
            raise ValueError(f"claim {claim.name}: the pilots {', '.join(involved)} hold "
                             "different natural units; a between-model claim needs one item set")
        draw = unit_sets[members[involved[0]]]
        parts = {p: (w, table[p, reference, claim.metric]) for p, w in weights.items()}
        levers = [leverage[p, claim.metric] for p in involved]
        lever = None if None in levers else float(sum(levers))
        for run in runs:
            run_parts = [(w, table[p, run, claim.metric]) for p, w in weights.items()]
            ref_parts = list(parts.values())
            same = all(np.array_equal(table[p, run, claim.metric].features,
                                      table[p, reference, claim.metric].features,
                                      equal_nan=True) for p in involved)
            seen, run_draws = _visible(run_parts, ref_parts, draw, same, run != reference)
            caught = ({}, {}) if run == reference or lever is None else _caught(
                specs[claim.metric], run_parts, ref_parts, lever, draw.shape[0], generator)
            out[run][claim.name] = ClaimEstimate(
                shift_pp=seen.shift, shift_se_pp=seen.se,
                level_se_pp=float(np.nanstd(run_draws, ddof=1)),
                n_units=draw.shape[1], identical=same, leverage_pp=lever,
                t_draws=seen.t_draws, **caught[0], **caught[1])
    return out


def _visible(run_parts: list[tuple[float, _Run]], ref_parts: list[tuple[float, _Run]],
             draw: np.ndarray, identical: bool, tested: bool) -> tuple[Visible, np.ndarray]:
    """A contrast's shift (candidate minus reference) on ``draw``'s units.

    With its CR1 standard error and studentised draws (none for the reference itself); and
    the candidate's draws.
    """
    shift = float(sum(w * (r.value - f.value)
                      for (w, r), (_, f) in zip(run_parts, ref_parts, strict=True)))
    run_draws = sum(w * r.draws for w, r in run_parts)
    se, t_draws = 0.0, None
    if tested:
        signed = run_parts + [(-w, f) for w, f in ref_parts]
        sums = np.hstack([w * r.sums for w, r in signed])
        se = float(cluster_robust_se(sums, np.hstack([r.gradient for _, r in signed])[None],
                                     np.ones((1, len(sums))))[0])
        se_draws = cluster_robust_se(sums, np.hstack([r.resampled_gradient for _, r in signed]),
                                     draw)
        t_draws = studentised(run_draws - sum(w * f.draws for w, f in ref_parts), shift,
                              se_draws, se)
    return Visible(shift, se, draw.shape[1], identical, t_draws), run_draws


def _caught(spec: MetricSpec, run_parts: list[tuple[float, _Run]],
            ref_parts: list[tuple[float, _Run]], leverage: float, n_resamples: int,
            generator: np.random.Generator) -> tuple[dict, dict]:
    """Per side, the units that moved the contrast by the full leverage.

    Their count, and the pilot less its 1, 2, ... units moved furthest that way (each on a
    fresh bootstrap of the rest).
    """
    moved = sum(w * (r.sums - f.sums) @ f.gradient
                for (w, r), (_, f) in zip(run_parts, ref_parts, strict=True))
    n = len(moved)
    found = []
    for side in (+1, -1):
        full = int((side * moved * n >= leverage * (1 - 1e-6)).sum())
        order = np.argsort(-side * moved, kind="stable")
        seen = []  # none past MAX_CAUGHT: that side is not certified at all
        for k in range(1, full + 1 if full <= MAX_CAUGHT else 1):
            keep = np.sort(order[k:])
            draw = bootstrap_counts(n - k, n_resamples, generator)
            kept = [[(w, _run_on(spec, r.sums[keep], draw)) for w, r in parts]
                    for parts in (run_parts, ref_parts)]
            same = all(np.array_equal(r.sums, f.sums)
                       for (_, r), (_, f) in zip(*kept, strict=True))
            seen.append(_visible(kept[0], kept[1], draw, same, True)[0])
        name = "up" if side > 0 else "down"
        found.append({f"full_{name}": full, f"caught_{name}": tuple(seen)})
    return found[0], found[1]
