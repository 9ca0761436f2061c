"""One claim sentence per comparison, and how stable the claim is across subset memberships.

A claim is the verdict on a run's overall delta (``verdict_of``): "changed" (interval and
cluster permutation test agree that it moved), "no change detected", or borderline. Its
stability is the share of the instrument's frozen subset memberships (the nested sizes and
their replicates) under which the same claim holds: the paired delta recomputed on the
membership's items, with the same bootstrap design, has the same sign (for "changed") and the
same verdict. Energy per settled claim divides the joules of all runs by the claims whose
verdict is "changed".
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from lm_eval_ext.analysis.bootstrap import ClusterDesign
from lm_eval_ext.analysis.errors import DegenerateDataWarning
from lm_eval_ext.analysis.metrics import MetricSpec
from lm_eval_ext.analysis.paired import paired_deltas

CHANGED, UNCHANGED = "changed", "no change detected"


def verdict(low: float, high: float, pvalue: float, level: float) -> str:
    """The claim's verdict from its interval and its cluster permutation p-value."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "not estimable"
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


def claim_table(specs: list[MetricSpec], ref: pd.DataFrame, runs: dict[str, pd.DataFrame],
                deltas: pd.DataFrame, design: ClusterDesign, memberships: dict[str, set[str]],
                level: float, joules_total: float | None) -> pd.DataFrame:
    """Claims, per run and metric, with their stability over the frozen memberships."""
    units = ref["unit_id"].astype(str).to_numpy()
    names = [n for n, keep in memberships.items()
             if len(set(units) & keep) >= 2 and not set(units) <= keep]
    masks = (np.column_stack([np.isin(units, list(memberships[n])) for n in names])
             if names else np.zeros((len(ref), 0), bool))
    overall = deltas[deltas["subgroup_type"] == "all"].set_index(["run", "metric"])
    rows = []
    for run_id, items in runs.items():
        for spec in specs:
            row = overall.loc[(run_id, spec.name)]
            claim = verdict(row["ci_low"], row["ci_high"], row["p_value"], level)
            held = []
            if names:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DegenerateDataWarning)
                    subsets = paired_deltas(spec, ref, items, design, masks, level)
                for d in subsets:
                    sub = verdict(spec.scale * d.ci.low, spec.scale * d.ci.high, d.pvalue, level)
                    same_sign = claim != CHANGED or np.sign(d.statistic) == np.sign(
                        row["delta_pp"])
                    held.append(sub == claim and bool(same_sign))
            rows.append({"run": run_id, "metric": spec.name, "claim": claim,
                         "sentence": sentence(run_id, spec.name, row["delta_pp"],
                                              row["ci_low"], row["ci_high"], claim),
                         "memberships_checked": len(held),
                         "memberships_holding": int(sum(held)),
                         "stability": float(np.mean(held)) if held else np.nan,
                         "holding": ",".join(n for n, h in zip(names, held, strict=True) if h)})
    table = pd.DataFrame(rows)
    settled = int((table["claim"] == CHANGED).sum()) if len(table) else 0
    table["joules_per_settled_claim"] = (joules_total / settled if joules_total is not None
                                         and settled else np.nan)
    return table
