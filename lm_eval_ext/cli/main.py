"""``lm-eval-ext``: run lm-eval with the extension, manage data and the embedded model.

Subcommands:
    run ...                       stock ``lm_eval`` arguments, with hf-metered and the task
                                  folders registered explicitly (no start-up hook needed)
    data verify [BENCHMARK...]    check (or download) the pinned upstream files
    data fingerprint CSV          print the sample fingerprint of a BBQ item manifest
        [--register NAME]         ... and register it as tasks NAME and NAME_loglik
    data instrument [--write]     rebuild the frozen instrument manifest and compare it
    model prepare                 convert the embedded model once (download if needed)
    analyze --reference R --runs A B --out OUT
                                  did the conclusion change? (report, CSVs, figures)
    mde --m M --rho-d R           paired minimum detectable effect (pp) and a pre-reg card
    campaign CAMPAIGN.yaml --out DIR   models x conditions x tasks, resumable (--shard I/N,
        [--preset paper-stress-test]   --dry-run, --status), then analyze
    grid GRID.yaml --out DIR      models x template tier x shots x decoding x scoring path,
                                  then analyze --grid (rank flips)
    judge RUN_DIR                 Bias Score and Reasoning Quality of generated reasoning
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lm_eval_ext.errors import ConfigError, LmEvalExtError


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

    names = args.benchmarks or sorted(BENCHMARKS)
    for name in names:
        folder = benchmark_dir(name)
        n_files = sum(f.required for f in BENCHMARKS[name].files)
        print(f"{name}: {n_files} files verified in {folder}")
    if "bbq" in names:
        from lm_eval_ext.data import instrument

        if instrument.build_manifest() != instrument.load_manifest():
            raise LmEvalExtError(
                f"the instrument manifest {instrument.MANIFEST_PATH} does not reproduce from the "
                "verified BBQ files; reinstall lm-eval-ext (or rebuild it with "
                "`lm-eval-ext data instrument --write` if you changed the algorithm)")
        print(f"bbq: instrument manifest {instrument.MANIFEST_PATH.name} reproduces from the data")
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


def _cmd_data_manifest(args: argparse.Namespace) -> int:
    import csv

    from lm_eval_ext.analysis.harness import bbq_manifest_rows, read_harness_run

    rows = bbq_manifest_rows(read_harness_run(args.run))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("category", "example_id"))
        writer.writerows(rows)
    print(f"{args.out}: {len(rows)} BBQ items of {args.run}", file=sys.stderr)
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


def _parse_core(values: list[str] | None) -> dict[str, list[str]] | None:
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


def _cmd_compare_harness(args: argparse.Namespace) -> int:
    from lm_eval_ext.analysis.harness import read_harness_run
    from lm_eval_ext.analysis.harness_compare import compare_harnesses, write_harness_report
    from lm_eval_ext.analysis.report import check_output_folder, prepare_output_folder

    check_output_folder(Path(args.out), overwrite=args.overwrite)
    runs = [read_harness_run(entry) for entry in args.compare_harness]
    comparison = compare_harnesses(runs, n_resamples=args.bootstrap, seed=args.seed,
                                   level=args.level)
    prepare_output_folder(Path(args.out), overwrite=args.overwrite)
    report = write_harness_report(comparison, runs, args.out)
    total = comparison.attribution[comparison.attribution["component"] == "total"]
    for _, row in total.iterrows():
        print(f"{row['benchmark']} {row['metric']}: {row['harness']} - {row['reference']} = "
              f"{row['value_pp']:+.2f} pp")
    print(f"report: {report}")
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from lm_eval_ext.analysis import analyze, write_outputs
    from lm_eval_ext.analysis.report import check_output_folder, prepare_output_folder

    if args.compare_harness:
        if args.reference or args.runs:
            raise ConfigError("analyze: --compare-harness replaces --reference/--runs; give "
                              "one or the other")
        return _cmd_compare_harness(args)
    if not (args.reference and args.runs):
        raise ConfigError("analyze needs --reference and --runs (or --compare-harness "
                          "HARNESS=PATH ...)")
    check_output_folder(Path(args.out), overwrite=args.overwrite)  # fail before the work
    result = analyze(args.reference, args.runs, grid=args.grid, core=_parse_core(args.core),
                     intersection=args.intersection, n_resamples=args.bootstrap,
                     mc_draws=args.mc_draws, seed=args.seed, level=args.level,
                     template_sd_pp=args.template_sd, progress=not args.no_progress)
    prepare_output_folder(Path(args.out), overwrite=args.overwrite)  # the new one exists now
    paths = write_outputs(result, Path(args.out))
    overall = result.deltas[result.deltas["subgroup_type"] == "all"]
    for _, row in overall.iterrows():
        mcnemar = (f", item-level McNemar p={row['p_value_mcnemar']:.3g}"
                   if row["p_value_mcnemar"] == row["p_value_mcnemar"] else "")
        print(f"{row['run']}: {row['metric']} {row['delta_pp']:+.2f} pp "
              f"[{row['ci_low']:+.2f}, {row['ci_high']:+.2f}] p={row['p_value']:.3g} "
              f"({row['test']}{mcnemar})")
    if result.settings["intersection"]:
        print(f"intersection: {result.n_items} shared items (left out: {result.dropped})")
    print(f"report: {paths['report_md']}")
    return 0


def _cmd_export_upstream(args: argparse.Namespace) -> int:
    from lm_eval_ext.interop.upstream import export_upstream

    exported = export_upstream(args.tasks, args.out, args.template_tier, args.local_data)
    for task in exported:
        print(f"{task.task}: {task.n_items} items -> {task.folder}")
    names = ",".join(t.task for t in exported)
    print(f"check: lm_eval validate --tasks {names} --include_path {args.out}")
    return 0


def _cmd_sequential(args: argparse.Namespace) -> int:
    from lm_eval_ext.campaign.sequential import Arm, run_sequential

    outcome = run_sequential(
        args.out, Arm(args.reference_args, args.reference_batch),
        Arm(args.candidate_args, args.candidate_batch), metric=args.metric,
        margin_pp=args.margin, alpha=args.alpha, beta=args.beta, looks=args.looks.split(","),
        path=args.path, echo=not args.quiet)
    for look in outcome["looks"]:
        print(f"look {look['look']} ({look['membership']}, {look['n_items']} items): "
              f"delta {100 * look['delta']:+.2f} pp, {100 * (1 - look['alpha_spent']):.3g}% CI "
              f"[{100 * look['ci'][0]:+.2f}, {100 * look['ci'][1]:+.2f}] -> {look['decision']}")
    print(f"decision: {outcome['decision']} after {outcome['items_evaluated']} of "
          f"{outcome['items_in_family']} items; {Path(args.out) / 'sequential.json'}")
    return 0


def _cmd_mde(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lm_eval_ext.analysis import discordance_rate, paired_mde, preregistration_card
    from lm_eval_ext.analysis.power import design_effect, usable_design_effect

    m, rho_d, deff = args.m, args.rho_d, args.design_effect
    if args.card and not Path(args.card).parent.is_dir():
        raise LmEvalExtError(f"--card {args.card}: folder {Path(args.card).parent} does not "
                             "exist; create it or write the card elsewhere")
    if args.runs:
        from lm_eval_ext.analysis.loader import load_runs
        from lm_eval_ext.analysis.pairing import align, aligned_items

        ref, run = load_runs(args.runs)
        alignment = align(ref, [run], intersection=True)
        ref_items, run_items = aligned_items(ref, alignment), aligned_items(run, alignment)
        rho_d = discordance_rate(ref_items["correct"], run_items["correct"])
        deff = design_effect(run_items["correct"].to_numpy(float)
                             - ref_items["correct"].to_numpy(float), ref_items["unit_id"])
        m = m or alignment.n
        print(f"empirical rho_d = {rho_d:.4f}, design effect = {deff:.3f} over {alignment.n} "
              "paired items")
        deff = usable_design_effect(deff)
    if m is None or rho_d is None:
        raise LmEvalExtError("mde needs --m and --rho-d (or --runs REFERENCE RUN)")
    try:
        mde = 100 * paired_mde(m, rho_d, args.alpha, args.power, design_effect=deff)
    except ValueError as exc:
        raise LmEvalExtError(str(exc)) from exc
    print(f"paired MDE = {mde:.2f} pp (m={m}, rho_d={rho_d:g}, design effect={deff:g}, "
          f"alpha={args.alpha:g}, power={args.power:g})")
    if args.card:
        Path(args.card).write_text(preregistration_card(
            mde_pp=mde, rho_d=rho_d, m=m, alpha=args.alpha, power=args.power,
            design_effect=deff))
        print(f"wrote {args.card}")
    return 0


def _campaign_source(args: argparse.Namespace) -> tuple[object, str]:
    """(spec, YAML text) from CAMPAIGN.yaml, GRID.yaml or --preset."""
    import yaml

    from lm_eval_ext.campaign import build_spec, load_spec

    if args.command == "grid":
        from lm_eval_ext.campaign.grid import grid_campaign
        from lm_eval_ext.campaign.spec import read_yaml

        raw = grid_campaign(read_yaml(args.spec, "grid"))
        return build_spec(raw), yaml.safe_dump(raw, sort_keys=False)
    if args.preset:
        if args.spec:
            raise LmEvalExtError("give either CAMPAIGN.yaml or --preset, not both")
        from lm_eval_ext.campaign.presets import preset

        raw = preset(args.preset, model_args=args.model_args, tasks=args.tasks, path=args.path,
                     large_batch=args.large_batch, limit=args.limit)
        return build_spec(raw), yaml.safe_dump(raw, sort_keys=False)
    if not args.spec:
        raise LmEvalExtError("give CAMPAIGN.yaml or --preset paper-stress-test")
    if args.limit is not None:
        raise LmEvalExtError("--limit belongs to --preset; in a campaign file set lm_eval: "
                             "{limit: N}")
    return load_spec(args.spec), Path(args.spec).read_text(encoding="utf-8")


def _cmd_campaign(args: argparse.Namespace) -> int:
    from lm_eval_ext.campaign import dry_run, run_campaign, status_lines

    spec, source = _campaign_source(args)
    if args.status:
        lines, complete = status_lines(spec, args.out)
        print("\n".join(lines))
        return 0 if complete else 1
    if args.dry_run:
        print("\n".join(dry_run(spec, args.shard, args.calibration_limit or None)))
        return 0
    outcome = run_campaign(
        spec, args.out, source, shard=args.shard, analyze=not args.no_analyze,
        analysis_settings={"n_resamples": args.bootstrap, "mc_draws": args.mc_draws,
                           "seed": args.seed, "progress": not args.quiet},
        echo=not args.quiet, grid=args.command == "grid", analyze_only=args.analyze_only)
    print(f"{args.command}: {len(outcome.done)} cells run, {len(outcome.skipped)} already done, "
          f"{len(outcome.failed)} failed, {len(outcome.busy)} held by other processes; "
          f"{'complete' if outcome.complete else 'incomplete'}: {args.out}/manifest.json")
    for report in outcome.reports:
        print(f"report: {report}")
    if outcome.failed:
        print(f"failed cells (logs under {args.out}/failed/): {', '.join(outcome.failed)}; "
              "rerun the same command to retry them")
    return 1 if outcome.failed else 0


def _cmd_judge(args: argparse.Namespace) -> int:
    from lm_eval_ext.judge.run import judge_run

    summaries = judge_run(args.run_dir, model=args.judge_model, model_args=args.judge_model_args,
                          batch_size=args.batch_size, device=args.device,
                          max_gen_toks=args.max_gen_toks, limit=args.limit,
                          rubrics=args.rubrics.split(","), overwrite=args.overwrite)
    for summary in summaries:
        counts = "; ".join(f"{name}: " + ", ".join(f"{n} {s}" for s, n in c.items() if n)
                           for name, c in summary["counts"].items())
        energy = (summary.get("metering") or {}).get("energy_joules")
        print(f"{summary['task']} ({summary['n_items']} items): {counts}; judge energy "
              f"{'not measured' if energy is None else f'{energy:.1f} J'}")
    return 0


def _add_campaign_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="campaign folder (created, or resumed)")
    parser.add_argument("--shard", default="1/1", help="run every N-th cell: I/N (default 1/1)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the cells and an estimated device time; run nothing")
    parser.add_argument("--calibration-limit", type=int, default=8,
                        help="items per configuration for --dry-run's timing (0: none)")
    parser.add_argument("--status", action="store_true",
                        help="completeness across all shards (exit 1 while cells are missing)")
    parser.add_argument("--no-analyze", action="store_true", help="skip the analysis")
    parser.add_argument("--analyze-only", action="store_true",
                        help="run no cell; analyse every comparison whose cells are done")
    parser.add_argument("--bootstrap", type=int, default=10_000, help="analysis resamples")
    parser.add_argument("--mc-draws", type=int, default=1_000, help="analysis draws per size")
    parser.add_argument("--seed", type=int, default=0, help="analysis seed")
    parser.add_argument("--quiet", action="store_true", help="no lm-eval output, one line per cell")
    parser.set_defaults(func=_cmd_campaign)


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
    manifest = data_sub.add_parser(
        "manifest", help="the BBQ items a harness run evaluated, as a category,example_id CSV")
    manifest.add_argument("run", metavar="HARNESS=PATH",
                          help="lm_eval=DIR, inspect=LOG or helm=RUN_DIR")
    manifest.add_argument("--out", required=True, help="CSV to write")
    manifest.set_defaults(func=_cmd_data_manifest)
    instrument = data_sub.add_parser("instrument", help="rebuild the frozen BBQ instrument")
    instrument.add_argument("--write", action="store_true",
                            help="overwrite the committed manifest instead of comparing")
    instrument.set_defaults(func=_cmd_data_instrument)

    model = sub.add_parser("model", help="the embedded default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    prepare = model_sub.add_parser("prepare", help="download/convert the embedded model once")
    prepare.set_defaults(func=_cmd_model_prepare)
    analyze = sub.add_parser("analyze", help="did the conclusion change? (paired analysis)")
    analyze.add_argument("--reference", help="lm-eval output of the reference run")
    analyze.add_argument("--runs", nargs="+",
                         help="lm-eval outputs to compare (NAME=PATH names a run)")
    analyze.add_argument("--out", required=True, help="folder for report, CSVs and figures")
    analyze.add_argument("--grid", nargs="*", help="runs of models x configurations (rank flips)")
    analyze.add_argument("--core", nargs="*", metavar="FACTOR=LEVELS",
                         help="core sub-envelope of the grid, e.g. template_tier=minimal,detailed")
    analyze.add_argument("--intersection", action="store_true",
                         help="compare the items all runs share (size is reported)")
    analyze.add_argument("--bootstrap", type=int, default=10_000, help="resamples (10000)")
    analyze.add_argument("--mc-draws", type=int, default=1_000, help="draws per size (1000)")
    analyze.add_argument("--seed", type=int, default=0)
    analyze.add_argument("--level", type=float, default=0.95)
    analyze.add_argument("--template-sd", type=float, help="prompt-template SD (pp) for QRI")
    analyze.add_argument("--no-progress", action="store_true")
    analyze.add_argument("--overwrite", action="store_true",
                         help="replace an earlier analysis in --out (never mixed with it)")
    analyze.add_argument("--compare-harness", nargs="+", metavar="HARNESS=PATH",
                         help="the same model through several harnesses: lm_eval=DIR, "
                              "inspect=LOG, helm=RUN_DIR (the first is the reference)")
    analyze.set_defaults(func=_cmd_analyze)

    seq = sub.add_parser("sequential", help="evaluate nested subsets until the claim is "
                                            "settled (group-sequential paired comparison)")
    seq.add_argument("--reference-args", required=True, help="hf-metered --model_args")
    seq.add_argument("--candidate-args", required=True, help="hf-metered --model_args")
    seq.add_argument("--reference-batch", default="1")
    seq.add_argument("--candidate-batch", default="1")
    seq.add_argument("--metric", default="accuracy", help="accuracy, bias_s_dis or bias_s_amb")
    seq.add_argument("--margin", type=float, default=2.0, help="equivalence margin in points")
    seq.add_argument("--alpha", type=float, default=0.05)
    seq.add_argument("--beta", type=float, default=0.2)
    seq.add_argument("--looks", default="12p5pct,25pct,37p5pct,50pct,75pct,instrument",
                     help="nested BBQ memberships or category,example_id CSVs, smallest first")
    seq.add_argument("--path", default="loglik", help="loglik or generative")
    seq.add_argument("--out", required=True)
    seq.add_argument("--quiet", action="store_true", help="do not echo lm-eval's output")
    seq.set_defaults(func=_cmd_sequential)

    export = sub.add_parser("export-upstream",
                            help="our tasks as lm-evaluation-harness task folders")
    export.add_argument("tasks", nargs="+", help="bbq_instrument, bbq_subset_<membership>, "
                                                 "xstest_ext")
    export.add_argument("--out", required=True, help="folder for the task folders")
    export.add_argument("--template-tier", help="prompt tier (default: the task's)")
    export.add_argument("--local-data", action="store_true",
                        help="data_files from the local data folder (offline runs only)")
    export.set_defaults(func=_cmd_export_upstream)

    mde = sub.add_parser("mde", help="paired minimum detectable effect")
    mde.add_argument("--m", type=int, help="paired items")
    mde.add_argument("--rho-d", type=float, help="discordance rate (share of items that flip)")
    mde.add_argument("--alpha", type=float, default=0.05)
    mde.add_argument("--power", type=float, default=0.8)
    mde.add_argument("--design-effect", type=float, default=1.0,
                     help="variance inflation of clustered items (natural units); --runs "
                          "estimates it")
    mde.add_argument("--runs", nargs=2, metavar=("REFERENCE", "RUN"),
                     help="estimate rho_d (and m) from two lm-eval outputs")
    mde.add_argument("--card", help="write a five-line Markdown pre-registration card here")
    mde.set_defaults(func=_cmd_mde)

    campaign = sub.add_parser("campaign", help="models x conditions x tasks, resumable")
    campaign.add_argument("spec", nargs="?", help="CAMPAIGN.yaml (or use --preset)")
    campaign.add_argument("--preset", help="a built-in campaign: paper-stress-test")
    campaign.add_argument("--model_args", default="", help="--preset: hf-metered model_args")
    campaign.add_argument("--tasks", default="bbq", help="--preset: benchmark block (bbq)")
    campaign.add_argument("--path", default="loglik", choices=("generative", "loglik"),
                          help="--preset: scoring path")
    campaign.add_argument("--large-batch", type=int, default=32,
                          help="--preset: the batch size of M1 and M5a (32)")
    campaign.add_argument("--limit", type=int, help="--preset: items per cell (smoke tests)")
    _add_campaign_options(campaign)
    grid = sub.add_parser("grid", help="models x configuration axes, then rank flips")
    grid.add_argument("spec", help="GRID.yaml")
    _add_campaign_options(grid)

    judge = sub.add_parser("judge", help="Bias Score and Reasoning Quality of generated reasoning")
    judge.add_argument("run_dir", help="lm-eval output of a generative run (--log_samples)")
    judge.add_argument("--judge-model", default="hf-metered", help="any lm-eval model name")
    judge.add_argument("--judge-model_args", default="",
                       help="its model_args (default: the embedded model)")
    judge.add_argument("--batch-size", type=int, default=8)
    judge.add_argument("--device", help="e.g. cuda:0 or cpu")
    judge.add_argument("--max-gen-toks", type=int, default=96)
    judge.add_argument("--limit", type=int, help="judge the first N items per task")
    judge.add_argument("--rubrics", default="bias_score,reasoning_quality")
    judge.add_argument("--overwrite", action="store_true", help="replace earlier judge scores")
    judge.set_defaults(func=_cmd_judge)
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
