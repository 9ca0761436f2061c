"""Every metric spec declares the range its value can take (``MetricSpec.span``), and that range
is the true one: ``recommend`` refuses a margin no protocol can exceed from it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lm_eval_ext.analysis import metrics
from lm_eval_ext.analysis.metrics import MetricSpec, judge_metric
from lm_eval_ext.analysis.pilot_checks import metric_span_pp

#: each module-level spec's range: a share in [0, 1], a BBQ bias score in [-1, 1]
EXPECTED = {"ACCURACY": (0.0, 1.0), "PARSE_FAILURE_RATE": (0.0, 1.0),
            "BIAS_S_DIS": (-1.0, 1.0), "BIAS_S_AMB": (-1.0, 1.0), "BIAS_S_AMB_HELM": (-1.0, 1.0),
            "HELM_NATIVE_S_DIS": (-1.0, 1.0), "HELM_NATIVE_S_AMB": (-1.0, 1.0),
            "MC2": (0.0, 1.0)}
SPECS = {name: value for name, value in vars(metrics).items() if isinstance(value, MetricSpec)}


def _items(rng: np.random.Generator, n: int, biased_share: float) -> pd.DataFrame:
    """BBQ-like items: random answers, random shares unparsed and right, a share biased."""
    target = rng.integers(0, 3, n)
    unknown = (target + rng.integers(1, 3, n)) % 3
    pred = np.where(rng.random(n) < biased_share, target, rng.integers(0, 3, n)).astype(float)
    pred[rng.random(n) < rng.random()] = np.nan
    label = np.where(rng.random(n) < rng.random(), np.nan_to_num(pred).astype(int),
                     rng.integers(0, 3, n))
    non_unknown = rng.random(n) < 0.7
    return pd.DataFrame({
        "pred": pred, "target_loc": target.astype(float), "unknown_loc": unknown.astype(float),
        "label": label, "correct": pred == label, "parsed": ~np.isnan(pred),
        "context_condition": np.where(rng.random(n) < 0.5, "ambig", "disambig"),
        "parse_method": "json", "helm_non_unknown": non_unknown,
        "helm_biased": non_unknown & (rng.random(n) < biased_share),
        "mc2": rng.random(n) ** (4 * biased_share + 0.25)})  # TruthfulQA's mass on true answers


def test_every_spec_declares_its_range():
    assert set(SPECS) == set(EXPECTED), "a new MetricSpec needs its span here and on the spec"
    for name, spec in SPECS.items():
        assert spec.span == EXPECTED[name], name
    assert metric_span_pp(metrics.ACCURACY) == 100 and metric_span_pp(metrics.BIAS_S_DIS) == 200
    # a judge score's span is left undeclared: recommend takes any margin for it
    assert judge_metric("judge_bias_score").span is None
    assert metric_span_pp(judge_metric("judge_bias_score")) is None


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_values_stay_inside_the_declared_span_and_reach_its_ends(name):
    spec, rng = SPECS[name], np.random.default_rng(0)
    values = [spec.compute(_items(rng, int(rng.integers(4, 40)), share))
              for share in np.linspace(0, 1, 11) for _ in range(6)]
    values = np.array([v for v in values if np.isfinite(v)])
    low, high = spec.span
    assert values.size and low <= values.min() and values.max() <= high
    assert values.min() < low + 0.5 * (high - low) < values.max()  # not a narrower range
