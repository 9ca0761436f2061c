"""generation=fast: the same text as lm-eval's own loop (fp32, CPU), fallbacks, batch planning."""

from __future__ import annotations

import contextlib
import dataclasses
import types

import pytest
import torch
from helpers import PROMPTS, generation_requests, package_task_manager

from lm_eval_ext.backends.model_args import explicit_batch_size
from lm_eval_ext.generation.generator import (
    CPU_BATCH,
    MEMORY_SHARE,
    planned_batch_size,
)


@contextlib.contextmanager
def generation_mode(lm, mode: str, **changes):
    """The shared CPU model generating under changed settings, restored afterwards."""
    before = lm.use_generation(dataclasses.replace(lm.generation_settings(), requested=mode,
                                                   **changes))
    try:
        yield lm.fast_generation.stats
    finally:
        lm.use_generation(before.settings)


@pytest.mark.slow
def test_fast_text_equals_the_standard_loop_on_the_headline_task(embedded_lm):
    """bbq_subset_25pct, 5 items, fp32 on the CPU: the same generated text for every item."""
    from lm_eval import simple_evaluate

    texts = {}
    for mode in ("standard", "fast"):
        with generation_mode(embedded_lm, mode) as stats:
            results = simple_evaluate(model=embedded_lm, tasks=["bbq_subset_25pct"], limit=5,
                                      log_samples=True, bootstrap_iters=0,
                                      gen_kwargs="max_gen_toks=32",
                                      task_manager=package_task_manager())
        texts[mode] = [s["resps"][0][0] for s in results["samples"]["bbq_subset_25pct"]]
        metering = results["config"]["metering"]["generation"]
        assert metering["requested"] == mode
    assert stats.fast_requests == 5 and stats.standard_requests == 0
    assert stats.batch_sizes == [4]  # --batch_size 4 of the shared model caps the batch
    assert texts["fast"] == texts["standard"]
    assert all(t.strip() for t in texts["fast"])


def test_reset_metering_starts_the_generation_counts_afresh(embedded_lm):
    greedy = {"until": ["\n"], "max_gen_toks": 4, "do_sample": False}
    with generation_mode(embedded_lm, "fast") as stats:
        embedded_lm.generate_until(generation_requests(PROMPTS[:2], greedy), disable_tqdm=True)
        assert (stats.fast_requests, stats.batch_sizes) == (2, [2])
        embedded_lm.reset_metering()
        fresh = embedded_lm.metering_info()["generation"]
    assert (fresh["fast_requests"], fresh["batch_sizes"], fresh["eager_batches"]) == (0, [], 0)
    assert (fresh["requested"], fresh["batch_size_asked"]) == ("fast", 4)


def test_stop_sequences_cut_the_same_text_and_sampling_falls_back(embedded_lm):
    greedy = {"until": ["\n", "."], "max_gen_toks": 24, "do_sample": False}
    with generation_mode(embedded_lm, "standard"):
        standard = embedded_lm.generate_until(generation_requests(PROMPTS, greedy), disable_tqdm=True)
    with generation_mode(embedded_lm, "fast") as stats:
        fast = embedded_lm.generate_until(generation_requests(PROMPTS, greedy), disable_tqdm=True)
        assert fast == standard and not any("\n" in t or "." in t for t in fast)
        assert (stats.fast_requests, stats.standard_requests) == (4, 0)
        sampled = {"until": ["\n"], "max_gen_toks": 4, "do_sample": True, "temperature": 0.7}
        embedded_lm.generate_until(generation_requests(PROMPTS[:1], sampled), disable_tqdm=True)
        assert stats.standard_requests == 1
        assert stats.fallback_reasons == ["sampling (do_sample/temperature)"]


def _fake_lm(device: str, batch_size, config: dict, dtype=torch.bfloat16):
    model = types.SimpleNamespace(config=types.SimpleNamespace(**config), dtype=dtype)
    return types.SimpleNamespace(device=torch.device(device), batch_size=batch_size, model=model)


SMOLLM = {"num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
          "num_hidden_layers": 30, "intermediate_size": 1536, "vocab_size": 49152}


def test_batch_plan_on_the_cpu_and_with_a_batch_size_given():
    assert planned_batch_size(_fake_lm("cpu", 1, SMOLLM), 300, 500) == CPU_BATCH
    assert planned_batch_size(_fake_lm("cpu", "auto", SMOLLM), 300, 5) == 5
    assert planned_batch_size(_fake_lm("cpu", 64, SMOLLM), 300, 500, asked=64) == 64
    assert planned_batch_size(_fake_lm("cpu", 1, SMOLLM), 300, 500, asked=1) == 1


@pytest.mark.parametrize(("given", "asked"), [
    (1, None),        # lm-eval's default (CLI and Python API): planned
    ("1", 1),         # a typed --batch_size 1 arrives as a string: honoured
    (8, 8), ("32", 32), ("auto", None), ("auto:4", None), (None, None)])
def test_only_a_batch_size_the_user_gave_caps_the_fast_path(given, asked):
    assert explicit_batch_size(given) == asked


def test_a_typed_batch_size_1_reaches_the_model_as_a_string():
    """The premise of explicit_batch_size, checked against lm-eval's own CLI parser and config:
    untyped, the model gets the int 1; typed, the string "1"."""
    from lm_eval._cli.harness import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    parser = HarnessCLI()._parser  # its parse_args() reads sys.argv
    for argv, expected in ((["run", "--model", "hf", "--tasks", "x"], 1),
                           (["run", "--model", "hf", "--tasks", "x", "--batch_size", "1"], "1")):
        given = EvaluatorConfig.from_cli(parser.parse_args(argv)).batch_size
        assert (given, type(given)) == (expected, type(expected))


def test_batch_plan_on_cuda_fits_half_the_free_memory(monkeypatch):
    """Closed form for SmolLM2-135M in bf16: KV 2 x 30 layers x 3 heads x 64 dims x 2 bytes per
    token, activations (1536 + 4 x 576) x 2 bytes per token, scores 2 x 49,152 x 4 bytes."""
    free = 8 * 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free, 2 * free))
    tokens = 340
    per_sequence = (2 * 30 * 3 * 64 * 2 + (1536 + 4 * 576) * 2) * tokens + 2 * 49152 * 4
    expected = int(MEMORY_SHARE * free // per_sequence)
    assert planned_batch_size(_fake_lm("cuda", 1, SMOLLM), tokens, 10_000) == expected
    assert planned_batch_size(_fake_lm("cuda", 1, SMOLLM), tokens, 100) == 100


def test_auto_batch_for_lm_evals_loop_is_planned_from_the_real_prompts(embedded_lm):
    """--batch_size auto on generation: lm-eval probes at the model's maximum length; here the
    batch is planned from the longest real prompt (CPU: up to 16; a given max_batch_size caps
    it), and the text is the loop's own at that batch."""
    greedy = {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}
    with generation_mode(embedded_lm, "standard"):
        fixed = embedded_lm.generate_until(generation_requests(PROMPTS, greedy), disable_tqdm=True)
        embedded_lm.batch_size_per_gpu, probed = "auto", embedded_lm._probed_batch_sizes
        embedded_lm._probed_batch_sizes = []
        try:
            auto = embedded_lm.generate_until(generation_requests(PROMPTS, greedy), disable_tqdm=True)
            with generation_mode(embedded_lm, "standard", max_batch_size=2):
                embedded_lm.generate_until(generation_requests(PROMPTS, greedy), disable_tqdm=True)
            assert embedded_lm._probed_batch_sizes == [4, 2]
        finally:
            embedded_lm.batch_size_per_gpu, embedded_lm._probed_batch_sizes = 4, probed
    assert auto == fixed


def test_a_max_batch_size_given_with_auto_caps_the_fast_path(embedded_lm):
    """--batch_size auto --max_batch_size 2: the plan (CPU: 16) is capped at 2."""
    greedy = {"until": ["\n"], "max_gen_toks": 4, "do_sample": False}
    with generation_mode(embedded_lm, "fast", batch_size_asked=None, max_batch_size=2) as stats:
        embedded_lm.generate_until(generation_requests(PROMPTS, greedy), disable_tqdm=True)
        assert stats.batch_sizes == [2]


def test_finished_sequences_leave_the_batch_and_the_others_match_generate(embedded_lm):
    """greedy_decode against transformers' own generate (fp32, CPU): the same tokens per row,
    while the batch shrinks once half its rows have ended (here: row 1's first token is made
    the end-of-sequence token; two of the four rows start with it and end at once)."""
    from lm_eval_ext.generation.greedy import greedy_decode

    model, tokenizer = embedded_lm.model, embedded_lm.tokenizer
    rows = [tokenizer(p)["input_ids"] for p in PROMPTS]
    batch = tokenizer.pad({"input_ids": rows}, padding_side="left", return_tensors="pt")
    first = greedy_decode(model, [(batch["input_ids"], batch["attention_mask"])], 1, [-1])
    eos = [first[1][0]]
    sizes: list[int] = []
    hook = model.model.register_forward_pre_hook(
        lambda module, args, kwargs: sizes.append(kwargs["input_ids"].shape[0]),
        with_kwargs=True)
    try:
        ours = greedy_decode(model, [(batch["input_ids"], batch["attention_mask"])], 12, eos)
    finally:
        hook.remove()
    running = sum(o[0] not in eos for o in ours)
    assert ours[1] == eos and running == 2
    assert sizes[:2] == [4, running] and sizes == sorted(sizes, reverse=True)
    assert len(sizes) == max(map(len, ours))
    reference = model.generate(**batch, max_new_tokens=12, do_sample=False, eos_token_id=eos,
                               pad_token_id=tokenizer.pad_token_id)[:, batch["input_ids"].shape[1]:]
    for mine, theirs in zip(ours, reference.tolist(), strict=True):
        assert mine == theirs[:len(mine)] and (len(mine) == 12 or mine[-1] in eos)


def test_a_shared_prefix_runs_once_and_every_row_matches_generate(embedded_lm):
    """share_prefix (the CPU default): the chat template's common tokens run once at batch 1,
    then the rows' own tokens; fp32 on the CPU, the same tokens per row as transformers'
    generate, which runs every row whole."""
    from lm_eval_ext.generation.greedy import (
        eos_token_ids,
        greedy_decode,
        shared_prefix_length,
    )

    model, tokenizer = embedded_lm.model, embedded_lm.tokenizer
    rows = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                          add_generation_prompt=True)["input_ids"]
            for p in PROMPTS]
    common = next(i for i in range(min(map(len, rows)))
                  if len({tuple(r[:i + 1]) for r in rows}) > 1)
    batch = tokenizer.pad({"input_ids": rows}, padding_side="left", return_tensors="pt")
    assert shared_prefix_length(batch["input_ids"], batch["attention_mask"]) == common >= 16
    calls: list[tuple[int, int]] = []
    hook = model.model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    try:
        ours = greedy_decode(model, [(batch["input_ids"], batch["attention_mask"])], 10,
                             eos_token_ids(model, tokenizer), share_prefix=True)
    finally:
        hook.remove()
    longest = max(map(len, rows))
    assert calls[:2] == [(1, common), (len(rows), longest - common)]
    reference = model.generate(**batch, max_new_tokens=10, do_sample=False,
                               pad_token_id=tokenizer.pad_token_id
                               )[:, batch["input_ids"].shape[1]:].tolist()
    eos = set(eos_token_ids(model, tokenizer))
    for mine, theirs in zip(ours, reference, strict=True):
        assert mine == theirs[:len(mine)] and (len(mine) == 10 or mine[-1] in eos)


def test_no_shared_prefix_for_one_row_or_rows_that_differ_at_once():
    from lm_eval_ext.generation.greedy import shared_prefix_length

    ids = torch.tensor([[0, 0, 5, 6, 7], [5, 6, 7, 8, 9], [0, 5, 6, 9, 9]])
    mask = (torch.arange(5) >= torch.tensor([[2], [0], [1]])).long()
    assert shared_prefix_length(ids, mask) == 2  # 5, 6 (the shortest row keeps its 7)
    assert shared_prefix_length(ids[:1], mask[:1]) == 0
    assert shared_prefix_length(torch.tensor([[1, 2], [3, 2]]), torch.ones(2, 2)) == 0


@pytest.mark.parametrize("mode", ["fast", "standard"])
def test_a_max_length_with_no_room_for_the_prompt_is_one_line(embedded_lm, mode):
    """Trial 17 (N17_17, N17_18): max_length=16 under the task's max_gen_toks=128 cut the
    prompts at -112 tokens on the fast path (rc 0), and lm-eval's loop raised an
    AssertionError; lm-eval's own loop draws the same boundary (max_length - max_gen_toks > 0)."""
    from lm_eval.models.huggingface import HFLM

    from lm_eval_ext.errors import ConfigError

    length = embedded_lm.max_length
    no_room = {"until": ["\n"], "max_gen_toks": length, "do_sample": False}
    with generation_mode(embedded_lm, mode) as stats, pytest.raises(ConfigError) as refused:
        embedded_lm.generate_until(generation_requests(PROMPTS[:1], no_room), disable_tqdm=True)
    assert (stats.fast_requests, stats.standard_requests) == (0, 0)
    prompt = _templated_length(embedded_lm, PROMPTS[0])
    assert str(refused.value) == (
        f"--model_args max_length={length} leaves no token of the prompt: the task generates "
        f"up to max_gen_toks={length} tokens within it; give max_length={prompt + length} or "
        "more (the longest of this run's 1 prompts and the tokens it may generate), or lower "
        "max_gen_toks with "
        f"--gen_kwargs max_gen_toks=N (N at most {length - prompt})")  # not "leave max_length
    # out": it is; and N so that the prompt fits whole (trial 19, N19_65: "N below 100")
    with pytest.raises(AssertionError):  # the upstream loop, called past our seam
        HFLM.generate_until(embedded_lm, generation_requests(PROMPTS[:1], no_room), True)


def _templated_length(lm, prompt: str) -> int:
    """The tokens of ``prompt`` as the model reads it: one user turn of the chat template
    (lm-eval's own method, which hf-metered applies; ours would mark the run as templating
    itself), then lm-eval's encoding."""
    from lm_eval.models.huggingface import HFLM

    turn = HFLM.apply_chat_template(lm, [{"role": "user", "content": prompt}])
    return len(lm.tok_encode(turn))


@pytest.mark.slow
def test_a_max_length_given_must_hold_every_prompt_and_its_new_tokens(embedded_checkpoint):
    """Trial 18 (N18_151): the no-room line said "give one above 128"; max_length=200, so
    followed, cut every prompt from 212 to 72 tokens (the instruction first), rc 0. The bound
    is exact: one token less is refused, the advised length runs uncut."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.errors import ConfigError

    kwargs = {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}
    requests = generation_requests(PROMPTS[:2], kwargs)
    short = HFMeteredLM(device="cpu", idle_seconds=0, max_length=20)
    lengths = [_templated_length(short, p) for p in PROMPTS[:2]]
    need = max(lengths) + 8
    with pytest.raises(ConfigError) as refused:
        short.generate_until(requests, disable_tqdm=True)
    assert str(refused.value) == (
        "--model_args max_length=20 cuts 2 of 2 prompts (lm-eval keeps max_length - "
        f"max_gen_toks tokens of each, from the end): give max_length={need} or more (the "
        "longest of this run's 2 prompts and the tokens it may generate), or leave max_length "
        "out (the model's "
        "own)")
    one_less = HFMeteredLM(device="cpu", idle_seconds=0, max_length=need - 1)
    with pytest.raises(ConfigError, match=f"cuts {lengths.count(max(lengths))} of 2 prompts"):
        one_less.generate_until(requests, disable_tqdm=True)
    advised = HFMeteredLM(device="cpu", idle_seconds=0, max_length=need)
    assert len(advised.generate_until(requests, disable_tqdm=True)) == 2
    # trial 19 (N19_65): "lower max_gen_toks (N below 100)" was refused again when followed;
    # N is now at most what the longest prompt leaves: 8 here, which ran above; 9 cuts
    with pytest.raises(ConfigError, match=r"max_gen_toks=N \(N at most 8\)$"):
        advised.generate_until(generation_requests(PROMPTS[:2], {**kwargs, "max_gen_toks": need}),
                               disable_tqdm=True)
    with pytest.raises(ConfigError, match="cuts"):
        advised.generate_until(generation_requests(PROMPTS[:2], {**kwargs, "max_gen_toks": 9}),
                               disable_tqdm=True)
    no_room = generation_requests(PROMPTS[:2], {**kwargs, "max_gen_toks": 20})
    with pytest.raises(ConfigError) as refused:  # a given length may be left out; no
        short.generate_until(no_room, disable_tqdm=True)  # max_gen_toks fits a 20+ prompt
    assert str(refused.value) == (
        "--model_args max_length=20 leaves no token of the prompt: the task generates up to "
        f"max_gen_toks=20 tokens within it; give max_length={max(lengths) + 20} or more (the "
        "longest of this run's 2 prompts and the tokens it may generate), or leave max_length "
        "out (the model's "
        "own)")


def test_the_first_logits_of_a_generation_task_must_be_finite():
    """Trial 17 (N17_214): an overflowed model (NaN logits) generated empty texts, scored as
    parse failures; the first forward of a task is checked, once."""
    from helpers import tiny_llama

    from lm_eval_ext.backends.hf.metered import finite_first_logits
    from lm_eval_ext.errors import ConfigError

    model = tiny_llama("eager", seed=1)
    ids = torch.tensor([[1, 2, 3]])
    with finite_first_logits(model, "m"):
        model(ids)
        with torch.no_grad():
            model.lm_head.weight[0, 0] = float("nan")
        model(ids)  # checked once: later forwards are the decode's
    with pytest.raises(ConfigError, match="^m: the model's logits are NaN or infinite"):
        with finite_first_logits(model, "m"):
            model(ids)
    model(ids)  # the hook is gone after the task
