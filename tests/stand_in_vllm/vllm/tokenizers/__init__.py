"""Stand-in for ``vllm.tokenizers``: the checkpoint's own transformers tokenizer."""

from transformers import AutoTokenizer


def get_tokenizer(name, tokenizer_mode="auto", trust_remote_code=False, revision=None, **kwargs):  # noqa: D103
    return AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code,
                                         revision=revision, **kwargs)
