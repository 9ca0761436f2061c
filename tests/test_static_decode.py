"""The static-cache decode (the GPU fast path's, here without the CUDA graph) against generate.

fp32 on the CPU: every row's tokens equal transformers' own ``generate``; the mask is built
for both attention kernels it supports; models it cannot take are named with the reason.
The CUDA-graph replay itself runs on the H200 (benchmarks/gen_throughput.py, results map).
"""

from __future__ import annotations

import types

import pytest
import torch
from helpers import PROMPTS, random_prompts, tiny_llama, until_end
from transformers import Gemma3TextConfig, LlamaConfig, LlamaForCausalLM
from transformers.generation.stopping_criteria import StopStringCriteria

from lm_eval_ext.backends.hf.metered import HFMeteredLM
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.generation.graphed import (
    DecodeGraphs,
    static_decode_problem,
    static_greedy_decode,
)
from lm_eval_ext.generation.greedy import eos_token_ids


def test_static_decode_equals_generate_on_the_embedded_model(embedded_lm):
    model, tokenizer = embedded_lm.model, embedded_lm.tokenizer
    rows = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                          add_generation_prompt=True)["input_ids"]
            for p in PROMPTS]
    batch = tokenizer.pad({"input_ids": rows}, padding_side="left", return_tensors="pt")
    assert len(set(map(len, rows))) > 1  # left padding is exercised
    eos = eos_token_ids(model, tokenizer)
    result = static_greedy_decode(model, batch["input_ids"], batch["attention_mask"], 10, eos,
                                  cuda_graph=False)
    reference = model.generate(**batch, max_new_tokens=10, do_sample=False,
                               pad_token_id=tokenizer.pad_token_id
                               )[:, batch["input_ids"].shape[1]:].tolist()
    assert result.tokens == until_end(reference, set(eos), 10)
    assert result.graph_problem is None
    stop = StopStringCriteria(tokenizer, ["."])  # rows end on a stop string, as generate's
    stopped = static_greedy_decode(model, batch["input_ids"], batch["attention_mask"], 10, eos,
                                   stop, cuda_graph=False).tokens
    reference = model.generate(**batch, max_new_tokens=10, do_sample=False, stop_strings=["."],
                               tokenizer=tokenizer, pad_token_id=tokenizer.pad_token_id
                               )[:, batch["input_ids"].shape[1]:].tolist()
    assert any("." in tokenizer.decode(row) for row in stopped)
    for mine, theirs in zip(stopped, reference, strict=True):
        ended = mine[-1] in eos or tokenizer.decode(mine).endswith(".")
        assert mine == theirs[:len(mine)] and (len(mine) == 10 or ended)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_static_decode_equals_generate_with_either_mask(attention):
    """A bool mask for sdpa, an additive one for eager; rows end early on an end token."""
    model = tiny_llama(attention, seed=0)
    ids = torch.randint(3, 97, (4, 9))
    mask = (torch.arange(9) >= torch.tensor([[3], [5], [0], [1]])).long()
    ids[mask == 0] = 0
    plain = static_greedy_decode(model, ids, mask, 12, [-1], cuda_graph=False).tokens
    eos = [plain[2][3]]  # row 2 ends at its fourth token
    result = static_greedy_decode(model, ids, mask, 12, eos, cuda_graph=False)
    reference = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12,
                               do_sample=False, eos_token_id=eos, pad_token_id=0)[:, 9:]
    assert result.tokens == until_end(reference.tolist(), set(eos), 12)
    assert len(result.tokens[2]) == 4 and max(map(len, result.tokens)) == 12


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_rows_that_end_leave_the_batch_and_the_tokens_stay_generates(attention):
    """Most rows end within the first check's steps: the batch is cut, the tokens unchanged."""
    model = tiny_llama(attention, seed=1)
    ids = torch.randint(3, 97, (20, 7))
    mask = torch.ones_like(ids)
    mask[::3, :2] = 0
    ids[mask == 0] = 0
    plain = static_greedy_decode(model, ids, mask, 20, [-1], cuda_graph=False).tokens
    eos = sorted({row[1] for row in plain[:12]})  # rows 0-11 end by their second token
    result = static_greedy_decode(model, ids, mask, 20, eos, cuda_graph=False)
    reference = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=20,
                               do_sample=False, eos_token_id=eos, pad_token_id=0)[:, 7:]
    assert result.tokens == until_end(reference.tolist(), set(eos), 20)
    assert result.compactions >= 1 and max(map(len, result.tokens)) > 8
    whole = static_greedy_decode(model, ids, mask, 20, eos, cuda_graph=False, compact=False)
    assert whole.tokens == result.tokens and whole.compactions == 0


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_later_batch_runs_on_the_kept_cache_and_still_gets_generates_tokens(attention):
    """The second batch writes its shorter prompts over the first's cache (stale keys masked)."""
    model = tiny_llama(attention, seed=3)
    graphs = DecodeGraphs()
    batches = [random_prompts(3, 9, [0, 2, 4], seed=4),  # cache of 9 + 12 columns, kept
               random_prompts(3, 7, [1, 0, 3], seed=5),  # needs 19 of its 21: reuses it
               random_prompts(2, 7, [0, 2], seed=6),  # other rows: its own cache
               random_prompts(2, 2, [0, 1], seed=7)]  # needs 14 of 19 (< 0.8): its own
    reused = []
    for ids, mask in batches:
        result = static_greedy_decode(model, ids, mask, 12, [-1], cuda_graph=False,
                                      graphs=graphs)
        reference = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12,
                                   do_sample=False, eos_token_id=None, pad_token_id=0)
        assert result.tokens == reference[:, ids.shape[1]:].tolist()
        reused.append(result.reused)
    assert reused == [False, True, False, False]
    assert graphs.kept is not None and graphs.kept.mask.shape == (2, 1, 1, 14)


def test_models_the_static_decode_cannot_take_are_named():
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2))
    assert static_decode_problem(llama) is None
    llama.config._attn_implementation = "flex_attention"
    assert static_decode_problem(llama) == "attention implementation 'flex_attention'"
    gemma = types.SimpleNamespace(config=Gemma3TextConfig(sliding_window=512))
    assert static_decode_problem(gemma) == "sliding-window attention layers"
    quantized = types.SimpleNamespace(config=llama.config, hf_quantizer=object())
    assert static_decode_problem(quantized).startswith("quantized weights")


def test_cuda_graphs_takes_a_boolean_and_the_cpu_never_replays(embedded_lm):
    with pytest.raises(ConfigError, match=r"cuda_graphs='maybe' is not a boolean"):
        HFMeteredLM.check_model_args({"cuda_graphs": "maybe"})
    stats = embedded_lm.fast_generation.stats
    # on the CPU graphs do not apply: recorded as None, never replayed
    assert embedded_lm.generation_settings().cuda_graphs is None
    assert stats.graph_batches == 0 and not stats.eager_reasons

