"""lm-eval's scoring forward served by recorded shapes: which models, which shapes, same answers.

The CUDA graphs themselves run on the device (tests/test_gpu_decode.py); here the bookkeeping
runs with ``capture=False`` (a recorded shape runs the forward again) on the CPU.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import package_task_manager, tiny_llama
from lm_eval import simple_evaluate

from lm_eval_ext.backends.hf.scoring_graphs import ScoringGraphs, scoring_graph_problem

CUDA = torch.device("cuda")


def _model(quantization_config=None):
    return SimpleNamespace(config=SimpleNamespace(quantization_config=quantization_config))


@pytest.mark.parametrize(("model", "device", "settings", "reason"), [
    (_model(), CUDA, {"cuda_graphs": False}, "cuda_graphs=false"),
    (_model(), torch.device("cpu"), {"cuda_graphs": True}, "the model is not on a CUDA device"),
    (_model(), CUDA, {"cuda_graphs": True, "causal": False}, "not a decoder-only model"),
    (_model(), CUDA, {"cuda_graphs": True, "autocast": True}, "mixed_precision_dtype autocast"),
    (_model({"load_in_8bit": True}), CUDA, {"cuda_graphs": True}, "bitsandbytes int8"),
    (_model(SimpleNamespace(load_in_8bit=True)), CUDA, {"cuda_graphs": True}, "bitsandbytes int8"),
])
def test_models_whose_forward_is_not_replayed_are_named(model, device, settings, reason):
    assert reason in scoring_graph_problem(model, device, **settings)


@pytest.mark.parametrize("config", [None, {"load_in_4bit": True},
                                    SimpleNamespace(load_in_8bit=False)])
def test_plain_and_4bit_models_on_cuda_are_replayed(config):
    assert scoring_graph_problem(_model(config), CUDA, cuda_graphs=True) is None


def test_a_shape_is_recorded_at_its_second_forward_and_the_oldest_dropped():
    model = tiny_llama("sdpa", seed=0)
    graphs = ScoringGraphs(model, None, capture=False, max_rows=2, max_kept=2)
    ids = {n: torch.randint(3, 97, (1, n), generator=torch.Generator().manual_seed(n))
           for n in (5, 6, 7)}
    assert graphs.replay_for(ids[5]) is None  # first: lm-eval's own forward (the warm-up)
    again = graphs.replay_for(ids[5])
    assert torch.equal(again(), model(ids[5]).logits)
    other = torch.randint(3, 97, (1, 5), generator=torch.Generator().manual_seed(99))
    assert torch.equal(graphs.replay_for(other)(), model(other).logits)  # new ids, same shape
    for n in (6, 7):
        graphs.replay_for(ids[n])
        graphs.replay_for(ids[n])
    assert list(graphs._shapes) == [(1, 6), (1, 7)]  # (1, 5) dropped: the least recently used
    assert graphs.replay_for(torch.ones((3, 5), dtype=torch.long)) is None  # rows > max_rows
    assert (graphs.stats.shapes_seen, graphs.stats.replays) == (3, 4)


@pytest.mark.slow
def test_recorded_shapes_give_lm_evals_answers_in_a_metered_run(embedded_checkpoint):
    """The embedded model in fp32 at batch 1: every answer as lm-eval's own forward gives it."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(device="cpu", batch_size=1, idle_seconds=0)
    assert lm.scoring_graphs.stats.problem == "the model is not on a CUDA device"
    tasks = ["bbq_instrument_loglik", "truthfulqa_ext_mc2_loglik"]

    def run():
        out = simple_evaluate(model=lm, tasks=tasks, task_manager=package_task_manager(),
                              limit=8, log_samples=True, bootstrap_iters=0)
        return {t: [s["resps"] for s in rows] for t, rows in out["samples"].items()}, out

    standard, before = run()
    lm.scoring_graphs = ScoringGraphs(lm.model, None, capture=False)
    served, out = run()
    assert served == standard
    forwards = before["config"]["metering"]["scoring_graphs"]["not_replayed"]
    counts = out["config"]["metering"]["scoring_graphs"]
    assert counts["problem"] is None and counts["replays"] > forwards / 2
    assert counts["replays"] + counts["not_replayed"] == forwards  # lm-eval's forwards, each once
    assert counts["not_replayed"] == counts["shapes_seen"]  # one warm-up per shape
