"""``lm-eval-ext compare-harness``: one model through lm-eval, Inspect AI and HELM."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from lm_eval_ext.cli.options import add_resampling_options, folder


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``compare-harness``."""
    parser = sub.add_parser("compare-harness",
                            help="the same model through several harnesses: scores, paired "
                                 "agreement, attribution of the difference")
    parser.add_argument("harness_runs", nargs="+", metavar="HARNESS=PATH",
                        help="lm_eval=DIR, inspect=LOG, helm=RUN_DIR (the first is the "
                             "reference)")
    parser.add_argument("--out", required=True, type=folder, help="folder for the report and CSVs")
    add_resampling_options(parser)
    parser.set_defaults(func=run)
    parser.positionals_anywhere("harness_runs")


def run(args: argparse.Namespace) -> int:
    """``compare-harness`` with its parsed arguments."""
    return compare_and_report(args.harness_runs, args.out, n_resamples=args.bootstrap,
                              seed=args.seed, level=args.level, overwrite=args.overwrite)


def compare_and_report(harness_runs: Sequence[str], out: str | Path, *, n_resamples: int,
                       seed: int, level: float, overwrite: bool) -> int:
    """Compare, write the report, print the total difference per harness and metric.

    Also what the deprecated ``analyze --compare-harness`` runs.
    """
    from lm_eval_ext.analysis.report import check_output_folder, write_folder
    from lm_eval_ext.cross_harness import (
        HARNESS_OUTPUTS,
        compare_harnesses,
        read_harness_runs,
        write_harness_report,
    )

    out, mine = Path(out), {"marker": "harness_report.md", "outputs": HARNESS_OUTPUTS,
                            "command": "compare-harness"}
    earlier = check_output_folder(out, overwrite=overwrite, **mine)
    runs = read_harness_runs(harness_runs)
    comparison = compare_harnesses(runs, n_resamples=n_resamples, seed=seed, level=level)
    report = write_folder(out, overwrite, lambda staging: {
        "report": write_harness_report(comparison, runs, staging)}, earlier=earlier,
        **mine)["report"]
    print("\n".join(comparison.total_lines()))
    print(f"report: {report}")
    return 0
