"""``hf-metered``: lm-eval's HF model with inference-only energy metering per task.

``lm_eval --model hf-metered`` with no ``pretrained`` runs the embedded SmolLM2-135M-Instruct
(:mod:`lm_eval_ext.model_wrappers.embedded_model`). Every ``--model hf`` model arg works; the
extra ones (precision, energy, codecarbon, chat_template, ...) are in
:mod:`lm_eval_ext.model_wrappers.metered` and the README.

Energy boundary: for each (task, request type) the meter brackets the model's request loop
(tokenisation, batching, forward passes / generation) between CUDA-synchronised edges.
Model load, data preparation, prompt building, metrics, judging and file writing are outside;
automatic batch-size probes are cut out; ``--use_cache`` hits never reach the model. Results
land in ``results_*.json -> config.metering`` through ``get_model_info``.
"""

from __future__ import annotations

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from lm_eval_ext.model_wrappers.metered import MeteredMixin


@register_model("hf-metered")
class HFMeteredLM(MeteredMixin, HFLM):
    """``hf`` plus metering, precision switches and an embedded default model."""

    MODEL_NAME = "hf-metered"
