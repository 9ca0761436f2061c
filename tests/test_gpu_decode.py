"""CUDA graphs on a GPU: the decode (capture, replay, compaction, reuse, a failed capture) and
the scoring forward.

``pytest -m gpu`` on the device (skipped where CUDA is absent). The decode runs in fp32, so a
graph's replay must give exactly the tokens of the same static decode run as eager steps, and
those of transformers' own ``generate``; the counts say which of the four happened. A replayed
scoring forward runs the kernels of lm-eval's own forward on the same shape, so its logits and
answers must be identical in bf16 too.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import (
    PROMPTS,
    generation_requests,
    package_task_manager,
    random_prompts,
    tiny_llama,
    until_end,
)
from transformers import LlamaForCausalLM

from lm_eval_ext.backends.hf.scoring_graphs import ScoringGraphs
from lm_eval_ext.generation.graphed import DecodeGraphs, static_greedy_decode

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _prompts(rows: int, width: int, padding: list[int], seed: int) -> tuple[torch.Tensor, ...]:
    """Left-padded random prompts on the GPU (:func:`helpers.random_prompts`)."""
    return random_prompts(rows, width, padding, seed, device="cuda")


def _generate(model, ids, mask, new: int, eos: list[int]) -> list[list[int]]:
    """transformers' greedy ``generate``, each row cut after its first end token."""
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                         eos_token_id=eos, pad_token_id=0)[:, ids.shape[1]:].tolist()
    return until_end(out, set(eos), new)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_captured_step_replays_the_eager_steps_tokens(attention):
    model = tiny_llama(attention, device="cuda", seed=0)
    ids, mask = _prompts(4, 9, [3, 5, 0, 1], seed=1)
    eager = static_greedy_decode(model, ids, mask, 24, [-1], cuda_graph=False)
    graphs = DecodeGraphs()
    replayed = static_greedy_decode(model, ids, mask, 24, [-1], graphs=graphs)
    assert (replayed.graph_problem, replayed.captures, replayed.reused) == (None, 1, False)
    assert graphs.kept is not None and graphs.kept.replay is not None  # kept for the next batch
    assert replayed.tokens == eager.tokens == _generate(model, ids, mask, 24, [-1])
    assert all(len(row) == 24 for row in replayed.tokens)  # 22 of the 24 steps were replays


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_compacted_batch_is_captured_again_and_keeps_generates_tokens(attention):
    """Rows 0-11 of 20 end by their second token: at the first check the batch is cut to 8."""
    model = tiny_llama(attention, device="cuda", seed=2)
    ids, mask = _prompts(20, 7, [2 * (i % 3 == 0) for i in range(20)], seed=3)
    plain = static_greedy_decode(model, ids, mask, 20, [-1], cuda_graph=False).tokens
    eos = sorted({row[1] for row in plain[:12]})
    result = static_greedy_decode(model, ids, mask, 20, eos)
    assert result.graph_problem is None and result.compactions >= 1
    assert result.captures == 1 + result.compactions  # the batch's shape, then each cut
    assert result.tokens == _generate(model, ids, mask, 20, eos)
    assert max(map(len, result.tokens)) > 8  # some rows ran on the compacted graph


def test_a_later_batch_that_fits_replays_the_kept_graph_without_capturing():
    model = tiny_llama("sdpa", seed=4, device="cuda")
    graphs = DecodeGraphs()
    batches = [_prompts(3, 9, [0, 2, 4], seed=5),  # 9 + 12 columns: captured and kept
               _prompts(3, 7, [1, 0, 3], seed=6),  # needs 19 of 21: replays the kept graph
               _prompts(2, 7, [0, 2], seed=7)]  # other rows: its own capture
    seen = []
    for ids, mask in batches:
        result = static_greedy_decode(model, ids, mask, 12, [-1], graphs=graphs)
        assert result.tokens == _generate(model, ids, mask, 12, [-1])
        seen.append((result.reused, result.captures))
    assert seen == [(False, 1), (True, 0), (False, 1)]


class _SyncingLlama(LlamaForCausalLM):
    """A model whose forward waits for the device (as some kernels do): it cannot be captured."""

    def forward(self, *args, **kwargs):  # noqa: D102
        out = super().forward(*args, **kwargs)
        float(out.logits[0, -1, 0])  # a host synchronisation inside the forward
        return out


def test_a_forward_that_synchronises_is_named_and_decoded_by_eager_steps():
    model = tiny_llama("sdpa", seed=6, device="cuda", model_class=_SyncingLlama)
    ids, mask = _prompts(3, 6, [0, 1, 2], seed=8)
    result = static_greedy_decode(model, ids, mask, 10, [-1])
    assert result.graph_problem.startswith("CUDA graph capture failed")
    assert result.captures == 0
    assert result.tokens == _generate(model, ids, mask, 10, [-1])


def test_the_fast_path_replays_graphs_in_a_metered_run_and_keeps_lm_evals_text(
        embedded_checkpoint):
    """The embedded model in fp32 on the GPU: graphs, eager steps and lm-eval's loop agree."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(device="cuda", precision="fp32", batch_size=4, idle_seconds=0)
    greedy = {"until": ["\n\n"], "max_gen_toks": 48, "do_sample": False}
    requests = generation_requests(PROMPTS * 3, greedy)  # 12 requests: 3 batches of 4
    texts, counts = {}, {}
    for name, changes in {"graphs": {}, "eager": {"cuda_graphs": False},
                          "standard": {"requested": "standard"}}.items():
        lm.use_generation(dataclasses.replace(lm.generation_settings(), **changes))
        texts[name] = lm.generate_until(requests, disable_tqdm=True)
        counts[name] = lm.metering_info()["generation"]
    assert texts["graphs"] == texts["eager"] == texts["standard"]
    assert all(text.strip() for text in texts["graphs"])
    graphs, eager = counts["graphs"], counts["eager"]
    assert (graphs["graph_batches"], graphs["eager_batches"], graphs["eager_reasons"]) == (3, 0, [])
    assert graphs["graph_reuses"] == 2  # batches 2 and 3 replayed batch 1's graph
    assert (eager["graph_batches"], eager["eager_batches"]) == (0, 3)
    assert eager["eager_reasons"] == ["cuda_graphs=false"]
    assert counts["standard"]["standard_requests"] == 12


def _scoring_rounds(model, shapes):
    """Each shape's forward as lm-eval asks for it: replayed where recorded, else lm-eval's."""
    graphs = ScoringGraphs(model, None)
    generator = torch.Generator().manual_seed(10)
    pairs = []
    for rows, length in shapes:
        ids = torch.randint(3, 97, (rows, length), generator=generator).to("cuda")
        replay = graphs.replay_for(ids)
        with torch.no_grad():
            eager = model(ids).logits  # lm-eval's forward (the warm-up where nothing replays)
        if replay is not None:
            pairs.append((replay().clone(), eager))
    return graphs, pairs


def test_a_replayed_scoring_forward_gives_the_eager_logits_in_bf16():
    model = tiny_llama("sdpa", seed=9, device="cuda").to(torch.bfloat16)
    graphs, pairs = _scoring_rounds(
        model, [(1, 17), (1, 17), (1, 40), (3, 9), (3, 9), (1, 40), (1, 17)])
    assert all(torch.equal(replayed, eager) for replayed, eager in pairs)
    assert (graphs.stats.problem, graphs.stats.shapes_seen) == (None, 3)
    assert (graphs.stats.captures, graphs.stats.replays, len(pairs)) == (3, 4, 4)


def test_eager_attention_that_cannot_be_recorded_is_named_and_left_to_lm_eval():
    """transformers' eager attention builds its causal mask with a host copy (H200, 5.17)."""
    graphs, pairs = _scoring_rounds(tiny_llama("eager", seed=9, device="cuda"),
                                    [(1, 17), (1, 17), (1, 17)])
    assert graphs.stats.problem.startswith("CUDA graph capture failed: Cannot copy between CPU")
    assert (graphs.stats.captures, pairs) == (0, [])


def test_a_scoring_forward_that_synchronises_is_named_and_left_to_lm_eval():
    model = tiny_llama("sdpa", seed=6, device="cuda", model_class=_SyncingLlama)
    graphs = ScoringGraphs(model, None)
    ids = torch.randint(3, 97, (1, 12)).to("cuda")
    assert graphs.replay_for(ids) is None and graphs.replay_for(ids) is None
    assert graphs.stats.problem.startswith("CUDA graph capture failed")
    assert graphs.stats.captures == 0


def _loglik_answers(precision: str, **model_args) -> tuple[dict, dict]:
    from lm_eval import simple_evaluate

    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(device="cuda", precision=precision, batch_size=1, idle_seconds=0,
                     **model_args)
    out = simple_evaluate(model=lm, tasks=["bbq_instrument_loglik"], limit=40,
                          task_manager=package_task_manager(), log_samples=True,
                          bootstrap_iters=0)
    answers = [s["resps"] for s in out["samples"]["bbq_instrument_loglik"]]
    return answers, out["config"]["metering"]["scoring_graphs"]


@pytest.mark.parametrize("precision", ["bf16", "nf4"])
def test_replayed_batch_1_scoring_gives_lm_evals_answers(embedded_checkpoint, precision):
    """The embedded model at batch 1 on 40 BBQ items: every answer as with graphs off."""
    replayed, counts = _loglik_answers(precision)
    standard, off = _loglik_answers(precision, cuda_graphs=False)
    assert replayed == standard
    assert counts["problem"] is None and counts["captures"] > 0
    assert counts["replays"] > counts["not_replayed"]
    assert off["problem"] == "cuda_graphs=false" and off["replays"] == 0


def test_int8_scoring_is_left_to_lm_eval_and_says_why(embedded_checkpoint):
    _, counts = _loglik_answers("int8")
    assert counts["problem"].startswith("bitsandbytes int8") and counts["replays"] == 0
