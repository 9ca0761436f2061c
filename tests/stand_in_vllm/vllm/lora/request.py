"""Stand-in for ``vllm.lora.request`` (imported by lm-eval's vllm module)."""


class LoRARequest:  # noqa: D101
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("the stand-in engine has no LoRA")
