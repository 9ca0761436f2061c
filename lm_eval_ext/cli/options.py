"""Options that several commands share."""

from __future__ import annotations

import argparse


def add_resampling_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap``, ``--seed``, ``--level`` and ``--overwrite`` (analyze, compare-harness)."""
    parser.add_argument("--bootstrap", type=int, default=10_000, help="resamples (10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier analysis in --out (never mixed with it)")
