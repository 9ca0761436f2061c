"""The vLLM backend: ``vllm-metered`` over lm-eval's vLLM model."""
