"""Claim sentences and their stability over subset memberships, on data with known truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lm_eval_ext.analysis.bootstrap import ClusterDesign
from lm_eval_ext.analysis.claims import CHANGED, UNCHANGED, claim_table, verdict
from lm_eval_ext.analysis.metrics import ACCURACY
from lm_eval_ext.analysis.paired import paired_delta
from lm_eval_ext.analysis.sequential import simulate_paired_units


def _frames(effect: float, n_units: int = 200, seed: int = 5):
    ref, cand = simulate_paired_units(n_units, effect, np.random.default_rng(seed))
    units = [f"u{i}" for i in np.repeat(np.arange(n_units), 4)]
    return (pd.DataFrame({"correct": ref, "unit_id": units}),
            pd.DataFrame({"correct": cand, "unit_id": units}))


def _claims(effect: float, memberships: dict[str, set[str]]):
    ref, cand = _frames(effect)
    design = ClusterDesign.build(ref["unit_id"], 2000, 0)
    d = paired_delta(ACCURACY, ref, cand, design)
    deltas = pd.DataFrame([{"run": "cand", "metric": "accuracy", "subgroup_type": "all",
                            "delta_pp": 100 * d.statistic, "ci_low": 100 * d.ci.low,
                            "ci_high": 100 * d.ci.high, "p_value": d.pvalue}])
    return claim_table([ACCURACY], ref, {"cand": cand}, deltas, design, memberships, 0.95,
                       12_000.0), ref, cand, design


def test_a_large_effect_is_claimed_and_holds_in_large_memberships_only():
    memberships = {"half": {f"u{i}" for i in range(100)},
                   "quarter": {f"u{i}" for i in range(50, 100)},
                   "two_units": {"u0", "u1"},  # too small to show the effect
                   "all": {f"u{i}" for i in range(200)}}  # the whole set: not a check
    claims, ref, cand, design = _claims(0.15, memberships)
    row = claims.iloc[0]
    assert row["claim"] == CHANGED and row["sentence"].startswith("cand raises accuracy by")
    assert row["memberships_checked"] == 3
    # by hand: the verdict on the two-unit membership
    mask = ref["unit_id"].isin(memberships["two_units"]).to_numpy()
    small = paired_delta(ACCURACY, ref, cand, design, mask)
    assert verdict(small.ci.low, small.ci.high, small.pvalue, 0.95) != CHANGED
    assert row["holding"] == "half,quarter" and row["stability"] == pytest.approx(2 / 3)
    assert row["joules_per_settled_claim"] == 12_000.0  # one settled claim


def test_identical_answers_leave_the_metric_unchanged_in_every_membership():
    memberships = {"half": {f"u{i}" for i in range(100)}, "third": {f"u{i}" for i in range(70)}}
    ref, _ = _frames(0.0)
    design = ClusterDesign.build(ref["unit_id"], 500, 0)
    deltas = pd.DataFrame([{"run": "same", "metric": "accuracy", "subgroup_type": "all",
                            "delta_pp": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}])
    claims = claim_table([ACCURACY], ref, {"same": ref.copy()}, deltas, design, memberships,
                         0.95, None)
    row = claims.iloc[0]
    assert row["claim"] == UNCHANGED and row["stability"] == 1.0
    assert np.isnan(row["joules_per_settled_claim"])
