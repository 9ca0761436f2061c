"""``lm-eval-ext judge RUN_DIR``: Bias Score and Reasoning Quality of generated reasoning."""

from __future__ import annotations

import argparse

from lm_eval_ext.cli.options import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``judge``."""
    judge = sub.add_parser("judge", help="Bias Score and Reasoning Quality of generated reasoning")
    judge.add_argument("run_dir", help="lm-eval output of a generative run (--log_samples)")
    judge.add_argument("--judge-model", default="hf-metered", help="any lm-eval model name")
    judge.add_argument("--judge-model-args", "--judge-model_args", dest="judge_model_args", default="",
                       help="its model_args (empty: the embedded model)")
    judge.add_argument("--batch-size", type=positive_int,
                       help="judge prompts per batch (default: batch_size= of "
                            "--judge-model-args, else 8)")
    judge.add_argument("--device", help="e.g. cuda:0 or cpu (default: the model's)")
    judge.add_argument("--max-gen-toks", type=positive_int, default=96,
                       help="tokens the judge may generate per verdict")
    judge.add_argument("--limit", type=positive_int, help="judge the first N items per task")
    judge.add_argument("--rubrics", default="bias_score,reasoning_quality",
                       help="comma-separated rubric names")
    judge.add_argument("--overwrite", action="store_true", help="replace earlier judge scores")
    judge.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Judge and print one line per task."""
    from lm_eval_ext.command_preflight import check_device
    from lm_eval_ext.judge.run import judge_run

    if args.device is not None:  # lm-eval ran an unknown device on the CPU, or failed on it
        check_device(args.device)
    summaries = judge_run(args.run_dir, model=args.judge_model, model_args=args.judge_model_args,
                          batch_size=args.batch_size, device=args.device,
                          max_gen_toks=args.max_gen_toks, limit=args.limit,
                          rubrics=args.rubrics.split(","), overwrite=args.overwrite)
    for summary in summaries:
        counts = "; ".join(f"{name}: " + ", ".join(f"{n} {s}" for s, n in c.items() if n)
                           for name, c in summary["counts"].items())
        energy = (summary.get("metering") or {}).get("energy_joules")
        reused = (f"; reused the judging of {summary.get('created')} (nothing judged now; "
                  "--overwrite judges again)" if summary.get("reused") else "")
        print(f"{summary['task']} ({summary['n_items']} items): {counts}; judge energy "
              f"{'not measured' if energy is None else f'{energy:.1f} J'}{reused}")
    return 0
