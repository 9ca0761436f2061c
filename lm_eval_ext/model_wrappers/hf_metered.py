"""``hf-metered``: lm-eval's HF model with inference-only energy metering per task.

``lm_eval --model hf-metered`` with no ``pretrained`` runs the embedded SmolLM2-135M-Instruct
(:mod:`lm_eval_ext.model_wrappers.embedded_model`). Every ``--model hf`` model arg works; the
extra ones (precision, energy, codecarbon, chat_template, ...) and the energy boundary are in
:mod:`lm_eval_ext.model_wrappers.metered` and the README.
"""

from __future__ import annotations

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from lm_eval_ext.model_wrappers.metered import MeteredMixin
from lm_eval_ext.model_wrappers.shared_prefix import SharedPrefixMixin


@register_model("hf-metered")
class HFMeteredLM(MeteredMixin, SharedPrefixMixin, HFLM):
    """``hf`` plus metering, precision switches, an embedded default model, and packed scoring.

    ``mc_scoring=shared_prefix`` scores a multiple-choice item's options in one forward.
    """

    MODEL_NAME = "hf-metered"
