"""One claim sentence per comparison, and how stable the claim is.

A claim is the verdict on a run's overall delta (``verdict``): "changed" (interval and
cluster permutation test agree that it moved), "no change detected", or borderline. Its
stability is checked three ways, each the share of cases where the same claim holds (the same
verdict, and for "changed" the same sign):

* **frozen memberships**: the instrument's nested subsets and their replicates that lie wholly
  inside the paired items (not all of them); the paired delta recomputed on the membership's
  items with the same bootstrap design and permutation test;
* **Monte Carlo draws**: category-stratified draws of natural units at each subset size (as in
  the membership analysis); each draw's delta is judged by its cluster-robust linearised Wald
  interval (closed form: thousands of bootstraps would be too slow). A Wald verdict is never
  borderline, so borderline claims are not checked here;
* **batch sizes and precisions**: other pairs among the runs given that make the same change
  (the same card axes, from the same values to the same values) at another batch size or
  precision, e.g. int8 vs bf16 at batch 32 for a claim made at batch 1; judged like the claim.

Energy per settled claim divides the joules of all runs by the claims whose verdict is
"changed".
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from itertools import permutations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from lm_eval_ext.analysis.errors import DegenerateDataWarning
from lm_eval_ext.analysis.membership import FRACTIONS, cluster_categories, draw_matrix
from lm_eval_ext.analysis.metrics import MetricSpec
from lm_eval_ext.analysis.stats.bootstrap import ClusterDesign, as_rng, cluster_sums
from lm_eval_ext.analysis.stats.linearised import linearised_deltas
from lm_eval_ext.analysis.stats.paired import paired_deltas, valid_in_both
from lm_eval_ext.cards import FACTORS, differing_axes

CHANGED, UNCHANGED, NOT_ESTIMABLE = "changed", "no change detected", "not estimable"
#: the protocol choices a claim should survive (card axes)
PROTOCOL_AXES = ("batch_size", "precision")


def verdict(low: float, high: float, pvalue: float, level: float) -> str:
    """The claim's verdict from its interval and its cluster permutation p-value."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_ESTIMABLE
    excludes, significant = low > 0 or high < 0, pvalue < 1 - level
    if excludes and significant:
        return CHANGED
    if not excludes and not significant:
        return UNCHANGED
    return "borderline"


def sentence(run: str, metric: str, delta_pp: float, low: float, high: float,
             claim: str) -> str:
    """``"int8 lowers bias_s_dis by 3.1 pp [...]"`` or ``"... leaves accuracy unchanged ..."``."""
    if claim == CHANGED:
        verb = "raises" if delta_pp > 0 else "lowers"
        return f"{run} {verb} {metric} by {abs(delta_pp):.2f} pp [{low:+.2f}, {high:+.2f}]"
    if claim == UNCHANGED:
        return (f"{run} leaves {metric} unchanged: delta {delta_pp:+.2f} pp "
                f"[{low:+.2f}, {high:+.2f}] includes 0")
    return f"{run}: {metric} delta {delta_pp:+.2f} pp [{low:+.2f}, {high:+.2f}] ({claim})"


def _holds(claim: str, sign: float, other_claim: str, other_delta: float) -> bool:
    """The same verdict, and for a "changed" claim the same sign."""
    return other_claim == claim and (claim != CHANGED or bool(np.sign(other_delta) == sign))


def _compared_axes(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """Card axes that differ, leaving out the item set (the analysis pairs items itself)."""
    return [a for a in differing_axes(reference, other) if FACTORS[a] != "items"]


def protocol_pairs(cards: Mapping[str, Mapping[str, Any]], reference: str, run: str
                   ) -> list[tuple[str, str]]:
    """Other (baseline, changed) run pairs making ``reference -> run``'s change elsewhere.

    A pair qualifies when it differs on exactly the claim's card axes, from the reference's
    values to the run's, and its baseline differs from the reference only in batch size or
    precision (at least one of them): the same claim under another protocol choice.
    """
    change = _compared_axes(cards[reference], cards[run])
    if not change:
        return []
    pairs = []
    for a, b in permutations(cards, 2):
        if (a, b) == (reference, run) or _compared_axes(cards[a], cards[b]) != change:
            continue
        same_change = all(cards[a].get(x) == cards[reference].get(x)
                          and cards[b].get(x) == cards[run].get(x) for x in change)
        context = _compared_axes(cards[reference], cards[a])
        if same_change and context and set(context) <= set(PROTOCOL_AXES):
            pairs.append((a, b))
    return pairs


def draw_stability(spec: MetricSpec, ref: pd.DataFrame, run: pd.DataFrame, codes: np.ndarray,
                   claim: str, sign: float, level: float, n_draws: int, rng
                   ) -> dict[int, float]:
    """Per subset size (natural units): the share of Monte Carlo draws where the claim holds.

    Draws are category-stratified like the membership analysis's; each draw's delta is judged
    by its linearised cluster-robust Wald interval. Empty for claims a Wald test cannot
    reproduce (borderline, not estimable) or when ``n_draws`` is 0.
    """
    if claim not in (CHANGED, UNCHANGED) or n_draws <= 0:
        return {}
    keep = valid_in_both(spec, ref, run)[:, None]
    n_clusters = int(codes.max()) + 1
    ref_s = cluster_sums(codes, n_clusters, spec.features(ref) * keep)
    run_s = cluster_sums(codes, n_clusters, spec.features(run) * keep)
    _, categories = cluster_categories(ref["unit_id"], codes)
    z = stats.norm.ppf(0.5 + level / 2)
    shares = {}
    for fraction in FRACTIONS:
        n_units = int(fraction * n_clusters)
        if n_units < 2:
            continue
        delta, se = linearised_deltas(spec, ref_s, run_s,
                                      draw_matrix(categories, n_units, n_draws, rng))
        estimable = np.isfinite(delta) & np.isfinite(se)
        significant = estimable & (np.abs(delta) > z * se)
        held = (significant & (np.sign(delta) == sign) if claim == CHANGED
                else estimable & ~significant)
        shares[n_units] = float(np.mean(held))
    return shares


def claim_table(specs: list[MetricSpec], ref: pd.DataFrame, runs: dict[str, pd.DataFrame],
                deltas: pd.DataFrame, design: ClusterDesign, memberships: dict[str, set[str]],
                level: float, joules_total: float | None, *, reference_id: str = "reference",
                cards: Mapping[str, Mapping[str, Any]] | None = None, mc_draws: int = 0,
                rng=None) -> pd.DataFrame:
    """Claims, per run and metric, with their stability over memberships, draws and protocols.

    ``cards`` (run id -> the card of its task, reference included) enables the batch-size and
    precision check; ``mc_draws`` draws per subset size the Monte Carlo check.
    """
    rng = as_rng(rng)
    units = ref["unit_id"].astype(str).to_numpy()
    present = set(units)  # a membership is checked whole (as membership.csv places it)
    names = [n for n, keep in memberships.items()
             if len(keep) >= 2 and keep <= present and not present <= keep]
    masks = (np.column_stack([np.isin(units, list(memberships[n])) for n in names])
             if names else np.zeros((len(ref), 0), bool))
    overall = deltas[deltas["subgroup_type"] == "all"].set_index(["run", "metric"])
    every_run = {reference_id: ref, **runs}
    everywhere = np.ones((len(ref), 1), bool)
    rows = []
    for run_id, items in runs.items():
        pairs = protocol_pairs(cards, reference_id, run_id) if cards else []
        for spec in specs:
            row = overall.loc[(run_id, spec.name)]
            claim = verdict(row["ci_low"], row["ci_high"], row["p_value"], level)
            sign = np.sign(row["delta_pp"])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegenerateDataWarning)
                subsets = paired_deltas(spec, ref, items, design, masks, level) if names else []
                elsewhere = [paired_deltas(spec, every_run[a], every_run[b], design, everywhere,
                                           level)[0] for a, b in pairs]
            held = [_holds(claim, sign, verdict(d.ci.low, d.ci.high, d.pvalue, level),
                           d.statistic) for d in subsets]
            protocol = [_holds(claim, sign, verdict(d.ci.low, d.ci.high, d.pvalue, level),
                               d.statistic) for d in elsewhere]
            by_size = draw_stability(spec, ref, items, design.codes, claim, sign, level,
                                     mc_draws, rng)
            rows.append({"run": run_id, "metric": spec.name, "claim": claim,
                         "sentence": sentence(run_id, spec.name, row["delta_pp"],
                                              row["ci_low"], row["ci_high"], claim),
                         "memberships_checked": len(held),
                         "memberships_holding": int(sum(held)),
                         "stability": float(np.mean(held)) if held else np.nan,
                         "holding": ",".join(n for n, h in zip(names, held, strict=True) if h),
                         "mc_draws_checked": mc_draws * len(by_size),
                         "mc_stability": float(np.mean(list(by_size.values())))
                         if by_size else np.nan,
                         "mc_stability_by_size": ";".join(f"{n}u:{v:.3f}"
                                                          for n, v in by_size.items()),
                         "protocol_checked": len(protocol),
                         "protocol_holding": int(sum(protocol)),
                         "protocol_stability": float(np.mean(protocol)) if protocol else np.nan,
                         "protocol_pairs": "; ".join(
                             f"{b} vs {a} ({'holds' if h else 'fails'})"
                             for (a, b), h in zip(pairs, protocol, strict=True))})
    table = pd.DataFrame(rows)
    settled = int((table["claim"] == CHANGED).sum()) if len(table) else 0
    table["joules_per_settled_claim"] = (joules_total / settled if joules_total is not None
                                         and settled else np.nan)
    return table
