"""``lm-eval-ext``: run lm-eval with the extension, manage data and the embedded model.

Subcommands:
    run ...                       stock ``lm_eval`` arguments, with hf-metered and the task
                                  folders registered explicitly (no start-up hook needed)
    data verify [BENCHMARK...]    check (or download) the pinned upstream files
    data fingerprint CSV          print the sample fingerprint of a BBQ item manifest
        [--register NAME]         ... and register it as tasks NAME and NAME_loglik
    data instrument [--write]     rebuild the frozen instrument manifest and compare it
    model prepare                 convert the embedded model once (download if needed)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lm_eval_ext.errors import LmEvalExtError


def _cmd_run(args: argparse.Namespace) -> int:
    from lm_eval_ext.registration import activate

    activate()
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *args.lm_eval_args]
    cli_evaluate()
    return 0


def _cmd_data_verify(args: argparse.Namespace) -> int:
    from lm_eval_ext.data.sources import BENCHMARKS
    from lm_eval_ext.data.store import benchmark_dir

    for name in args.benchmarks or sorted(BENCHMARKS):
        folder = benchmark_dir(name)
        n_files = sum(f.required for f in BENCHMARKS[name].files)
        print(f"{name}: {n_files} files verified in {folder}")
    return 0


def _existing_task_owner(task: str) -> str | None:
    """Path of the YAML that already defines ``task`` (outside the user task folder)."""
    from lm_eval.tasks import TaskManager

    from lm_eval_ext.paths import user_tasks_dir
    from lm_eval_ext.registration import task_include_paths

    manager = TaskManager(include_path=[str(p) for p in task_include_paths()])
    entry = manager.task_index.get(task)
    if entry is None:
        return None
    yaml_path = str(entry.yaml_path or "")
    return None if yaml_path.startswith(str(user_tasks_dir())) else yaml_path or "lm-eval"


def _cmd_data_fingerprint(args: argparse.Namespace) -> int:
    from lm_eval_ext.data.external_manifest import load_manifest_rows, register_manifest_task
    from lm_eval_ext.data.fingerprints import sample_fingerprint

    rows = load_manifest_rows(args.manifest)
    print(sample_fingerprint(rows))
    if args.register:
        for task in (args.register, f"{args.register}_loglik"):
            owner = _existing_task_owner(task)
            if owner is not None:
                raise LmEvalExtError(
                    f"task name {task!r} is already defined by {owner}; choose another name"
                )
        for path in register_manifest_task(args.manifest, args.register):
            print(f"registered {path.stem} ({len(rows)} rows): {path}", file=sys.stderr)
    return 0


def _cmd_data_instrument(args: argparse.Namespace) -> int:
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


def _cmd_model_prepare(args: argparse.Namespace) -> int:
    from lm_eval_ext.model_wrappers.embedded_model import ensure_checkpoint

    print(ensure_checkpoint())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lm-eval-ext``."""
    parser = argparse.ArgumentParser(prog="lm-eval-ext", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run lm_eval with hf-metered and the tasks registered",
                         add_help=False)
    run.add_argument("lm_eval_args", nargs=argparse.REMAINDER)
    run.set_defaults(func=_cmd_run)

    data = sub.add_parser("data", help="benchmark data: verify, fingerprint, instrument")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    verify = data_sub.add_parser("verify", help="verify (or download) the pinned files")
    verify.add_argument("benchmarks", nargs="*", help="benchmark folders (default: all)")
    verify.set_defaults(func=_cmd_data_verify)
    fingerprint = data_sub.add_parser("fingerprint", help="sample fingerprint of a BBQ manifest")
    fingerprint.add_argument("manifest", help="CSV with header columns category,example_id")
    fingerprint.add_argument("--register", metavar="NAME",
                             help="also register tasks NAME and NAME_loglik for these items")
    fingerprint.set_defaults(func=_cmd_data_fingerprint)
    instrument = data_sub.add_parser("instrument", help="rebuild the frozen BBQ instrument")
    instrument.add_argument("--write", action="store_true",
                            help="overwrite the committed manifest instead of comparing")
    instrument.set_defaults(func=_cmd_data_instrument)

    model = sub.add_parser("model", help="the embedded default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    prepare = model_sub.add_parser("prepare", help="download/convert the embedded model once")
    prepare.set_defaults(func=_cmd_model_prepare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``lm-eval-ext``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # everything after `run` belongs to lm_eval, options included
        args = argparse.Namespace(func=_cmd_run, lm_eval_args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LmEvalExtError as exc:
        print(f"lm-eval-ext: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
