"""Stand-in for ``vllm.renderers.hf``: the tokenizer's own chat template."""


def resolve_chat_template(tokenizer, chat_template, tools, *, model_config):  # noqa: D103
    return chat_template if chat_template is not None else tokenizer.chat_template
