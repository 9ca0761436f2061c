"""``lm-eval-ext campaign`` and ``lm-eval-ext grid``: many cells, resumable, then analysed."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from lm_eval_ext.cli.options import DRAWS, RESAMPLES, folder, non_negative_int, positive_int

if TYPE_CHECKING:
    from lm_eval_ext.campaign import CampaignOutcome


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``campaign`` and ``grid`` (they share the cell options)."""
    campaign = sub.add_parser("campaign", help="models x conditions x tasks, resumable")
    campaign.add_argument("spec", nargs="?", help="CAMPAIGN.yaml (or use --preset; with "
                                                     "neither, the copy --out keeps)")
    campaign.add_argument("--preset", help="a built-in campaign: paper-stress-test")
    campaign.add_argument("--model_args", help="--preset: hf-metered model_args (default: none)")
    campaign.add_argument("--tasks", help="--preset: benchmark block (bbq, the default)")
    campaign.add_argument("--path", choices=("generative", "loglik"),
                          help="--preset: scoring path (default: loglik)")
    campaign.add_argument("--large-batch", type=positive_int,
                          help="--preset: the batch size of M1 and M5a (default: 32)")
    campaign.add_argument("--limit", type=positive_int, help="--preset: items per cell (smoke tests)")
    campaign.add_argument("--execution", choices=("fast", "lm-eval"),
                          help="every cell in this mode: fast (replayed scoring, the fast "
                               "generation path; the default) or lm-eval (lm-eval's own forward "
                               "and loop, as the paper ran: ratios then measure the change only)")
    campaign.add_argument("--judge", action=argparse.BooleanOptionalAction,
                          help="judge the generative cells' reasoning before the analysis "
                               "(Bias Score, Reasoning Quality; default: on for --preset "
                               "paper-stress-test --path generative, else off)")
    campaign.add_argument("--judge-limit", type=positive_int,
                          help="judge the first N items of each cell (default: every item)")
    campaign.add_argument("--judge-model",
                          help="any lm-eval model name (default: hf-metered)")
    campaign.add_argument("--judge-model-args",
                          help="its model_args (default: none, the embedded model)")
    _add_cell_options(campaign)
    grid = sub.add_parser("grid", help="models x configuration axes, then rank flips")
    grid.add_argument("spec", nargs="?", help="GRID.yaml (with none, the copy --out keeps)")
    _add_cell_options(grid)


def _add_cell_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=folder, help="campaign folder (created, or resumed)")
    parser.add_argument("--shard", help="run every N-th cell: I/N (default: 1/1, every cell)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the cells and an estimated device time; run nothing")
    parser.add_argument("--calibration-limit", type=non_negative_int,
                        help="items per configuration for --dry-run's timing (0: none; "
                             "default 8)")
    parser.add_argument("--status", action="store_true",
                        help="completeness across all shards (exit 1 while cells are missing; "
                             "without a campaign file, the one --out keeps)")
    parser.add_argument("--no-analyze", action="store_true", help="skip the analysis")
    parser.add_argument("--analyze-only", action="store_true",
                        help="run no cell; analyse every comparison whose cells are done")
    parser.add_argument("--bootstrap", type=RESAMPLES,
                        help="analysis resamples (default 10000)")
    parser.add_argument("--mc-draws", type=DRAWS, help="analysis draws per size (default 1000)")
    parser.add_argument("--seed", type=non_negative_int, help="analysis seed (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no lm-eval output, one line per cell")
    parser.add_argument("--measure-all", action="store_true",
                        help="run every cell for real (default: a batch-1 log-likelihood or "
                             "greedy generative cell whose items lie inside a finished cell of "
                             "the same settings takes its answers from it, re-running a sample)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Status, dry run, or run the cells (then the analysis); one summary line."""
    from lm_eval_ext.analysis.errors import DegenerateDataWarning
    from lm_eval_ext.campaign import campaign_source, dry_run, run_campaign, status_lines

    _refuse_unused_options(args)
    spec_path = _spec_path(args)
    spec, source = campaign_source(  # the copy --out keeps is a campaign, a grid's too
        spec_path, grid=args.command == "grid" and spec_path == args.spec,
        preset=getattr(args, "preset", None),
        preset_options={k: getattr(args, k, None) for k in
                        ("model_args", "tasks", "path", "large_batch", "limit", "execution")})
    if args.status:
        lines, complete = status_lines(spec, args.out)
        print("\n".join(lines))
        return 0 if complete else 1
    if args.dry_run:
        calibration = 8 if args.calibration_limit is None else args.calibration_limit
        lines, calibrated = dry_run(spec, args.shard or "1/1", calibration or None,
                                    out=args.out, measure_all=args.measure_all)
        print("\n".join(lines))
        if not calibrated:
            print("a calibration run failed (its line above gives the cause): the cells of its "
                  "configuration would fail the same way; fix what it names and dry-run again",
                  file=sys.stderr)
        return 0 if calibrated else 1
    with warnings.catch_warnings():
        if args.quiet:  # numpy's and matplotlib's warnings too; our one-line notes stay
            warnings.simplefilter("ignore")
            warnings.simplefilter("default", DegenerateDataWarning)
        outcome = run_campaign(
            spec, args.out, source, shard=args.shard or "1/1", analyze=not args.no_analyze,
            analysis_settings={"n_resamples": _given(args.bootstrap, 10_000),
                               "mc_draws": _given(args.mc_draws, 1_000),
                               "seed": _given(args.seed, 0), "progress": not args.quiet},
            echo=not args.quiet, grid=args.command == "grid", analyze_only=args.analyze_only,
            measure_all=args.measure_all, judge=_judge(args))
    print(f"{args.command}: {len(outcome.done)} cells run, {len(outcome.skipped)} already done, "
          f"{len(outcome.failed)} failed, {len(outcome.busy)} held by other processes; "
          f"{'complete' if outcome.complete else 'incomplete'}: {args.out}/manifest.json")
    for report in outcome.reports:
        print(f"report: {report}")
    if args.analyze_only and not outcome.complete:  # a comparison was left out
        given = args.spec or (f"--preset {args.preset}" if args.preset else None)
        command = " ".join(filter(None, ["lm-eval-ext", args.command, given]))
        print(f"not every cell is done (`{command} --out {args.out} "
              "--status` lists them); the comparisons whose cells are not done were not "
              "analysed", file=sys.stderr)
        return 1
    if outcome.failed:
        print(failed_cells_advice(outcome, args.out))
    return 1 if outcome.failed else 0


def _spec_path(args: argparse.Namespace) -> str | None:
    """The campaign file: as given, else (no preset either) the copy the folder keeps."""
    kept = Path(args.out) / "campaign.yaml"
    if args.spec or getattr(args, "preset", None):
        return args.spec
    if not kept.is_file():
        from lm_eval_ext.errors import LmEvalExtError

        if args.command == "grid":
            raise LmEvalExtError(f"give GRID.yaml: {args.out} keeps no campaign.yaml from an "
                                 "earlier grid run")
        state = "does not exist" if not Path(args.out).exists() else "keeps no campaign.yaml"
        raise LmEvalExtError(f"--out {args.out} {state}, so no earlier campaign is there to "
                             "read: give the --out of an earlier campaign (check its name), or "
                             "CAMPAIGN.yaml or --preset paper-stress-test to start one")
    return str(kept)


def failed_cells_advice(outcome: CampaignOutcome, out: str) -> str:
    """What to do about the failed cells: a refused setting is fixed in the file, not rerun."""
    refused = [c for c in outcome.failed if c in outcome.refused]
    others = [c for c in outcome.failed if c not in outcome.refused]
    parts = [f"failed cells (logs under {out}/failed/): {', '.join(outcome.failed)}; each "
             "one's error is on its line above"]
    if refused:
        parts.append(f"{', '.join(refused)} refused (exit 2) and would fail the same way "
                     "again: do what the error says first (where it names a setting of the "
                     "campaign file, fix the file and run it with a new --out folder: a changed "
                     "file is another campaign)")
    if others:
        parts.append(f"{', '.join(others)}: once what the error names is fixed (memory, disk, "
                     "a file), rerun the same command (finished cells are kept)")
    return "; ".join(parts)


def _judge(args: argparse.Namespace):
    """The campaign's judge settings, or None (``--judge``; on for the generative preset)."""
    from lm_eval_ext.campaign.judging import JudgeSettings

    if not _judging(args):
        return None
    return JudgeSettings(model=_given(args.judge_model, "hf-metered"),
                         model_args=_given(args.judge_model_args, ""), limit=args.judge_limit)


def _judging(args: argparse.Namespace) -> bool:
    """Whether the campaign judges its cells: ``--judge``, else on for the generative preset."""
    wanted = getattr(args, "judge", None)
    if wanted is None:
        return getattr(args, "preset", None) == "paper-stress-test" and args.path == "generative"
    return wanted


def _given(value, default):
    return default if value is None else value


#: the modes in which no analysis (and no judging before it) runs
_NO_ANALYSIS = ("--status", "--dry-run", "--no-analyze")
#: the judge's own settings (they need the judge on)
_JUDGE_SETTINGS = ("--judge-limit", "--judge-model", "--judge-model-args")
#: each option that acts in some modes only, and the modes in which it does nothing
_IDLE_IN = {**dict.fromkeys(("--bootstrap", "--mc-draws", "--seed", "--judge",
                             *_JUDGE_SETTINGS), _NO_ANALYSIS),
            "--measure-all": ("--status", "--analyze-only"),
            "--shard": ("--status", "--analyze-only"),  # each covers every shard
            "--quiet": ("--status", "--dry-run"),
            "--no-analyze": ("--status", "--dry-run", "--analyze-only")}


def _refuse_unused_options(args: argparse.Namespace) -> None:
    """One mode at a time, and no option that does nothing in it (never ignored silently)."""
    from lm_eval_ext.errors import LmEvalExtError

    def given(option: str) -> bool:
        value = getattr(args, option.removeprefix("--").replace("-", "_"), None)
        return value is not None and value is not False

    modes = [mode for mode in ("--status", "--dry-run", "--analyze-only") if given(mode)]
    if len(modes) > 1:
        raise LmEvalExtError(f"{modes[0]} and {modes[1]} exclude each other (each is a mode of "
                             f"its own); give one of them")
    if given("--calibration-limit") and not given("--dry-run"):
        raise LmEvalExtError("--calibration-limit applies to --dry-run's timing, which is not "
                             "asked for: give --dry-run, or leave --calibration-limit out")
    for option, idle in _IDLE_IN.items():
        mode = next((m for m in idle if given(m)), None)
        if given(option) and mode is not None:
            raise LmEvalExtError(f"{option} does nothing with {mode}: leave it out, or drop "
                                 f"{mode}")
    setting = next((option for option in _JUDGE_SETTINGS if given(option)), None)
    if setting is not None and not _judging(args):
        raise LmEvalExtError(f"{setting} applies to the judge, which is off for this campaign: "
                             "add --judge, or leave it out")
