"""The embedded SmolLM2 checkpoint: provenance, tokenizer fix, and a real generation."""

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lm_eval_ext.backends import embedded_model


def test_checkpoint_provenance_and_context_length(embedded_checkpoint):
    marker = json.loads((embedded_checkpoint / "lm_eval_ext_model.json").read_text())
    assert marker["gguf_sha256"] == embedded_model.GGUF_SHA256
    tok_config = json.loads((embedded_checkpoint / "tokenizer_config.json").read_text())
    assert tok_config["model_max_length"] == 8192
    assert (embedded_checkpoint / "model.safetensors").stat().st_size > 500_000_000


def test_checkpoint_is_a_real_instruct_model(embedded_checkpoint):
    tok = AutoTokenizer.from_pretrained(embedded_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(embedded_checkpoint)
    assert getattr(model.config, "quantization_config", None) is None  # plain fp32, no GGUF quantiser
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids["input_ids"].shape[1]:])
