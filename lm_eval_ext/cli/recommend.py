"""``lm-eval-ext recommend PILOT [PILOT ...] --claim METRIC=MARGIN ...``: the cheapest protocol."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from lm_eval_ext.cli.options import (
    RESAMPLES,
    check_power_above_alpha,
    folder,
    non_negative_int,
    probability,
    refuse_unused,
)
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.files import probe_writable, write_files_atomic


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``recommend``."""
    rec = sub.add_parser("recommend", help="the cheapest protocol certified to keep every claim, "
                                           "from a pilot's analysis")
    rec.add_argument("pilot", nargs="+", help="the `lm-eval-ext analyze --out` folder of a "
                                              "pilot (reference vs candidate protocols); one "
                                              "per model as NAME=FOLDER to choose one protocol "
                                              "for several models")
    rec.add_argument("--claim", action="append", required=True, metavar="METRIC[@A[-B]]=MARGIN_PP",
                     help="a pre-registered claim and the margin (points) it must resolve: "
                          "--claim accuracy=2 (with several pilots: each model's value), "
                          "--claim accuracy@gemma=2 (one model), --claim "
                          "accuracy@gemma-smollm=5 (the difference between two models)")
    rec.add_argument("--sizes", help="subset sizes in natural units, comma separated (default: "
                                      "the instrument's nested memberships, 62,125,250,500; the "
                                      "largest is the full instrument)")
    rec.add_argument("--alpha", type=probability, default=0.05,
                     help="the chance of recommending a protocol that shifts some claim by its "
                          "margin or more (and the planned tests' level)")
    rec.add_argument("--power", type=probability, default=0.8)
    spend = rec.add_mutually_exclusive_group()
    spend.add_argument("--order", metavar="RUN,RUN,...",
                       help="test the candidates as a fixed sequence declared before the pilot "
                            "(each at the full alpha until one fails; unlisted ones are not "
                            "certified); default: Holm over every candidate")
    spend.add_argument("--weights", metavar="RUN=W,...",
                       help="weighted Holm with weights declared before the pilot (unlisted "
                            "candidates get 0), e.g. --weights int8_b1=0.8,nf4_b1=0.2")
    rec.add_argument("--bootstrap", type=RESAMPLES, default=2000, metavar="B",
                     help="natural-unit bootstrap resamples for the pilot's standard errors")
    rec.add_argument("--seed", type=non_negative_int, default=0)
    rec.add_argument("--out", type=folder, help="write card.json and card.md into this folder")
    rec.add_argument("--overwrite", action="store_true",
                     help="replace a card already in --out (kept otherwise: a card is a record)")
    rec.set_defaults(func=run)
    rec.positionals_anywhere("pilot")


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def _weights(text: str | None) -> dict[str, float]:
    """``RUN=W,...`` as a mapping; a malformed entry is one line."""
    from lm_eval_ext.analysis.errors import AnalysisInputError

    out = {}
    for entry in _names(text):
        name, _, value = entry.partition("=")
        try:
            weight = float(value)
        except ValueError:
            raise AnalysisInputError(f"recommend: --weights entry {entry!r} is not RUN=WEIGHT "
                                     "(e.g. --weights int8_b1=0.8,nf4_b1=0.2)") from None
        if not math.isfinite(weight) or 0 < abs(weight) < 1e-300:  # 1 / weight is finite
            raise AnalysisInputError(f"recommend: --weights entry {entry!r}: a weight is a "
                                     "finite number of at least 1e-300 (e.g. 0.8)")
        if name.strip() in out:
            raise AnalysisInputError(f"recommend: --weights names {name.strip()} twice; give "
                                     "each run's weight once")
        out[name.strip()] = weight
    return out


def run(args: argparse.Namespace) -> int:
    """Print the recommendation; write the card if asked."""
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.analysis.pilot_checks import check_sizes
    from lm_eval_ext.analysis.recommendation import (
        INSTRUMENT_SIZES_UNITS,
        ITEMS_PER_UNIT,
        card_markdown,
        recommend_from_pilots,
    )
    from lm_eval_ext.analysis.report import RECOMMENDATION_FILES

    refuse_unused("--overwrite", args.overwrite, "--out", args.out)
    try:
        sizes = ([int(s) for s in args.sizes.split(",") if s.strip()] if args.sizes
                 else list(INSTRUMENT_SIZES_UNITS))
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise AnalysisInputError(f"recommend: --sizes {args.sizes!r} is not a list of positive "
                                 "natural-unit counts (e.g. --sizes 62,125,250,500)")
    check_sizes(sizes, max(INSTRUMENT_SIZES_UNITS), ITEMS_PER_UNIT)
    if args.out and any(any(Path(args.out).glob(pattern))
                        for pattern in ("results_*.json", "*/results_*.json")):
        raise ConfigError(f"recommend: --out {args.out} is an lm-eval run folder; write the card "
                          "into its own folder (e.g. --out cards/)")
    card_json, card_md = RECOMMENDATION_FILES
    if args.out and (Path(args.out) / card_json).exists() and not args.overwrite:
        raise ConfigError(f"recommend: --out {args.out} holds a card already (a card is a "
                          "record); name another folder, or pass --overwrite to replace it")
    if args.out:  # before any work: a card that cannot be kept
        probe_writable(Path(args.out))
    check_power_above_alpha("recommend", args.power, args.alpha, f"--power {args.power:g}",
                            "give a power above alpha (0.8 is usual)")
    data = recommend_from_pilots(args.pilot, args.claim, sizes_units=sizes, alpha=args.alpha,
                                 power=args.power, n_resamples=args.bootstrap, seed=args.seed,
                                 order=_names(args.order), weights=_weights(args.weights))
    text = card_markdown(data)
    print(text, end="")
    if args.out:
        write_files_atomic(args.out, {card_json: json.dumps(data, indent=2) + "\n",
                                      card_md: text})
    return 0
