"""``hf-metered``: lm-eval's HF model with inference-only energy metering per task.

``lm_eval --model hf-metered`` with no ``pretrained`` runs the embedded SmolLM2-135M-Instruct
(:mod:`lm_eval_ext.backends.embedded_model`). Every ``--model hf`` model arg works; the
extra ones and the energy boundary are in :mod:`lm_eval_ext.backends.hf.base` and
``docs/hf-metered.md``.
"""

from __future__ import annotations

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from lm_eval_ext.backends.hf.base import HFMeteredBase
from lm_eval_ext.backends.hf.generation_seam import FastGeneration
from lm_eval_ext.backends.hf.shared_prefix import SharedPrefixScoring, SharedPrefixStats
from lm_eval_ext.generation.generator import FastGenerationStats


@register_model("hf-metered")
class HFMeteredLM(HFMeteredBase, SharedPrefixScoring, FastGeneration, HFLM):
    """``hf`` plus metering, precision, an embedded default model, packed scoring, fast generation.

    ``mc_scoring=shared_prefix`` scores a multiple-choice item's options in one forward;
    ``generation=fast`` generates in length-sorted batches sized to the memory, stopped by token.
    """

    MODEL_NAME = "hf-metered"

    def scoring_stats(self) -> SharedPrefixStats:  # noqa: D102
        return self.shared_prefix.stats

    def generation_stats(self) -> FastGenerationStats:  # noqa: D102
        return self.fast_generation.stats

    def reset_metering(self) -> None:
        """Fresh windows and fresh generation counts (several conditions on one loaded model)."""
        super().reset_metering()
        self.fast_generation.reset_counts()
