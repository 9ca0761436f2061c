"""Shared-prefix multiple-choice scoring equals lm-eval's own path, request by request."""

from __future__ import annotations

import functools
import types

import pytest
import torch
from helpers import package_task_manager
from lm_eval import simple_evaluate
from lm_eval.models.huggingface import HFLM

from lm_eval_ext.backends.hf import shared_prefix
from lm_eval_ext.backends.hf.packing import (
    PackedItem,
    attention_mask,
    group_by_context,
    pack,
    split_to_fit,
)
from lm_eval_ext.backends.hf.shared_prefix import support_problem

#: every multiple-choice log-likelihood family the issue names, 6 items each
TASKS = ["bbq_instrument_loglik", "truthfulqa_ext_mc1_loglik", "truthfulqa_ext_mc2_loglik",
         "crows_pairs_ext_loglik"]


def test_requests_are_grouped_by_their_context_tokens():
    requests = [(("q1", " a"), [5, 6], [7]), (("q2", " x"), [5, 9], [3, 4]),
                (("q1", " b"), [5, 6], [8, 2]), (("q2", " y"), [5, 9], [1])]
    items = group_by_context(requests)
    assert items == [PackedItem((5, 6), ((7,), (8, 2)), (0, 2)),
                     PackedItem((5, 9), ((3, 4), (1,)), (1, 3))]
    assert [i.length for i in items] == [3, 3]  # context + options without their last token


def test_items_with_many_options_are_split_into_rows_that_fit():
    item = PackedItem((1, 2), ((3, 4, 5), (6, 7), (8, 9, 9, 9), (4,)), (0, 1, 2, 3))
    rows = split_to_fit(item, row_tokens=6)
    assert [r.request_indices for r in rows] == [(0, 1), (2, 3)]
    assert [r.length for r in rows] == [5, 5] and all(r.context == (1, 2) for r in rows)
    assert split_to_fit(item, row_tokens=2) == [  # one option per row at least
        PackedItem((1, 2), (o,), (i,)) for i, o in enumerate(item.options)]


def test_packed_rows_restart_positions_and_isolate_the_options():
    item = PackedItem((10, 11, 12), ((20, 21, 22), (30,), (40, 41)), (0, 1, 2))
    batch = pack([item, PackedItem((1,), ((2,),), (3,))], pad_id=0, device="cpu")
    assert batch.tokens[0].tolist() == [10, 11, 12, 20, 21, 40]
    assert batch.positions[0].tolist() == [0, 1, 2, 3, 4, 3]
    assert batch.segments[0].tolist() == [0, 0, 0, 1, 1, 3]
    assert batch.segments[1].tolist() == [0, -1, -1, -1, -1, -1]
    # option 1 is predicted from the context's last token, then from its own tokens
    assert batch.columns.tolist()[:6] == [2, 3, 4, 2, 2, 5]
    assert batch.targets.tolist()[:6] == [20, 21, 22, 30, 40, 41]
    assert batch.option_lengths == [3, 1, 2, 1]
    allowed = attention_mask(batch.segments, torch.float32)[0, 0] == 0
    assert allowed.tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 0, 0, 1],  # option 3 sees the context and itself, not option 1
    ]


def test_models_that_cannot_take_the_packed_mask_are_named():
    def model(**config):
        return types.SimpleNamespace(config=types.SimpleNamespace(**config),
                                     get_decoder=lambda: None,
                                     get_output_embeddings=lambda: object())

    assert support_problem(model(_attn_implementation="sdpa"), "causal") is None
    assert "flash_attention_2" in support_problem(
        model(_attn_implementation="flash_attention_2"), "causal")
    assert "seq2seq" in support_problem(model(_attn_implementation="sdpa"), "seq2seq")
    assert "sliding-window" in support_problem(
        model(_attn_implementation="sdpa", sliding_window=4096), "causal")
    assert "final_logit_softcapping" in support_problem(
        model(_attn_implementation="eager", final_logit_softcapping=30.0), "causal")


def _samples(lm, tasks: list[str], limit: int = 6) -> dict:
    return simple_evaluate(model=lm, tasks=tasks, task_manager=package_task_manager(),
                           limit=limit, log_samples=True, bootstrap_iters=0)


@pytest.fixture(scope="module")
def both_paths(embedded_checkpoint):
    """lm-eval's own HF model and hf-metered with shared-prefix scoring, same items (fp32)."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    standard = _samples(HFLM(pretrained=str(embedded_checkpoint), device="cpu", batch_size=8),
                        TASKS)
    lm = HFMeteredLM(device="cpu", batch_size=8, idle_seconds=0, mc_scoring="shared_prefix")
    return standard, _samples(lm, TASKS)


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_shared_prefix_log_likelihoods_equal_lm_evals(both_paths, task):
    standard, packed = both_paths
    rows = zip(standard["samples"][task], packed["samples"][task], strict=True)
    n_requests = 0
    for ref, new in rows:
        assert ref["doc_id"] == new["doc_id"]
        ref_ll = [float(r[0][0]) for r in ref["resps"]]
        new_ll = [float(r[0][0]) for r in new["resps"]]
        assert new_ll == pytest.approx(ref_ll, abs=1e-4)
        assert [r[0][1] for r in new["resps"]] == [r[0][1] for r in ref["resps"]]
        for metric in ("acc", "acc_norm"):
            if metric in ref:
                assert new[metric] == ref[metric]  # the same argmax on every item
        n_requests += len(ref_ll)
    assert n_requests > len(standard["samples"][task])  # several options per item
    metering = packed["config"]["metering"]["mc_scoring"]
    assert metering["used"] == "shared_prefix" and metering["requests_standard"] == 0
    assert metering["self_check_max_abs_diff"] < 1e-4


@pytest.mark.slow
def test_batched_tokenisation_gives_lm_evals_own_encodings(embedded_lm):
    """Every request of the four families: the same (context, continuation) tokens."""
    from lm_eval.api.model import TemplateLM

    manager = package_task_manager()
    for task_name in TASKS:
        task = manager.load([task_name])["tasks"][task_name]
        task.build_all_requests(limit=20, rank=0, world_size=1)
        requests = list(task.instances)
        seen: list = []
        embedded_lm._loglikelihood_tokens = (
            lambda reqs, disable_tqdm=False, seen=seen: seen.extend(reqs))
        try:
            TemplateLM.loglikelihood(embedded_lm, requests, True)  # lm-eval's own encoding
            own, seen[:] = list(seen), []
            with embedded_lm.shared_prefix.batch_tokens(
                    requests, functools.partial(HFLM.tok_encode, embedded_lm)):

                def unexpected(*args, **kwargs):
                    raise AssertionError(f"encoded one by one: {args[:1]}")

                embedded_lm.tokenizer.encode = unexpected  # every call answered from the batch
                TemplateLM.loglikelihood(embedded_lm, requests, True)
        finally:
            del embedded_lm._loglikelihood_tokens
            vars(embedded_lm.tokenizer).pop("encode", None)
        assert seen == own


@pytest.mark.slow
def test_a_mask_the_model_ignores_is_caught_by_the_self_check(embedded_checkpoint,
                                                              monkeypatch):
    """Options that see each other give other numbers: the run falls back, answers stay right."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    def leaky(segments, dtype):  # every token sees every earlier token: options not isolated
        t = segments.shape[1]
        causal = torch.ones(t, t).tril().bool()
        return torch.zeros(t, t, dtype=dtype).masked_fill(~causal, torch.finfo(dtype).min)[
            None, None].expand(segments.shape[0], 1, t, t)

    monkeypatch.setattr(shared_prefix, "attention_mask", leaky)
    lm = HFMeteredLM(device="cpu", batch_size=4, idle_seconds=0, mc_scoring="shared_prefix")
    packed = _samples(lm, ["bbq_instrument_loglik"], limit=4)
    metering = packed["config"]["metering"]["mc_scoring"]
    assert metering["used"] == "standard" and "self-check" in metering["fallback_reason"]
    assert metering["self_check_max_abs_diff"] > 1e-3
    standard = _samples(HFLM(pretrained=str(embedded_checkpoint), device="cpu", batch_size=4),
                        ["bbq_instrument_loglik"], limit=4)
    assert ([float(r[0][0]) for s in packed["samples"]["bbq_instrument_loglik"]
             for r in s["resps"]]
            == pytest.approx([float(r[0][0]) for s in standard["samples"]["bbq_instrument_loglik"]
                              for r in s["resps"]], abs=1e-4))


@pytest.mark.slow
def test_auto_batch_size_is_probed_per_request_list_and_cut_out(embedded_checkpoint):
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(device="cpu", batch_size="auto", max_batch_size=4, idle_seconds=0,
                     mc_scoring="shared_prefix")
    out = _samples(lm, ["bbq_instrument_loglik", "crows_pairs_ext_loglik"], limit=3)
    metering = out["config"]["metering"]
    assert metering["batch_sizes_detected"] == [4, 4]  # one probe per task's request list
    for task in ("bbq_instrument_loglik", "crows_pairs_ext_loglik"):
        window = metering["per_task"][task]
        assert window["windows"] == 2  # the probe split the window in two segments
    assert metering["mc_scoring"]["used"] == "shared_prefix"
    assert metering["mc_scoring"]["requests_packed"] == 3 * 3 + 3 * 2
