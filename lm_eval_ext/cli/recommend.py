"""``lm-eval-ext recommend PILOT [PILOT ...] --claim METRIC=MARGIN ...``: the cheapest protocol."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lm_eval_ext.cli.options import probability


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``recommend``."""
    rec = sub.add_parser("recommend", help="the cheapest protocol that keeps every claim, from "
                                           "a pilot's analysis")
    rec.add_argument("pilot", nargs="+", help="the `lm-eval-ext analyze --out` folder of a "
                                              "pilot (reference vs candidate protocols); one "
                                              "per model as NAME=FOLDER to choose one protocol "
                                              "for several models (claims then hold for each)")
    rec.add_argument("--claim", action="append", required=True, metavar="METRIC=MARGIN_PP",
                     help="a pre-registered claim and the margin (points) it must resolve, "
                          "e.g. --claim accuracy=2 --claim bias_s_dis=5")
    rec.add_argument("--sizes", help="subset sizes in natural units, comma separated (default: "
                                      "the instrument's nested memberships, 62,125,250,500; the "
                                      "largest is the full instrument)")
    rec.add_argument("--alpha", type=probability, default=0.05)
    rec.add_argument("--power", type=probability, default=0.8)
    rec.add_argument("--max-risk", type=probability, default=0.2,
                     help="largest accepted risk that a claim's conclusion moves")
    rec.add_argument("--level", type=probability, default=0.95,
                     help="the pilot analysis' interval level")
    rec.add_argument("--out", type=Path, help="write card.json and card.md into this folder")
    rec.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the recommendation; write the card if asked."""
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.analysis.recommendation import (
        INSTRUMENT_SIZES_UNITS,
        ITEMS_PER_UNIT,
        card,
        card_markdown,
        claims_for,
        parse_claims,
        pilot_candidates,
    )
    from lm_eval_ext.analysis.stats.recommend import recommend

    try:
        sizes = ([int(s) for s in args.sizes.split(",") if s.strip()] if args.sizes
                 else list(INSTRUMENT_SIZES_UNITS))
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise AnalysisInputError(f"recommend: --sizes {args.sizes!r} is not a list of positive "
                                 "natural-unit counts (e.g. --sizes 62,125,250,500)")
    parsed = parse_claims(args.claim)
    candidates, reference = pilot_candidates(args.pilot, args.level)
    claims = claims_for(parsed, reference["pilots"])
    result = recommend(candidates, claims, sizes, ITEMS_PER_UNIT, alpha=args.alpha,
                       power=args.power, max_risk=args.max_risk)
    data = card(result, claims, reference, max(sizes),
                {"alpha": args.alpha, "power": args.power, "max_risk": args.max_risk,
                 "sizes_units": sizes, "pilots": [str(p) for p in args.pilot]})
    text = card_markdown(data)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "card.json").write_text(json.dumps(data, indent=2) + "\n")
        (args.out / "card.md").write_text(text)
    return 0
