"""Built-in campaigns, written out as the same mapping a campaign YAML holds.

``paper-stress-test``: the seed paper's 19 runs per model x benchmark block (see
../shared/notes/paper_method.md section 2): M0 bf16 batch 1 on the full instrument, M1 a larger
batch, M2 int8 and M3 nf4 at batch 1, M4 every subset size and membership (13 runs), M5a the 50%
replicate 1 at the larger batch, M5b the same membership in int8 at batch 1.
"""

from __future__ import annotations

from typing import Any

from lm_eval_ext.campaign.spec import parse_model_args
from lm_eval_ext.errors import ConfigError

PATHS = {"generative": "", "loglik": "_loglik"}
#: M4 memberships in the paper's order: sizes descending, replicates 1-5 where they exist
M4_SUBSETS = ("75pct", "50pct", "50pct_r2", "50pct_r3", "50pct_r4", "50pct_r5", "37p5pct",
              "25pct", "12p5pct", "12p5pct_r2", "12p5pct_r3", "12p5pct_r4", "12p5pct_r5")
PRESETS = ("paper-stress-test",)


def paper_stress_test(*, model_args: str = "", tasks: str = "bbq", path: str = "loglik",
                      large_batch: int = 32, limit: int | None = None,
                      execution: str | None = None) -> dict[str, Any]:
    """The 19-cell stress test of one model on one benchmark block, as a campaign mapping.

    ``execution="lm-eval"``: every cell in lm-eval's own forward and generation loop, as the
    paper ran its conditions, so that M2 / M0 measures the quantization only.
    """
    if tasks != "bbq":
        raise ConfigError(f"--tasks {tasks!r}: the paper-stress-test preset needs a benchmark with "
                          "a frozen instrument and nested subset memberships; only bbq has them")
    if path not in PATHS:
        raise ConfigError(f"--path {path!r}: use generative or loglik")
    if large_batch < 2:
        raise ConfigError(f"--large-batch {large_batch}: M1 and M5a need a batch larger than 1")
    owned = sorted(set(parse_model_args(model_args, f"models.{_model_label(model_args)}"))
                   & {"precision", "dtype", "batch_size"})
    if owned:
        raise ConfigError(f"--model_args {', '.join(owned)}: the paper-stress-test preset sets "
                          "precision and batch size per condition (M0-M5); give the model only "
                          "(e.g. pretrained=...), or write a campaign file for other settings")
    suffix = PATHS[path]

    def subset(name: str) -> list[str]:
        return [f"bbq_subset_{name}{suffix}"]

    conditions: dict[str, Any] = {
        "M0": {"model_args": "precision=bf16", "batch_size": 1},
        "M1": {"model_args": "precision=bf16", "batch_size": large_batch},
        "M2": {"model_args": "precision=int8", "batch_size": 1},
        "M3": {"model_args": "precision=nf4", "batch_size": 1},
    }
    for name in M4_SUBSETS:
        label = "M4_" + (f"{name}_r1" if name in ("50pct", "12p5pct") else name)
        conditions[label] = {"model_args": "precision=bf16", "batch_size": 1,
                             "tasks": subset(name)}
    conditions["M5a"] = {"model_args": "precision=bf16", "batch_size": large_batch,
                         "tasks": subset("50pct")}
    conditions["M5b"] = {"model_args": "precision=int8", "batch_size": 1,
                         "tasks": subset("50pct")}
    m4 = [c for c in conditions if c.startswith("M4_")]
    return {
        "name": f"paper-stress-test-{path}" + (f"-{execution}" if execution else ""),
        **({"execution": execution} if execution else {}),
        "models": {_model_label(model_args): model_args},
        "tasks": [f"bbq_instrument{suffix}"],
        "lm_eval": {"limit": limit} if limit else {},
        "conditions": conditions,
        "compare": {"interventions": {"reference": "M0", "runs": ["M1", "M2", "M3"]},
                    "m5": {"reference": "M4_50pct_r1", "runs": ["M5a", "M5b"]}},
        "subsets": {"reference": "M0", "runs": m4},
    }


def _model_label(model_args: str) -> str:
    """``pretrained=/x/My-Model,...`` -> ``My-Model``; the embedded model -> ``embedded``."""
    for part in model_args.split(","):
        key, _, value = part.partition("=")
        if key.strip() == "pretrained" and value.strip():
            name = value.strip().rstrip("/").split("/")[-1]
            return "".join(ch if ch.isalnum() or ch in "_.+-" else "_" for ch in name)
    return "embedded"


def preset(name: str, **settings: Any) -> dict[str, Any]:
    """A built-in campaign by name."""
    if name != "paper-stress-test":
        raise ConfigError(f"--preset {name!r}: available presets: {', '.join(PRESETS)}")
    return paper_stress_test(**settings)
