"""A pilot's per-item runs -> each claim's contrast shift and standard errors (no I/O).

Input: per pilot (one model each) and protocol (run), the pilot's item frame (lm-eval-ext's
per-item table). All pilots of a between-model claim must hold the same natural units. One
natural-unit cluster bootstrap (the same draw of units for every pilot and run, since the same
units were evaluated everywhere) gives every metric value under every resample; a claim's
contrast is a weighted sum of pilots' values (``+1``: a model's value; ``+1, -1``: model a minus
model b), so its shift ``contrast(candidate) - contrast(reference)`` and its level keep every
covariance between models and protocols. Standard errors are the bootstrap SDs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lm_eval_ext.analysis.metrics import MetricSpec
from lm_eval_ext.analysis.stats.bootstrap import bootstrap_counts, cluster_sums, resampled
from lm_eval_ext.analysis.stats.recommend import Claim, ClaimEstimate

#: frames[pilot][run]: the run's items, every run of a pilot on the same items
Frames = Mapping[str, Mapping[str, pd.DataFrame]]


def _weights(claim: Claim, pilots: Sequence[str]) -> dict[str, float]:
    if not claim.pilots:
        return {pilots[0]: 1.0}
    if len(claim.pilots) == 1:
        return {claim.pilots[0]: 1.0}
    return {claim.pilots[0]: 1.0, claim.pilots[1]: -1.0}


def _valid(spec: MetricSpec, runs: Mapping[str, pd.DataFrame]) -> np.ndarray:
    """Items valid in every run of a pilot (judge scores: NaN marks an invalid score)."""
    first = next(iter(runs.values()))
    keep = np.ones(len(first), bool)
    if spec.valid_column:
        for items in runs.values():
            keep &= items[spec.valid_column].notna().to_numpy()
    return keep


def claim_estimates(frames: Frames, reference: str, claims: Sequence[Claim],
                    specs: Mapping[str, MetricSpec], n_resamples: int = 2000,
                    rng=0) -> dict[str, dict[str, ClaimEstimate]]:
    """``{run: {claim name: ClaimEstimate}}`` for every run of the pilots, the reference too.

    ``specs`` maps a claim's metric to its :class:`MetricSpec`. The reference's shift is 0 by
    construction (its level SE is the reference's own).
    """
    pilots = list(frames)
    units = sorted(set().union(*(set(items["unit_id"].astype(str)) for runs in frames.values()
                                 for items in runs.values())))
    index = {u: i for i, u in enumerate(units)}
    draw = bootstrap_counts(len(units), n_resamples, rng)
    runs = list(next(iter(frames.values())))
    observed: dict[tuple[str, str, str], float] = {}
    draws: dict[tuple[str, str, str], np.ndarray] = {}
    same: dict[tuple[str, str, str], bool] = {}
    equal_units: dict[str, bool] = {}
    pilot_units: dict[str, set[str]] = {}
    for pilot, by_run in frames.items():
        first = by_run[reference]
        codes = first["unit_id"].astype(str).map(index).to_numpy()
        sizes = np.bincount(codes)
        equal_units[pilot] = len(set(sizes[sizes > 0])) == 1
        pilot_units[pilot] = set(first["unit_id"].astype(str))
        for metric in {c.metric for c in claims}:
            spec = specs[metric]
            keep = _valid(spec, by_run)
            ref_features = spec.features(first)[keep]
            for run in runs:
                features = spec.features(by_run[run])[keep]
                sums = cluster_sums(codes[keep], len(units), features)
                observed[pilot, run, metric] = float(spec.value(sums.sum(0))) * spec.scale
                draws[pilot, run, metric] = resampled(spec.value, draw, sums,
                                                      np.float64) * spec.scale
                same[pilot, run, metric] = bool(np.array_equal(features, ref_features,
                                                               equal_nan=True))
    out: dict[str, dict[str, ClaimEstimate]] = {run: {} for run in runs}
    for claim in claims:
        weights = _weights(claim, pilots)
        involved = list(weights)
        if len({frozenset(pilot_units[p]) for p in involved}) > 1:
            raise ValueError(f"claim {claim.name}: the pilots {', '.join(involved)} hold "
                             "different natural units; a between-model claim needs one item set")
        spec = specs[claim.metric]

        def contrast(run: str, table, metric=claim.metric, weights=weights):
            return sum(w * table[p, run, metric] for p, w in weights.items())

        ref_draws = contrast(reference, draws)
        for run in runs:
            run_draws = contrast(run, draws)
            out[run][claim.name] = ClaimEstimate(
                shift_pp=float(contrast(run, observed) - contrast(reference, observed)),
                shift_se_pp=float(np.nanstd(run_draws - ref_draws, ddof=1)),
                level_se_pp=float(np.nanstd(run_draws, ddof=1)),
                n_units=len(pilot_units[involved[0]]),
                identical=all(same[p, run, claim.metric] for p in involved),
                discordance_bounded=spec.binary and all(equal_units[p] for p in involved))
    return out
