"""``lm-eval-ext mde``: paired minimum detectable effect and a pre-registration card."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from lm_eval_ext.cli.options import (
    check_power_above_alpha,
    design_effect,
    output_file,
    positive_int,
    probability,
    refuse_replacing,
    refuse_unused,
    share,
)
from lm_eval_ext.errors import LmEvalExtError
from lm_eval_ext.files import probe_writable, stream_fd, write_text_atomic


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``mde``."""
    mde = sub.add_parser("mde", help="paired minimum detectable effect")
    mde.add_argument("--m", type=positive_int, help="paired items")
    mde.add_argument("--rho-d", type=share, help="discordance rate (share of items that flip)")
    mde.add_argument("--alpha", type=probability, default=0.05, help="two-sided type-I error")
    mde.add_argument("--power", type=probability, default=0.8, help="power at the MDE")
    mde.add_argument("--design-effect", type=design_effect,
                     help="variance inflation of clustered items (natural units; default 1); "
                          "--runs estimates it")
    mde.add_argument("--runs", nargs=2, metavar=("REFERENCE", "RUN"),
                     help="estimate rho_d (and m) from two lm-eval outputs")
    mde.add_argument("--card", type=output_file, help="write a five-line Markdown pre-registration card here")
    mde.add_argument("--overwrite", action="store_true",
                     help="replace an existing --card file (a card is a record: kept otherwise)")
    mde.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the MDE (from the given inputs or two runs); write the card if asked."""
    from lm_eval_ext.analysis import paired_mde, preregistration_card, required_items
    from lm_eval_ext.analysis.empirical_power import (
        discordance_upper_bound,
        paired_inputs_from_runs,
    )

    m, rho_d, bounded = args.m, args.rho_d, False
    deff = 1.0 if args.design_effect is None else args.design_effect
    refuse_unused("--overwrite", args.overwrite, "--card", args.card)
    check_power_above_alpha("mde", args.power, args.alpha, f"--power {args.power:g}",
                            "give a power above alpha (0.8 is usual)")
    if args.card and not Path(args.card).parent.is_dir():
        raise LmEvalExtError(f"--card {args.card}: folder {Path(args.card).parent} does not "
                             "exist; create it or write the card elsewhere")
    if args.card and not Path(args.card).exists():  # before any work: a card that cannot be kept
        probe_writable(Path(args.card))
    if args.card:
        _refuse_another_file(Path(args.card))
        refuse_replacing("--card", args.card, args.overwrite,
                         "an earlier card is a record of what was planned")
    if args.runs and args.rho_d is not None:
        raise LmEvalExtError("mde: give --rho-d or --runs, not both (--runs estimates rho_d "
                             "from the two runs)")
    if args.runs and args.design_effect is not None:
        raise LmEvalExtError("mde: give --design-effect or --runs, not both (--runs estimates "
                             "the design effect from the two runs)")
    if args.runs:
        inputs = paired_inputs_from_runs(*args.runs)
        if math.isnan(inputs.design_effect):  # no discordant item: nothing to estimate it from
            shown = "not estimable (no discordant item; used as 1)"
        else:
            shown = f"{inputs.design_effect:.3f}" + (
                " (used as 1: an estimate below 1 is noise around independent items)"
                if inputs.usable_design_effect != inputs.design_effect else "")
        print(f"empirical rho_d = {inputs.rho_d:.4f}, design effect = {shown} over "
              f"{inputs.m} paired items"
              + ("" if not inputs.dropped else " (the items both runs hold; left out: "
                 + ", ".join(f"{n} of {run}" for run, n in inputs.dropped.items()) + ")"))
        rho_d, deff, m = inputs.rho_d, inputs.usable_design_effect, m or inputs.m
        bounded = rho_d == 0
        if bounded:
            rho_d = discordance_upper_bound(inputs.m)
            print(f"no discordant items: the runs agree on all {inputs.m} paired items, so "
                  f"rho_d = 0 gives no MDE; the MDE is bounded by the MDE at rho_d = "
                  f"{rho_d:.4f}, the 95% upper confidence bound after 0 of {inputs.m} "
                  "discordant items (design effect taken as 1)")
            deff = 1.0
    if m is None or rho_d is None:
        raise LmEvalExtError("mde needs --m and --rho-d (or --runs REFERENCE RUN)")
    if deff > m:  # 1 + (cluster size - 1) x ICC: at most every item in one cluster
        raise LmEvalExtError(f"mde: --design-effect {deff:g} is above the {m} items; a design "
                             "effect is at most the number of items (all in one cluster): "
                             "give the variance inflation of your clustering (e.g. 1.5)")
    try:
        mde = 100 * paired_mde(m, rho_d, args.alpha, args.power, design_effect=deff)
    except ValueError as exc:
        raise LmEvalExtError(str(exc)) from exc
    print(f"paired MDE {'<=' if bounded else '='} {mde:.2f} pp (m={m}, rho_d={rho_d:g}, "
          f"design effect={deff:g}, "
          f"alpha={args.alpha:g}, power={args.power:g})")
    if mde > 100:
        need = required_items(0.5, rho_d, args.alpha, args.power, design_effect=deff)
        print(f"unattainable: a paired difference is at most 100 pp, so no effect is detectable "
              f"with m={m}; even 50 pp needs m >= {need}")
    if args.card:
        write_text_atomic(Path(args.card), preregistration_card(
            mde_pp=mde, rho_d=rho_d, m=m, alpha=args.alpha, power=args.power,
            design_effect=deff, bound_after=inputs.m if bounded else None))
        print(f"wrote {args.card}")
    return 0


#: how every card mde writes begins (:func:`preregistration_card`)
CARD_START = "- **MDE target**:"


def _refuse_another_file(card: Path) -> None:
    """An existing ``--card`` file that mde did not write (a report, a table) is never replaced.

    With ``--overwrite`` or not.
    """
    if not card.is_file() or stream_fd(card) is not None:
        return
    with open(card, encoding="utf-8", errors="replace") as handle:
        start = handle.read(len(CARD_START))
    if start != CARD_START:
        raise LmEvalExtError(f"--card {card} exists and is not a card mde wrote (it does not "
                             f"begin with {CARD_START!r}); name another file")
