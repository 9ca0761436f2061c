"""``hf-multimodal-metered``: lm-eval's ``hf-multimodal`` with the same metering and switches.

lm-eval's multimodal HF model supports images for generation only, so image-grounded tasks
(BBQ-V) are generative. There is no embedded default: pass ``pretrained``.
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.registry import register_model
from lm_eval.models.hf_vlms import HFMultimodalLM

from lm_eval_ext.backends.hf.base import HFMeteredBase
from lm_eval_ext.backends.hf.shared_prefix import SharedPrefixStats
from lm_eval_ext.backends.model_args import HFMeteredArgs
from lm_eval_ext.generation.generator import FastGenerationStats
from lm_eval_ext.generation.settings import GenerationSettings


class HFMultimodalArgs(HFMeteredArgs):
    """hf-metered's args without an embedded default (the packaged models are text models)."""

    EMBEDDED_DEFAULT = False


@register_model("hf-multimodal-metered")
class HFMultimodalMeteredLM(HFMeteredBase, HFMultimodalLM):
    """``hf-multimodal`` plus metering and precision switches."""

    MODEL_NAME = "hf-multimodal-metered"
    OWN_ARGS = HFMultimodalArgs

    def scoring_stats(self) -> SharedPrefixStats:
        """lm-eval's own log-likelihood path."""
        return SharedPrefixStats()

    def generation_settings(self) -> GenerationSettings:
        """lm-eval's own generation loop."""
        return GenerationSettings()

    def generation_stats(self) -> FastGenerationStats:
        """Nothing counted: lm-eval's own loop."""
        return FastGenerationStats()

    def _model_multimodal_generate(self, *args: Any, **kwargs: Any):  # noqa: D102
        return self.metering.timed(super()._model_multimodal_generate, *args, **kwargs)

    def _model_multimodal_call(self, *args: Any, **kwargs: Any):  # noqa: D102
        return self.metering.timed(super()._model_multimodal_call, *args, **kwargs)
