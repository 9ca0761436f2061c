"""The CUDA-graph decode on a GPU: capture, replay, compaction, reuse and a failed capture.

``pytest -m gpu`` on the device (skipped where CUDA is absent). fp32 throughout, so a graph's
replay must give exactly the tokens of the same static decode run as eager steps, and those
of transformers' own ``generate``; the counts say which of the four happened.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import PROMPTS, generation_requests, random_prompts, tiny_llama, until_end
from transformers import LlamaForCausalLM

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
