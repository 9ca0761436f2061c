"""What the permutation test's mid-p guarantees: its exact size per discordance pattern.

With one item per natural unit, swapping the two runs within units flips the sign of each
discordant pair, so given ``n`` discordant pairs the null distribution is Binomial(n, 1/2)
(the sign test; ``tests/test_analysis_statistics.py`` checks the package's p against it).
Per ``n``: the exact chance that the two-sided mid-p (ties count half) and the conventional p
fall at or below ``alpha``. Exact enumeration over the binomial law, no resampling.

    python benchmarks/mid_p_size.py --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse

import numpy as np
from _harness import command_line, write_json
from scipy import stats


def sizes(n: int, alpha: float) -> tuple[float, float]:
    """Exact size of the two-sided mid-p and conventional sign tests with ``n`` discordant."""
    k = np.arange(n + 1)
    pmf = stats.binom.pmf(k, n, 0.5)
    small = np.minimum(k, n - k)
    below = stats.binom.cdf(small - 1, n, 0.5)  # P(X < min) on one side
    at = stats.binom.pmf(small, n, 0.5)
    mid = np.minimum(1.0, 2 * (below + at / 2))
    mid = np.where(k * 2 == n, 1 - at / 2, mid)
    conventional = np.minimum(1.0, 2 * (below + at))
    return float(pmf[mid <= alpha].sum()), float(pmf[conventional <= alpha].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-n", type=int, default=200)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = [dict(zip(("mid_p_size", "conventional_size"), sizes(n, args.alpha), strict=True),
                 discordant=n) for n in range(1, args.max_n + 1)]
    mid = np.array([r["mid_p_size"] for r in rows])
    worst = int(np.argmax(mid))
    write_json(args.out, {
        "command": command_line("mid_p_size.py", args), "alpha": args.alpha,
        "mid_p_max_size": float(mid[worst]), "mid_p_max_size_at_n": rows[worst]["discordant"],
        "mid_p_max_size_n_le_10": float(mid[:10].max()),
        "mid_p_mean_size_n_1_to_max": float(mid.mean()),
        "conventional_max_size": max(r["conventional_size"] for r in rows), "per_n": rows})


if __name__ == "__main__":
    main()
