"""Draw the rank-flip bump chart from a committed ``grid_orderings.csv`` (no run folders needed).

    python benchmarks/plot_rank_flips.py benchmarks/results/two_model_2026-12-01/analysis/grid_orderings.csv \
        --out benchmarks/results/two_model_2026-12-01/analysis/figures/rank_flips.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _harness  # noqa: F401  (the working tree's package)
import pandas as pd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("orderings", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from lm_eval_ext.analysis import figures

    figures.save(figures.rank_flips(pd.read_csv(args.orderings, keep_default_na=False,
                                                na_values=[""], dtype={"flipped_with": str})
                                    .fillna({"flipped_with": ""})), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
