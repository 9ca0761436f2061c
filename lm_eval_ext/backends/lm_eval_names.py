"""Our models' names in lm-eval's model registry (``--model NAME``)."""

from __future__ import annotations

#: lm-eval model name -> "module:Class" (must match the class exactly so that the
#: registry's lazy placeholder upgrades to the class when the module is imported).
MODELS = {
    "hf-metered": "lm_eval_ext.backends.hf.metered:HFMeteredLM",
    "hf-multimodal-metered": "lm_eval_ext.backends.hf.multimodal:HFMultimodalMeteredLM",
    "vllm-metered": "lm_eval_ext.backends.vllm.metered:VLLMMeteredLM",
}
