"""``lm-eval-ext data verify|fingerprint|manifest|instrument``: the benchmark data."""

from __future__ import annotations

import argparse
import sys

from lm_eval_ext.cli.options import output_file, refuse_replacing, refuse_unused


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``data`` and its subcommands."""
    data = sub.add_parser("data", help="benchmark data: verify, fingerprint, manifest, instrument")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    verify = data_sub.add_parser("verify", help="verify (or download) the pinned files")
    verify.add_argument("benchmarks", nargs="*", help="benchmark folders (default: all)")
    verify.set_defaults(func=run_verify)
    verify.positionals_anywhere("benchmarks")
    fingerprint = data_sub.add_parser("fingerprint", help="sample fingerprint of a BBQ manifest")
    fingerprint.add_argument("manifest", help="CSV with header columns category,example_id")
    fingerprint.add_argument("--register", metavar="NAME",
                             help="also register tasks NAME and NAME_loglik for these items")
    fingerprint.add_argument("--replace", action="store_true",
                             help="--register over a task of that name with other items")
    fingerprint.set_defaults(func=run_fingerprint)
    manifest = data_sub.add_parser(
        "manifest", help="the BBQ items a harness run evaluated, as a category,example_id CSV")
    manifest.add_argument("run", metavar="HARNESS=PATH",
                          help="lm_eval=DIR, inspect=LOG or helm=RUN_DIR")
    manifest.add_argument("--out", required=True, type=output_file, help="CSV file to write")
    manifest.add_argument("--overwrite", action="store_true",
                          help="replace an existing --out file (kept otherwise)")
    manifest.set_defaults(func=run_manifest)
    instrument = data_sub.add_parser("instrument", help="rebuild the frozen BBQ instrument")
    instrument.add_argument("--write", action="store_true",
                            help="overwrite the committed manifest instead of comparing")
    instrument.set_defaults(func=run_instrument)


def run_verify(args: argparse.Namespace) -> int:
    """Check every pinned file (and that the instrument reproduces from BBQ's)."""
    from lm_eval_ext.data import instrument
    from lm_eval_ext.data.sources import BENCHMARKS
    from lm_eval_ext.data.store import benchmark_dir

    names = args.benchmarks or sorted(BENCHMARKS)
    for name in names:
        folder = benchmark_dir(name)
        n_files = sum(f.required for f in BENCHMARKS[name].files)
        print(f"{name}: {n_files} files verified in {folder}")
    if "bbq" in names:
        instrument.check_reproduces()
        print(f"bbq: instrument manifest {instrument.MANIFEST_PATH.name} reproduces from the data")
    return 0


def run_fingerprint(args: argparse.Namespace) -> int:
    """Print a manifest's fingerprint; with ``--register``, make it two tasks."""
    from lm_eval_ext.data.external_manifest import load_manifest_rows
    from lm_eval_ext.data.fingerprints import sample_fingerprint
    from lm_eval_ext.plugin.task_folders import check_task_names_free
    from lm_eval_ext.tasks.bbq.registered import check_task_name, register_manifest_task

    refuse_unused("--replace", args.replace, "--register", args.register is not None)
    if args.register is not None:  # '' too: it registered nothing, silently
        check_task_name(args.register)
    rows = load_manifest_rows(args.manifest)
    print(sample_fingerprint(rows))
    if args.register is not None:
        check_task_names_free((args.register, f"{args.register}_loglik"))
        for path in register_manifest_task(args.manifest, args.register, replace=args.replace):
            print(f"registered {path.stem} ({len(rows)} rows): {path}", file=sys.stderr)
    return 0


def run_manifest(args: argparse.Namespace) -> int:
    """Write the BBQ items of a harness run as a category,example_id CSV."""
    from lm_eval_ext.cross_harness.readers import read_harness_run, write_bbq_manifest

    refuse_replacing("--out", args.out, args.overwrite,
                     "an earlier manifest: a record of the items a run evaluated")
    n_rows = write_bbq_manifest(read_harness_run(args.run, "data manifest"), args.out)
    print(f"{args.out}: {n_rows} BBQ items of {args.run}", file=sys.stderr)
    return 0


def run_instrument(args: argparse.Namespace) -> int:
    """Rebuild the frozen instrument and compare it with the committed one (or write it)."""
    from lm_eval_ext.data import instrument

    built = instrument.build_manifest()
    if args.write:
        instrument.write_manifest(built)
        print(f"wrote {instrument.MANIFEST_PATH}")
        return 0
    committed = instrument.load_manifest()
    if built != committed:
        print(f"MISMATCH: rebuilding gives a different manifest than {instrument.MANIFEST_PATH}")
        return 1
    for name, record in committed["memberships"].items():
        print(f"{name:12s} units={record['units']:4d} rows={record['rows']:5d} "
              f"membership_sha256={record['membership_sha256']}")
    print("instrument manifest reproduces from the data: OK")
    return 0
