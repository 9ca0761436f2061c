"""The hf backends: ``hf-metered`` and ``hf-multimodal-metered`` over lm-eval's HF models."""
