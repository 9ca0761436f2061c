"""How alpha is spent over candidates: Holm, a declared fixed sequence, declared weights.

Each is checked against the closed-testing principle enumerated here: an elementary
hypothesis is rejected at alpha when every intersection containing it is rejected by its local
test (weighted Bonferroni for weighted Holm, the first hypothesis in the order for a fixed
sequence), so its adjusted p is the largest local p over those intersections.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from lm_eval_ext.analysis.stats.alpha_order import (
    adjusted_pvalues,
    fixed_sequence,
    weighted_holm,
)


def _closed(pvalues, local):
    """Adjusted p-values by closed testing: the largest local p over intersections with i."""
    m = len(pvalues)
    subsets = [s for r in range(1, m + 1) for s in combinations(range(m), r)]
    return np.array([max(local(s) for s in subsets if i in s) for i in range(m)])


CASES = [([0.01, 0.04, 0.03, 0.2], [0.5, 0.2, 0.2, 0.1]),
         ([0.001, 0.02, 0.5], [0.7, 0.2, 0.1]),
         ([0.03, 0.03, 0.03], [1.0, 1.0, 1.0]),
         ([0.04, 0.001, 0.3, 0.02, 0.06], [0.6, 0.1, 0.1, 0.1, 0.1])]


@pytest.mark.parametrize(("pvalues", "weights"), CASES)
def test_weighted_holm_is_closed_testing_with_weighted_bonferroni(pvalues, weights):
    def local(subset):
        total = sum(weights[j] for j in subset)
        return min(1.0, min(pvalues[j] * total / weights[j] for j in subset))

    assert weighted_holm(pvalues, weights) == pytest.approx(_closed(pvalues, local))


@pytest.mark.parametrize(("pvalues", "_"), CASES)
def test_equal_weights_are_holm_and_the_fixed_sequence_is_closed_testing(pvalues, _):
    assert weighted_holm(pvalues, [1.0] * len(pvalues)) == pytest.approx(
        multipletests(pvalues, method="holm")[1])
    assert fixed_sequence(pvalues) == pytest.approx(
        _closed(pvalues, lambda subset: pvalues[min(subset)]))


def test_declared_rules_give_undeclared_candidates_nothing():
    names, p = ["a", "b", "c"], [0.04, 0.01, 0.2]
    assert adjusted_pvalues(names, p).tolist() == pytest.approx(
        multipletests(p, method="holm")[1])
    # order b, a: b at 0.01, a at max(0.01, 0.04); c is not in the sequence
    assert adjusted_pvalues(names, p, order=["b", "a"]).tolist() == [0.04, 0.01, 1.0]
    # weights a 0.9, b 0.1: a's 0.04 / 0.9 = 0.044 comes before b's 0.01 / 0.1 = 0.1; then b
    # alone holds the weight left (0.01), but an adjusted p never falls below an earlier one
    assert adjusted_pvalues(names, p, weights={"a": 0.9, "b": 0.1}).tolist() == pytest.approx(
        [0.04 / 0.9, 0.04 / 0.9, 1.0])
