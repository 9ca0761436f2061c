"""lm-eval's response cache (``--use_cache PATH``) held to the model and settings that filled it.

lm-eval keys a cached answer by the request's text alone, so a cache filled by one model answers
another model's run (or another precision's) as its own: a run reported as SmolLM2 gave
Gemma's log-likelihoods. The first run that uses a path records beside it
(``PATH_lm_eval_ext.json``) the model and the model args its answers depend on
(:func:`~lm_eval_ext.backends.engine_key.answer_args`); a run of another model or settings is
refused before anything loads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lm_eval_ext.backends.engine_key import DERIVATION_ARGS, answer_args
from lm_eval_ext.errors import PreflightError
from lm_eval_ext.files import path_error, write_text_atomic


def owner_path(use_cache: str) -> Path:
    """The file beside lm-eval's ``<use_cache>_rank<N>.db`` that names who filled them."""
    return Path(f"{use_cache}_lm_eval_ext.json")


def cache_owner(model: str | None, model_args: Mapping[str, Any]) -> dict[str, Any]:
    """The model and the model args its answers depend on (canonical; not ``answers_from``)."""
    return {"model": model or "hf", "answer_args": {
        k: v for k, v in answer_args(model_args).items() if k not in DERIVATION_ARGS}}


def check_cache_owner(use_cache: str, owner: Mapping[str, Any], where: str = "--use_cache",
                      claim: bool = False) -> None:
    """Refuse a cache another model or setting filled; with ``claim``, record ``owner`` if none."""
    path = owner_path(use_cache)
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        recorded = None
    except (OSError, UnicodeDecodeError, ValueError):
        recorded = {}  # damaged: whose answers the cache holds is not known
    databases = sorted(path.parent.glob(f"{Path(use_cache).name}_rank*.db"))
    if recorded is None and databases:  # filled before any record (an older version, lm_eval)
        raise PreflightError(
            f"{where} {use_cache}: {databases[0]} holds cached answers with no record of the "
            "model and settings that filled them, and lm-eval keys a cached answer by the "
            "request's text alone, so they could be another model's taken as this run's: give "
            f"a new cache path (e.g. {where} {use_cache}_2), or delete {databases[0].name} to "
            "start this cache afresh")
    if recorded is not None and recorded != dict(owner):
        shown = (f"filled by {recorded.get('model')} with {recorded.get('answer_args')}"
                 if isinstance(recorded, dict) and recorded else f"{path} is damaged")
        raise PreflightError(
            f"{where} {use_cache}: the cache holds the answers of another model or settings "
            f"({shown}; this run: {owner['model']} with {owner['answer_args']}), and lm-eval "
            "keys a cached answer by the request's text alone, so they would be taken as this "
            f"run's: give this model and settings a cache path of their own (e.g. {where} "
            f"{use_cache}_2)")
    if claim and recorded is None:  # the run starts: its folder, as lm-eval would make it
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise path_error(path.parent, exc) from None
        write_text_atomic(path, json.dumps(dict(owner), sort_keys=True) + "\n")
