"""The public transformers, torch and lm-eval APIs the generation path relies on, one test each.

Each test fails with a message naming the installed version and the API, so a release that
changes one is caught here (CI runs the quick tier on the newest releases and on the floor that
pyproject promises) rather than as a wrong answer deep inside a run. The behaviour asserted is
what :mod:`lm_eval_ext.generation` needs, nothing more.
"""

from __future__ import annotations

import inspect

import lm_eval
import pytest
import torch
import transformers
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, StaticCache

from lm_eval_ext.generation.attention import (
    DecodeForward,
    attention_kernel,
    layer_tensors,
    plain_layers,
)


def contract(holds: bool, api: str, library: str = "transformers") -> None:
    """Fail with the library's version and the API that changed."""
    version = {"transformers": transformers.__version__, "torch": torch.__version__,
               "lm_eval": lm_eval.__version__}[library]
    assert holds, (f"{library} {version}: {api} no longer behaves as lm_eval_ext.generation "
                   "relies on (see tests/test_library_contracts.py)")


@pytest.fixture(scope="module")
def tiny() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config).eval()


def _kv(rows: int, columns: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, 2, columns, 8, generator=generator),
            torch.randn(rows, 2, columns, 8, generator=generator))


def test_dynamic_cache_is_built_from_tensors_and_read_back_by_layer(tiny):
    tensors = [_kv(3, 5, seed) for seed in range(2)]
    cache = DynamicCache(ddp_cache_data=tensors, config=tiny.config)
    contract(len(cache.layers) == 2 and all(
        torch.equal(k, k0) and torch.equal(v, v0)
        for (k, v), (k0, v0) in zip(layer_tensors(cache), tensors, strict=True)),
        "DynamicCache(ddp_cache_data=..., config=...) and Cache.layers[i].keys/.values")
    contract(cache.get_seq_length() == 5, "Cache.get_seq_length()")
    contract(not any(cache.is_sliding) and plain_layers(tiny), "Cache.is_sliding")


def test_dynamic_cache_selects_and_repeats_rows(tiny):
    cache = DynamicCache(ddp_cache_data=[_kv(3, 4, seed) for seed in range(2)],
                         config=tiny.config)
    keys = cache.layers[0].keys.clone()
    cache.batch_select_indices(torch.tensor([2, 0]))
    contract(torch.equal(cache.layers[0].keys, keys[[2, 0]]), "Cache.batch_select_indices")
    cache.batch_repeat_interleave(2)
    contract(torch.equal(cache.layers[0].keys, keys[[2, 2, 0, 0]]),
             "Cache.batch_repeat_interleave")


def test_static_cache_update_writes_at_its_length_and_reset_empties_it(tiny):
    cache = StaticCache(config=tiny.config, max_cache_len=6)
    keys, values = _kv(2, 3, seed=1)
    for layer in range(2):
        cache.update(keys, values, layer)
    contract(cache.get_max_length() == 6 and int(cache.get_seq_length()) == 3,
             "StaticCache(config, max_cache_len) / update / get_max_length")
    more, _ = _kv(2, 1, seed=2)
    cache.update(more, more, 0)
    stored = cache.layers[0].keys
    contract(stored.shape == (2, 2, 6, 8) and torch.equal(stored[:, :, :3], keys)
             and torch.equal(stored[:, :, 3:4], more), "StaticCache.update appends at its length")
    address = stored.data_ptr()
    cache.reset()
    contract(int(cache.get_seq_length()) == 0 and cache.layers[0].keys.data_ptr() == address
             and not cache.layers[0].keys.any(), "Cache.reset() empties in place")


def test_forward_takes_a_cache_keyword_logits_to_keep_and_a_4d_mask(tiny):
    ids = torch.randint(3, 64, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[0, :2] = 0
    forward = DecodeForward(tiny)
    contract(forward.cache_key in inspect.signature(tiny.forward).parameters
             and forward.last_only == {"logits_to_keep": 1},
             "the forward's cache keyword (past_key_values or cache) and logits_to_keep")
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        plain = tiny(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
        four_d = (causal[None] & mask.bool()[:, None, :])[:, None]  # [rows, 1, query, key]
        custom = tiny(input_ids=ids, attention_mask=four_d, position_ids=positions).logits
    contract(torch.allclose(plain[1], custom[1], atol=1e-5)
             and torch.allclose(plain[0, 2:], custom[0, 2:], atol=1e-5),
             "a custom 4-D boolean attention mask passed through the forward")


def test_attention_kernel_and_text_config_are_readable(tiny):
    contract(attention_kernel(tiny) == "sdpa", "config._attn_implementation (read)")
    contract(tiny.config.get_text_config(decoder=True).num_hidden_layers == 2,
             "PretrainedConfig.get_text_config(decoder=True)")


def test_stop_string_criteria_takes_a_tokenizer_and_returns_one_flag_per_row(embedded_lm):
    from transformers.generation.stopping_criteria import StopStringCriteria

    tokenizer = embedded_lm.tokenizer
    rows = [tokenizer("Yes.\n", add_special_tokens=False)["input_ids"],
            tokenizer("Yes, no", add_special_tokens=False)["input_ids"]]
    width = max(map(len, rows))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows])
    flags = StopStringCriteria(tokenizer, ["\n"])(ids, None)
    contract(flags.tolist() == [True, False], "StopStringCriteria(tokenizer, stop_strings)")


def test_torch_offers_graph_capture_a_memory_query_and_the_errors_caught():
    """What the CUDA-graph decode and the batch plan call, and the errors they catch."""
    contract(callable(getattr(torch.cuda, "graph", None))
             and callable(getattr(torch.cuda, "CUDAGraph", None)),
             "torch.cuda.graph / torch.cuda.CUDAGraph", "torch")
    contract(list(inspect.signature(torch.cuda.mem_get_info).parameters) == ["device"],
             "torch.cuda.mem_get_info(device)", "torch")
    contract(issubclass(torch.cuda.OutOfMemoryError, RuntimeError),
             "torch.cuda.OutOfMemoryError (a RuntimeError)", "torch")


def test_lm_eval_generation_helpers_keep_their_meaning():
    from lm_eval.models.utils import (
        handle_stop_sequences,
        normalize_gen_kwargs,
        postprocess_generated_text,
    )

    contract(handle_stop_sequences(["\n"], eos="</s>") == ["\n", "</s>"],
             "lm_eval.models.utils.handle_stop_sequences", "lm_eval")
    kwargs = normalize_gen_kwargs({"until": ["\n"], "do_sample": False}, 256)
    contract(kwargs.get("max_gen_toks") == 256 and kwargs.get("until") == ["\n"],
             "lm_eval.models.utils.normalize_gen_kwargs", "lm_eval")
    contract(postprocess_generated_text("A.\nB", ["\n"], None) == "A.",
             "lm_eval.models.utils.postprocess_generated_text", "lm_eval")
