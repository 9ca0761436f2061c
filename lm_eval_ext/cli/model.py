"""``lm-eval-ext model prepare``: convert the embedded model once."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``model prepare``."""
    model = sub.add_parser("model", help="the embedded default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    prepare = model_sub.add_parser("prepare", help="download/convert the embedded model once")
    prepare.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    """Convert (once) and print the cached checkpoint's folder."""
    from lm_eval_ext.model_wrappers.embedded_model import ensure_checkpoint

    print(ensure_checkpoint())
    return 0
