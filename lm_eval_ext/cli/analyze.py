"""``lm-eval-ext analyze``: did the conclusion change? (report, CSVs, figures)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from lm_eval_ext.cli.options import (
    DRAWS,
    GivenOnce,
    add_resampling_options,
    folder,
    points,
    refuse_unused,
)
from lm_eval_ext.errors import ConfigError, LmEvalExtError

if TYPE_CHECKING:
    import pandas as pd


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``analyze`` (``--compare-harness`` kept, deprecated)."""
    analyze = sub.add_parser("analyze", help="did the conclusion change? (paired analysis)")
    analyze.add_argument("--reference", action=GivenOnce, help="lm-eval output of the reference run")
    analyze.add_argument("--runs", nargs="+", action="extend",
                         help="lm-eval outputs to compare (NAME=PATH names a run)")
    analyze.add_argument("--out", required=True, type=folder, help="folder for report, CSVs and figures")
    analyze.add_argument("--label", nargs="+", action="extend", metavar="LABEL",
                         help="labels of the reference and the runs, in order (default: "
                              "NAME=PATH names, else model@precision/bsN/subset)")
    analyze.add_argument("--grid", nargs="*", action="extend",
                         help="runs of models x configurations (rank flips)")
    analyze.add_argument("--core", nargs="*", action="extend", metavar="FACTOR=LEVELS",
                         help="core sub-envelope of the grid, e.g. template_tier=minimal,detailed")
    analyze.add_argument("--intersection", action="store_true",
                         help="compare the items all runs share (size is reported)")
    analyze.add_argument("--cluster", choices=("unit", "template"),
                         help="resampling unit of the intervals and tests: BBQ's natural unit "
                              "(4 rows, the default) or its template (category x "
                              "question_index, shared by several units); the other is "
                              "reported beside it")
    add_resampling_options(analyze)
    analyze.add_argument("--mc-draws", type=DRAWS, help="draws per size (default: 1000)")
    analyze.add_argument("--template-sd", type=points, help="prompt-template SD (pp) for QRI")
    analyze.add_argument("--no-progress", action="store_true", help="no progress bars")
    analyze.add_argument("--compare-harness", nargs="+", metavar="HARNESS=PATH",
                         help="deprecated: use `lm-eval-ext compare-harness`")
    analyze.set_defaults(func=run)


def parse_core(values: list[str] | None) -> dict[str, list[str]] | None:
    """``FACTOR=LEVEL1,LEVEL2`` arguments as a dict."""
    if not values:
        return None
    core = {}
    for value in values:
        factor, sep, levels = value.partition("=")
        if not sep or not levels:
            raise LmEvalExtError(f"--core {value!r}: use FACTOR=LEVEL1,LEVEL2 "
                                 "(e.g. template_tier=minimal,detailed)")
        core[factor] = levels.split(",")
    return core


def run(args: argparse.Namespace) -> int:
    """Analyse, write the outputs, print one line per run and metric."""
    from lm_eval_ext.analysis.report import analyze_to_folder

    if args.compare_harness:
        if args.reference or args.runs:
            raise ConfigError("analyze: --compare-harness replaces --reference/--runs; give "
                              "one or the other")
        unused = [option for option, value in (
            ("--label", args.label), ("--grid", args.grid), ("--core", args.core),
            ("--intersection", args.intersection), ("--cluster", args.cluster),
            ("--mc-draws", args.mc_draws), ("--template-sd", args.template_sd))
            if value is not None and value is not False]
        if unused:  # compare-harness has none of them: they would do nothing
            raise ConfigError(f"analyze: {unused[0]} does nothing with --compare-harness (a "
                              "comparison of harnesses); leave it out, or compare runs with "
                              "--reference/--runs")
        from lm_eval_ext.cli import compare_harness

        print("lm-eval-ext: analyze --compare-harness is deprecated; use `lm-eval-ext "
              "compare-harness HARNESS=PATH ... --out DIR`", file=sys.stderr)
        return compare_harness.compare_and_report(
            args.compare_harness, args.out, n_resamples=args.bootstrap, seed=args.seed,
            level=args.level, overwrite=args.overwrite)
    if not (args.reference and args.runs) and args.grid is not None:
        raise ConfigError("analyze --grid needs --reference and --runs too: its paired part "
                          "compares --runs with --reference (e.g. two models' runs of one "
                          "configuration: analyze --reference a=CELL_A --runs b=CELL_B --grid "
                          "CELL ... --out DIR; `lm-eval-ext grid` analyses its own cells)")
    if not (args.reference and args.runs):
        raise ConfigError("analyze needs --reference and --runs (to compare harnesses: "
                          "lm-eval-ext compare-harness HARNESS=PATH ...)")
    core = parse_core(args.core)
    refuse_unused("--core", args.core, "--grid", args.grid)
    result, paths = analyze_to_folder(
        args.reference, args.runs, args.out, overwrite=args.overwrite, grid=args.grid,
        core=core, intersection=args.intersection, n_resamples=args.bootstrap,
        mc_draws=1_000 if args.mc_draws is None else args.mc_draws, seed=args.seed,
        level=args.level, template_sd_pp=args.template_sd, progress=not args.no_progress,
        labels=args.label, cluster=args.cluster or "unit")
    overall = result.deltas[result.deltas["subgroup_type"] == "all"]
    for _, row in overall.iterrows():
        print(delta_line(row, args.level, args.cluster or "unit"))
    if result.clustering is not None:
        moved = result.clustering[result.clustering["depends_on_clustering"]]
        apart = result.clustering[~result.clustering["comparable"]]
        print("verdicts that depend on the clustering unit (unit vs template): "
              + (", ".join(f"{r.run} {r.metric}" for r in moved.itertuples()) or "none")
              + ("" if apart.empty else f" ({len(apart)} run x metric pair(s) not comparable: "
                 "no verdict under one clustering, e.g. a single template)"))
    if result.settings["intersection"]:
        print(f"intersection: {result.n_items} shared items (left out: {result.dropped})")
    print(f"report: {paths['report_md']}")
    return 0


def delta_line(row: pd.Series, level: float, cluster: str = "unit") -> str:
    """One run's delta on one metric over all items, as the console prints it.

    An interval that cannot be estimated says why (the report's verdict), never ``[nan, nan]``.
    """
    from lm_eval_ext.analysis.report_markdown import small_sample_note, verdict_of

    mcnemar = (f", item-level McNemar p={row['p_value_mcnemar']:.3g}"
               if math.isfinite(row["p_value_mcnemar"]) else "")
    interval = (f"[{row['ci_low']:+.2f}, {row['ci_high']:+.2f}]"
                if math.isfinite(row["ci_low"]) and math.isfinite(row["ci_high"])
                else f"[no interval: {verdict_of(row, level, cluster)}]")
    return (f"{row['run']}: {row['metric']} {row['delta_pp']:+.2f} pp {interval} "
            f"p={row['p_value']:.3g} ({row['test']}{mcnemar})"
            + small_sample_note(int(row["n_clusters"]), cluster))
