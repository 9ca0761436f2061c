"""How alpha is spent over several candidate protocols: adjusted p-values (no I/O).

Each rule keeps the family-wise error (the chance that any truly non-equivalent candidate is
certified) at alpha when a candidate is certified at adjusted p <= alpha:

* **Holm** (the default): no order declared;
* **fixed sequence**: candidates tested in an order declared before the pilot, each at the full
  alpha, stopping at the first that fails (adjusted p: the largest p up to it);
* **weighted Holm**: weights declared before the pilot; at each step the candidate with the
  smallest ``p / w`` is certified when ``p <= alpha * w / (sum of the weights still in play)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from lm_eval_ext.analysis.stats.subgroups import holm


def fixed_sequence(pvalues: Sequence[float]) -> np.ndarray:
    """Adjusted p-values of hypotheses tested in the given order."""
    return np.maximum.accumulate(np.asarray(pvalues, float)) if len(pvalues) else np.array([])


def weighted_holm(pvalues: Sequence[float], weights: Sequence[float]) -> np.ndarray:
    """Adjusted p-values of the weighted Holm procedure (weight 0: never rejected)."""
    p, w = np.asarray(pvalues, float), np.asarray(weights, float)
    with np.errstate(divide="ignore"):
        order = np.argsort(np.where(w > 0, p / w, np.inf), kind="stable")
    adjusted, running, left = np.ones_like(p), 0.0, w.sum()
    for i in order:
        step = min(1.0, p[i] * left / w[i]) if w[i] > 0 else 1.0
        running = max(running, step)
        adjusted[i] = running
        left -= w[i]
    return adjusted


def adjusted_pvalues(names: Sequence[str], pvalues: Sequence[float], *,
                     order: Sequence[str] | None = None,
                     weights: Mapping[str, float] | None = None) -> np.ndarray:
    """Holm, or the declared fixed sequence (``order``) or weights; undeclared names get 1."""
    p = np.asarray(pvalues, float)
    if order:
        position = {name: i for i, name in enumerate(order)}
        listed = sorted((position[n], i) for i, n in enumerate(names) if n in position)
        out = np.ones_like(p)
        out[[i for _, i in listed]] = fixed_sequence([p[i] for _, i in listed])
        return out
    if weights:
        return weighted_holm(p, [weights.get(n, 0.0) for n in names])
    return holm(p) if len(p) else p
