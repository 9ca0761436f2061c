"""The CPU's pooled decode: a batch's rows join the previous batch's last running rows.

fp32 on the CPU against transformers' own ``generate`` run on all rows as one batch: every row's
tokens are the same whether its batch was decoded alone or merged into a running one (caches
aligned on the right, the common prefix of each batch run once), with end tokens and stop
strings; and the merge really happens (a decode step runs rows of both batches).
"""

from __future__ import annotations

import dataclasses

import torch
from helpers import PROMPTS, generation_requests
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation.stopping_criteria import StopStringCriteria

from lm_eval_ext.generation.greedy import eos_token_ids, greedy_decode

MORE = ["Give one word that rhymes with cat.", "Name a large animal that lives in the ocean."]


def _decode_rows(model, calls: list[int]):
    """A hook recording the rows of every decode step (one new token per row)."""
    return model.model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(kwargs["input_ids"].shape[0])
        if kwargs["input_ids"].shape[1] == 1 else None, with_kwargs=True)


def _cut(rows: list[list[int]], ended) -> list[list[int]]:
    """generate's rows cut after the first token for which ``ended(row so far)`` holds."""
    return [next((row[:i + 1] for i in range(len(row)) if ended(row[:i + 1])), row)
            for row in rows]


def test_chat_prompts_merged_into_a_running_batch_match_generate(embedded_lm):
    """Stop strings (checked on tokens left-filled after a merge) and each batch's prefix."""
    model, tokenizer = embedded_lm.model, embedded_lm.tokenizer
    rows = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                          add_generation_prompt=True)["input_ids"]
            for p in PROMPTS + MORE]
    padded = [tokenizer.pad({"input_ids": rows[i:i + 2]}, padding_side="left",
                            return_tensors="pt") for i in range(0, len(rows), 2)]
    eos = eos_token_ids(model, tokenizer)
    calls: list[int] = []
    hook = _decode_rows(model, calls)
    try:
        pooled = greedy_decode(model, [(b["input_ids"], b["attention_mask"])
                                              for b in padded], 10, eos,
                                      StopStringCriteria(tokenizer, ["."]), share_prefix=True,
                                      admit_at=2)
    finally:
        hook.remove()
    assert max(calls) > 2  # rows of two batches in one step
    whole = tokenizer.pad({"input_ids": rows}, padding_side="left", return_tensors="pt")
    reference = model.generate(**whole, max_new_tokens=10, do_sample=False, stop_strings=["."],
                               tokenizer=tokenizer, pad_token_id=tokenizer.pad_token_id
                               )[:, whole["input_ids"].shape[1]:].tolist()
    assert any(tokenizer.decode(row).endswith(".") for row in pooled)
    assert pooled == _cut(reference, lambda row: row[-1] in eos
                          or tokenizer.decode(row).endswith("."))


def test_rows_ending_early_leave_and_the_next_batch_joins_only_when_asked():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2)).eval()
    ids = torch.randint(3, 61, (6, 7))
    mask = (torch.arange(7) >= torch.tensor([[2], [0], [4], [1], [0], [3]])).long()
    ids[mask == 0] = 0
    batches = [(ids[:3], mask[:3]), (ids[3:], mask[3:])]
    plain = greedy_decode(model, batches, 12, [-1])
    eos = [plain[0][2], plain[4][5]]  # rows end early, in both batches
    reference = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12,
                               do_sample=False, eos_token_id=eos, pad_token_id=0)[:, 7:]
    expected = _cut(reference.tolist(), lambda row: row[-1] in eos)
    assert min(map(len, expected)) < 12  # some rows did end early
    for admit_at, merged in ((0, False), (2, True)):
        calls: list[int] = []
        hook = _decode_rows(model, calls)
        try:
            assert greedy_decode(model, batches, 12, eos, admit_at=admit_at) == expected
        finally:
            hook.remove()
        assert (max(calls) > 3) is merged


def test_a_typed_batch_size_is_kept_on_the_cpu(embedded_lm):
    """``--batch_size 2`` typed: batches of 2 are not pooled (every decode step has <= 2 rows)."""
    before = embedded_lm.use_generation(dataclasses.replace(
        embedded_lm.generation_settings(), requested="fast", batch_size_asked=2))
    calls: list[int] = []
    hook = _decode_rows(embedded_lm.model, calls)
    try:
        embedded_lm.generate_until(generation_requests(PROMPTS[:3], {"until": ["\n"], "max_gen_toks": 6}))
        stats = embedded_lm.fast_generation.stats
    finally:
        hook.remove()
        embedded_lm.use_generation(before.settings)
    assert stats.batch_sizes == [2] and stats.eager_batches == 2
    assert calls and max(calls) <= 2


def test_the_filler_left_of_joined_rows_never_completes_a_stop_string(embedded_lm):
    """A merged row's generated tokens are left-filled with FILLER, which the stop check sees."""
    from lm_eval_ext.generation.greedy import FILLER

    tokenizer = embedded_lm.tokenizer
    stop = StopStringCriteria(tokenizer, ["\n\n"])
    [newline] = tokenizer("\n", add_special_tokens=False)["input_ids"]
    word_newline = tokenizer("Yes\n", add_special_tokens=False)["input_ids"]
    assert len(word_newline) == 2 and word_newline[1] == newline
    rows = torch.tensor([[FILLER, FILLER, newline], [FILLER, newline, newline],
                         [FILLER, *word_newline], [word_newline[0], newline, newline]])
    assert stop(rows, None).tolist() == [False, True, False, True]
    assert FILLER >= len(tokenizer)  # no real token: the check's out-of-vocabulary slot
