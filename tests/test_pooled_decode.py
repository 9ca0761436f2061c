"""The CPU's pooled decode: a batch's rows join the previous batch's last running rows.

fp32 on the CPU against transformers' own ``generate`` run on all rows as one batch: every row's
tokens are the same whether its batch was decoded alone or merged into a running one (caches
aligned on the right, the common prefix of each batch run once), with end tokens and stop
strings; and the merge really happens (a decode step runs rows of both batches).
"""

from __future__ import annotations

import pytest
from test_fast_generation import PROMPTS
from transformers.generation.stopping_criteria import StopStringCriteria

from lm_eval_ext.model_wrappers.greedy_decode import eos_token_ids, pooled_greedy_decode

MORE = ["Give one word that rhymes with cat.", "Name a large animal that lives in the ocean."]


def _batches(tokenizer, prompts: list[str], size: int):
    rows = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                          add_generation_prompt=True)["input_ids"]
            for p in prompts]
    padded = [tokenizer.pad({"input_ids": rows[i:i + size]}, padding_side="left",
                            return_tensors="pt") for i in range(0, len(rows), size)]
    whole = tokenizer.pad({"input_ids": rows}, padding_side="left", return_tensors="pt")
    return [(b["input_ids"], b["attention_mask"]) for b in padded], whole


@pytest.mark.parametrize("stop_string", [None, "."])
def test_rows_merged_into_a_running_batch_match_generate(embedded_lm, stop_string):
    model, tokenizer = embedded_lm.model, embedded_lm.tokenizer
    batches, whole = _batches(tokenizer, PROMPTS + MORE, 2)
    eos = eos_token_ids(model, tokenizer)
    stop = StopStringCriteria(tokenizer, [stop_string]) if stop_string else None
    decode_rows: list[int] = []
    hook = model.model.register_forward_pre_hook(
        lambda module, args, kwargs: decode_rows.append(kwargs["input_ids"].shape[0])
        if kwargs["input_ids"].shape[1] == 1 else None, with_kwargs=True)
    try:
        pooled = pooled_greedy_decode(model, batches, 14, eos, stop, share_prefix=True,
                                      admit_at=2)
        decode_rows_pooled, decode_rows[:] = list(decode_rows), []
        alone = pooled_greedy_decode(model, batches, 14, eos, stop, share_prefix=True)
    finally:
        hook.remove()
    assert max(decode_rows_pooled) > 2 >= max(decode_rows)  # merged steps; else batch by batch
    extra = {"stop_strings": [stop_string], "tokenizer": tokenizer} if stop_string else {}
    reference = model.generate(**whole, max_new_tokens=14, do_sample=False,
                               pad_token_id=tokenizer.pad_token_id, **extra
                               )[:, whole["input_ids"].shape[1]:].tolist()
    assert pooled == alone
    for mine, theirs in zip(pooled, reference, strict=True):
        ended = mine[-1] in eos or (stop_string and tokenizer.decode(mine).endswith(stop_string))
        assert mine == theirs[:len(mine)] and (len(mine) == 14 or ended)
