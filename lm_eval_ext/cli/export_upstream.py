"""``lm-eval-ext export-upstream``: our tasks as self-contained lm-eval task folders."""

from __future__ import annotations

import argparse

from lm_eval_ext.cli.options import folder
from lm_eval_ext.tasks.common.prompting import TIERS


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``export-upstream``."""
    export = sub.add_parser("export-upstream",
                            help="our tasks as lm-evaluation-harness task folders")
    export.add_argument("tasks", nargs="+", help="bbq_instrument, bbq_subset_<membership>, "
                                                 "xstest_ext")
    export.add_argument("--out", required=True, type=folder, help="folder for the task folders")
    export.add_argument("--template-tier", choices=TIERS,
                        help="prompt tier (default: the task's; another tier is part of the "
                             "exported task name)")
    export.add_argument("--overwrite", action="store_true",
                        help="replace an earlier export of the same task in --out")
    export.add_argument("--local-data", action="store_true",
                        help="data_files from the local data folder (offline runs only)")
    export.set_defaults(func=run)
    export.positionals_anywhere("tasks")


def run(args: argparse.Namespace) -> int:
    """Export and print each folder and the lm_eval validate command."""
    from lm_eval_ext.export.upstream import export_upstream

    exported = export_upstream(args.tasks, args.out, args.template_tier, args.local_data,
                               overwrite=args.overwrite)
    for task in exported:
        print(f"{task.task}: {task.n_items} items -> {task.folder}")
    names = ",".join(t.task for t in exported)
    print(f"check: lm_eval validate --tasks {names} --include_path {args.out}")
    if not args.local_data:
        print("data: read from the web when the task runs; for offline runs export again with "
              "--local-data")
    return 0
