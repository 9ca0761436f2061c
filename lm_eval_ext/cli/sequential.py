"""``lm-eval-ext sequential``: evaluate nested subsets until the claim is settled."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from lm_eval_ext.cli.options import (
    batch_size,
    check_power_above_alpha,
    folder,
    points,
    probability,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sequential``."""
    seq = sub.add_parser("sequential", help="evaluate nested subsets until the claim is "
                                            "settled (group-sequential paired comparison)")
    seq.add_argument("--reference-args", required=True, help="hf-metered --model_args")
    seq.add_argument("--candidate-args", required=True, help="hf-metered --model_args")
    seq.add_argument("--reference-batch", type=batch_size, default="1",
                     help="lm-eval --batch_size of the reference")
    seq.add_argument("--candidate-batch", type=batch_size, default="1",
                     help="lm-eval --batch_size of the candidate")
    seq.add_argument("--metric", default="accuracy", choices=("accuracy", "bias_s_dis", "bias_s_amb"),
                     help="the pre-registered metric")
    seq.add_argument("--margin", type=points, default=2.0,
                     help="equivalence margin in percentage points")
    seq.add_argument("--alpha", type=probability, default=0.05, help="total type-I error")
    seq.add_argument("--beta", type=probability, default=0.2, help="type-II error (1 - power)")
    seq.add_argument("--looks", default="12p5pct,25pct,37p5pct,50pct,75pct,instrument",
                     help="nested BBQ memberships or category,example_id CSVs, smallest first")
    seq.add_argument("--path", default="loglik", choices=("loglik", "generative"),
                     help="scoring path")
    seq.add_argument("--out", required=True, type=folder,
                     help="folder for the card, the looks and sequential.json")
    seq.add_argument("--quiet", action="store_true", help="do not echo lm-eval's output")
    seq.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the looks; print each look's decision and the final one."""
    from lm_eval_ext.campaign.sequential_evaluation import Arm, run_sequential

    check_power_above_alpha("sequential", 1 - args.beta, args.alpha,
                            f"power 1 - --beta = {1 - args.beta:g}",
                            "give a --beta below 1 - alpha (0.2 is usual)")
    outcome = run_sequential(
        args.out, Arm(args.reference_args, args.reference_batch),
        Arm(args.candidate_args, args.candidate_batch), metric=args.metric,
        margin_pp=args.margin, alpha=args.alpha, beta=args.beta, looks=args.looks.split(","),
        path=args.path, echo=not args.quiet)
    for look in outcome["looks"]:
        print(f"look {look['look']} ({look['membership']}, {look['n_items']} items): "
              f"delta {100 * look['delta']:+.2f} pp, {look_interval(look, args.metric)} -> "
              f"{look['decision']}")
    print(f"decision: {outcome['decision']} after {outcome['items_evaluated']} of "
          f"{outcome['items_in_family']} items; {Path(args.out) / 'sequential.json'}")
    return 0


def look_interval(look: dict, metric: str) -> str:
    """The interval that decided a look (``sequential.json``'s look), in points.

    The "changed" interval at the look's boundary; with it, where the look settled
    equivalence, the TOST interval that did (``1 - 2 alpha_k``). With no spread (SE 0) a Wald
    interval is a point, which decides nothing: then the exact bound of no discordant unit
    (accuracy), or no interval.
    """
    from lm_eval_ext.analysis.stats.group_sequential import EQUIVALENT, boundary_level

    (low, high), (tost_low, tost_high) = look["ci"], look["tost_ci"]
    if not (math.isfinite(low) and math.isfinite(high)):
        return (f"no interval ({look['n_clusters']} natural unit(s) so far"
                + (": fewer than 2" if look["n_clusters"] < 2 else
                   f"; {metric} not defined on them") + ")")
    if look["se"] == 0:
        if tost_low != tost_high:  # accuracy, no discordant unit: the exact bound
            return (f"no discordant unit, so |delta| is at most {100 * tost_high:.2f} pp "
                    f"(exact one-sided {100 * (1 - look['alpha_spent']):.4g}% bound)")
        return f"no interval (no spread: every natural unit's {metric} delta is alike)"
    interval = (f"{100 * boundary_level(look['z_boundary']):.4g}% CI [{100 * low:+.2f}, "
                f"{100 * high:+.2f}]")
    if look["decision"] == EQUIVALENT:
        interval += (f", {100 * (1 - 2 * look['alpha_spent']):.4g}% equivalence interval "
                     f"[{100 * tost_low:+.2f}, {100 * tost_high:+.2f}]")
    return interval
