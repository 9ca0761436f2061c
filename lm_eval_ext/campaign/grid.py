"""A grid (SafetyRepro's envelope) as a campaign: models x benchmarks x configuration axes.

The YAML form (``lm-eval-ext grid GRID.yaml``)::

    name: envelope
    models: {small: "precision=bf16", other: "pretrained=/models/x"}
    benchmarks: [bbq_subset_12p5pct]        # generative task names; loglik adds _loglik
    template_tier: [minimal, detailed]
    num_fewshot: [0, 3]
    scoring_path: [generative, loglik]
    decoding: {greedy: {}, t0.7: {do_sample: true, temperature: 0.7}}   # generative only
    lm_eval: {limit: 100}

Each configuration is one condition (``generative.minimal.0shot.greedy``); the log-likelihood
path has no decoding axis. After the cells, ``analyze --grid`` gets every cell: rank flips,
Kendall tau and ANOVA shares per benchmark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import product
from typing import Any

from lm_eval_ext.campaign.presets import PATHS
from lm_eval_ext.campaign.spec import parse_model_args
from lm_eval_ext.errors import ConfigError

_KEYS = ("name", "models", "benchmarks", "template_tier", "num_fewshot", "scoring_path",
         "decoding", "lm_eval")


def model_identity(args: Mapping[str, Any]) -> str:
    """What a grid model's answers depend on (:func:`~lm_eval_ext.backends.engine_key.answer_args`)."""
    from lm_eval_ext.backends.engine_key import answer_args

    return json.dumps(answer_args(args), sort_keys=True)


def _levels(raw: Mapping[str, Any], key: str, default: list[Any]) -> list[Any]:
    value = raw.get(key, default)
    value = value if isinstance(value, list) else [value]
    if not value:
        raise ConfigError(f"grid {key}: give at least one level")
    return value


def grid_campaign(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The campaign mapping of a grid (validated by :func:`build_spec` afterwards)."""
    if not isinstance(raw, Mapping):
        raise ConfigError("a grid file holds a mapping with models, benchmarks and axes")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ConfigError(f"unknown grid keys {unknown}; valid: {', '.join(_KEYS)}")
    models = raw.get("models") or {}
    if not isinstance(models, Mapping) or len(models) < 2:
        raise ConfigError("grid models: at least two labelled models (rank flips compare models); "
                          "precision variants of one checkpoint may stand in, labelled as such")
    seen: dict[str, tuple[str, Any]] = {}
    for label, args in models.items():
        key = model_identity(parse_model_args(args, f"models.{label}"))
        if key in seen:
            other, other_args = seen[key]
            raise ConfigError(f"grid models {other!r} ({other_args or 'the embedded model'}) and "
                              f"{label!r} ({args or 'the embedded model'}) load the same model at "
                              "the same precision (they differ at most in how a run is "
                              "measured or batched, or in a default): rank flips between them "
                              "would measure noise; give each label another model or precision")
        seen[key] = (label, args)
    benchmarks = _levels(raw, "benchmarks", [])
    scored = [b for b in benchmarks if str(b).endswith("_loglik")]
    if scored:
        raise ConfigError(f"grid benchmarks: {scored[0]!r} names a scoring path; list the "
                          f"generative name {str(scored[0]).removesuffix('_loglik')!r} and set "
                          "scoring_path: [loglik] (the grid adds _loglik itself)")
    tiers = _levels(raw, "template_tier", ["default"])
    shots = _levels(raw, "num_fewshot", [0])
    paths = _levels(raw, "scoring_path", ["generative"])
    for path in paths:
        if path not in PATHS:
            raise ConfigError(f"grid scoring_path {path!r}: use generative or loglik")
    decoding = raw.get("decoding") or {"greedy": {}}
    if not isinstance(decoding, Mapping):
        raise ConfigError("grid decoding: a mapping of label -> gen_kwargs ({} = task default)")
    if raw.get("decoding") and "generative" not in paths:
        raise ConfigError(f"grid decoding ({', '.join(map(str, decoding))}) applies to the "
                          f"generative path, and scoring_path is {list(paths)}: add generative "
                          "to scoring_path, or leave decoding out")
    conditions: dict[str, Any] = {}
    for path, tier, n_shots in product(paths, tiers, shots):
        for label, gen_kwargs in (decoding.items() if path == "generative" else [("-", None)]):
            name = ".".join(str(p) for p in (path, tier, f"{n_shots}shot")
                            if p is not None) + ("" if label == "-" else f".{label}")
            settings: dict[str, Any] = {"tasks": [f"{b}{PATHS[path]}" for b in benchmarks],
                                        "num_fewshot": n_shots}
            if tier != "default":
                settings["metadata"] = {"template_tier": tier}
            if gen_kwargs:
                settings["gen_kwargs"] = dict(gen_kwargs)
            conditions[name] = settings
    return {"name": str(raw.get("name") or "grid"), "models": dict(models),
            "lm_eval": dict(raw.get("lm_eval") or {}), "conditions": conditions, "compare": {}}
