"""``lm-eval-ext sequential``: evaluate nested subsets until the claim is settled."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sequential``."""
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
    seq.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the looks; print each look's decision and the final one."""
    from lm_eval_ext.campaign.sequential_evaluation import Arm, run_sequential

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
