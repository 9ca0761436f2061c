"""Execution modes: how a run's requests were computed, so that a ratio compares like with like.

The same model, precision and batch size can run several times faster in one mode than in
another (batch-1 scoring of the 2,000-item instrument on one H200 replayed as CUDA graphs took
51.4 s where lm-eval's own forward took 206.3 s: docs/campaigns.md, the stress test). A ratio
whose two sides ran in different modes measures the mode as well as the change, so every run
names its mode (``config.metering.execution_mode``) and every ratio whose sides differ in it is
flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: mode name -> what it is (docs/energy.md has the table)
MODES = {
    "lm_eval_forward": "lm-eval's own scoring forward (HFLM._model_call)",
    "graph_replay": "lm-eval's scoring forward replayed as CUDA graphs (hf-metered cuda_graphs)",
    "shared_prefix": "an item's options scored in one packed forward (mc_scoring=shared_prefix)",
    "lm_eval_generate": "lm-eval's own generation loop (HFLM._model_generate)",
    "fast_generation": "hf-metered's fast generation path, decoded step by step",
    "fast_generation_graphs": "hf-metered's fast generation path, decode steps replayed as "
                              "CUDA graphs",
    "vllm": "the vLLM engine (vllm-metered)",
    "derived": "not run: answers and energy taken from a parent run (answers_from); written "
               "derived(PARENT_MODE) where the parent's mode is known",
}
#: the modes in which lm-eval runs its own code (no replay, no packing, no fast path)
LM_EVAL_MODES = ("lm_eval_forward", "lm_eval_generate")


def joined(modes: Mapping[str, str]) -> str | None:
    """A run's one mode string: its request types' modes, sorted and joined by ``+``."""
    names = sorted({mode for mode in modes.values() if mode})
    return "+".join(names) or None


def effective(mode: str) -> str:
    """The mode that computed a run's joules: a derived run's parent's (``derived(MODE)``)."""
    if mode.startswith("derived(") and mode.endswith(")"):
        return mode[len("derived("):-1]
    return mode


def mode_difference(reference: Any, run: Any) -> str | None:
    """Why a ratio of these two runs mixes execution modes (None: the same, or unknown).

    A derived run counts as its parent's mode; a bare ``derived`` (the parent's unknown) is
    not compared.
    """
    if not isinstance(reference, str) or not isinstance(run, str) or not reference or not run:
        return None
    if "derived" in (reference, run) or effective(reference) == effective(run):
        return None
    return f"execution modes differ ({run} vs {reference})"
