"""One definition of "the same loaded engine": worker grouping, warm reuse, derivation, parent check.

Each pair below is a parent cell and a child cell of one campaign, with what is true of it written
by hand: whether the campaign puts both in one worker (``Cell.load_key``), whether the worker's
warm registry reuses the model for the child (the key hf-metered builds from the model args
lm-eval's own evaluator hands it), whether the campaign plans the child as derived, and whether
the parent check of ``answers_from`` accepts the parent's recorded model args. Moving one arg
to another group (or a second list in one of the four places) breaks a row.
"""

from __future__ import annotations

import pytest

from lm_eval_ext.backends.engine_key import (
    DERIVATION_ARGS,
    RUN_ARGS,
    SERVING_ARGS,
    at_batch_one,
    load_key,
)
from lm_eval_ext.backends.model_args import HFMeteredArgs, MeteredArgs, merge_model_args
from lm_eval_ext.backends.parent_run import _check_same_args
from lm_eval_ext.campaign.derivation import plan_derivations
from lm_eval_ext.campaign.spec import MODEL, Cell, parse_model_args
from lm_eval_ext.errors import ConfigError

TASK = "bbq_subset_25pct_loglik"
PARENT = ("precision=bf16", {"batch_size": 1})

#: child (model args, options) -> (one worker, warm reuse, planned derivation, parent accepts);
#: each child evaluates fewer items than the parent (a repeat of its items is measured)
PAIRS = {
    "limit only": (("precision=bf16", {"batch_size": 1, "limit": 8}), (True, True, True, True)),
    "same value, other spelling": (("precision = bf16", {"batch_size": "1", "limit": 8}),
                                   (True, True, True, True)),
    "another batch size": (("precision=bf16", {"batch_size": 4}), (True, True, False, True)),
    "idle seconds": (("precision=bf16,idle_seconds=1", {"batch_size": 1}),
                     (True, True, False, False)),
    "scoring path": (("precision=bf16,mc_scoring=shared_prefix", {"batch_size": 1}),
                     (True, True, False, False)),
    "precision": (("precision=fp16", {"batch_size": 1}), (False, False, False, False)),
    "lm-eval load arg": (("precision=bf16,revision=main", {"batch_size": 1}),
                         (False, False, False, False)),
    "device option": (("precision=bf16", {"batch_size": 1, "device": "cpu", "limit": 8}),
                      (False, False, True, True)),
    "trust_remote_code option": (("precision=bf16", {"batch_size": 1,
                                                     "trust_remote_code": True}),
                                 (False, False, False, False)),
}


def _cell(cell_id: str, model_args: str, options: dict) -> Cell:
    return Cell(cell_id, "m", "c", TASK, model_args, options)


def _warm_key(cell: Cell) -> str:
    """The key hf-metered builds, from the args lm-eval's CLI and evaluator hand the model."""
    args = parse_model_args(cell.model_args, cell.cell_id)
    if cell.options.get("trust_remote_code"):  # lm-eval's CLI adds it to the model args
        args["trust_remote_code"] = True
    extra = {k: cell.options.get(k) for k in ("batch_size", "max_batch_size", "device")}
    return load_key(MODEL, merge_model_args(MODEL, args, extra))


def _parent_accepts(parent: Cell, child: Cell) -> bool:
    recorded = parse_model_args(parent.model_args, parent.cell_id)  # config.model_args
    try:
        _check_same_args("answers_from", recorded, {**child.engine_args})
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("name", PAIRS)
def test_the_four_places_agree_with_the_written_truth(name):
    (model_args, options), expected = PAIRS[name]
    parent, child = _cell("p", *PARENT), _cell("k", model_args, options)
    observed = (parent.load_key() == child.load_key(),
                _warm_key(parent) == _warm_key(child),
                plan_derivations([parent, child], order=lambda task: None) == {"k": "p"},
                _parent_accepts(parent, child))
    assert observed == expected


def test_every_own_arg_of_every_backend_is_in_one_group():
    """An own arg outside every group would count as a load arg: a silent reload."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLMArgs

    loads = {"pretrained", "precision"}
    for schema in (MeteredArgs, HFMeteredArgs, HFMeteredLMArgs):
        for name in schema.names():
            groups = [g for g in (RUN_ARGS, DERIVATION_ARGS, SERVING_ARGS, loads) if name in g]
            assert len(groups) == 1, (schema.__name__, name, groups)


@pytest.mark.parametrize(("value", "expected"), [(None, True), (1, True), ("1", True),
                                                 ("1.0", True), (4, False), ("auto", False),
                                                 ("None", False)])
def test_batch_one(value, expected):
    assert at_batch_one(value) is expected


@pytest.mark.parametrize(("options", "same_engine"), [({"batch_size": 1, "limit": 8}, True),
                                                      ({"batch_size": 4}, False)])
def test_a_vllm_engine_is_built_for_its_batch_size(options, same_engine):
    """vllm-metered's batch size is the engine's max_num_seqs: a load arg there, not a run arg;
    the worker's grouping and the key vllm-metered builds agree."""
    parent = Cell("p", "m", "c", TASK, "precision=bf16", {"batch_size": 1}, backend="vllm-metered")
    child = Cell("k", "m", "c", TASK, "precision=bf16", options, backend="vllm-metered")

    def warm_key(cell: Cell) -> str:  # as VLLMMeteredLM builds it from lm-eval's arguments
        args = parse_model_args(cell.model_args, cell.cell_id)
        return load_key("vllm-metered", {**args, "batch_size": cell.options["batch_size"]})

    assert (parent.load_key() == child.load_key()) is same_engine
    assert (warm_key(parent) == warm_key(child)) is same_engine


def test_fp32_written_out_is_the_embedded_models_own_dtype_for_answers_from():
    """Trial 15 (N15_209): a parent at the default precision refused a child that wrote
    `precision=fp32`, the same dtype; a local checkpoint's fp32 stays a difference."""
    parent, child = _cell("p", "", {"batch_size": 1}), _cell("k", "precision=fp32",
                                                            {"batch_size": 1})
    assert _parent_accepts(parent, child) and _parent_accepts(child, parent)
    packaged = _cell("k", "pretrained=gemma3-270m,precision=fp32", {"batch_size": 1})
    assert _parent_accepts(_cell("p", "pretrained=gemma3-270m", {"batch_size": 1}), packaged)
    local = _cell("k", "pretrained=/models/m,precision=fp32", {"batch_size": 1})
    assert not _parent_accepts(_cell("p", "pretrained=/models/m", {"batch_size": 1}), local)


def test_another_metering_arg_is_refused_with_its_reason():
    """Trial 15 (N15_210): idle_seconds=3 against the parent's 0 was refused without saying
    why a setting that moves no answer matters: the derived joules are the parent's."""
    with pytest.raises(ConfigError) as refused:
        _check_same_args("answers_from", {"idle_seconds": 0}, {"idle_seconds": 3})
    assert str(refused.value) == (
        "answers_from: model args differ from the parent's (idle_seconds: 0.0 (parent) vs 3.0 "
        "(this run); a derived run's joules are its parent's, measured with the parent's "
        "metering args); run with the parent's model args, or without answers_from")
    with pytest.raises(ConfigError) as refused:
        _check_same_args("answers_from", {}, {"precision": "bf16"})
    assert "measured with" not in str(refused.value)
