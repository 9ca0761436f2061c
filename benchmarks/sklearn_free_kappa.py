"""Cohen's kappa without scikit-learn (used by the XSTest agreement benchmark)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float:
    """kappa = (p_o - p_e) / (1 - p_e) for two raters over the same items."""
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=False)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[c] * count_b[c] for c in set(a) | set(b)) / (n * n)
    return (observed - expected) / (1 - expected) if expected < 1 else float("nan")
