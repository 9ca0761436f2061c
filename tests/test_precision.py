"""precision= switch: plan validation and real quantised loads on the CPU (bitsandbytes)."""

import logging
import math

import pytest
import torch

from lm_eval_ext.backends.precision import (
    BNB_MATMUL_LOGGER,
    PrecisionError,
    PrecisionPlan,
    plan_precision,
    verify_precision,
)
from lm_eval_ext.errors import ConfigError


def test_plans():
    assert plan_precision(None, "auto", {}) == PrecisionPlan(None, "auto", None)
    assert plan_precision("bf16", "auto", {}) == PrecisionPlan("bf16", "bfloat16", None)
    assert plan_precision(None, "float16", {}) == PrecisionPlan("fp16", "float16", None)
    assert plan_precision("int8", "auto", {}) == PrecisionPlan("int8", "bfloat16", "int8")
    assert plan_precision("nf4", "float16", {}).dtype == "float16"


@pytest.mark.parametrize(
    ("precision", "dtype", "extra", "message"),
    [
        ("int4", "auto", {}, "precision='int4' is not valid; use one of bf16, fp16, fp32, int8, nf4, fp4"),
        ("bf16", "float16", {}, "precision=bf16 conflicts with dtype=float16"),
        ("int8", "auto", {"load_in_8bit": True}, "load_in_8bit are not accepted; use precision"),
        (None, "float64", {}, "dtype='float64' is not one of"),
    ],
)
def test_bad_precision_args_say_what_is_valid(precision, dtype, extra, message):
    with pytest.raises(PrecisionError, match=message.replace("(", r"\(")) as err:
        plan_precision(precision, dtype, extra)
    assert isinstance(err.value, ConfigError)


@pytest.fixture(scope="module")
def loaded(embedded_checkpoint):
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    def load(precision):
        return HFMeteredLM(device="cpu", precision=precision, idle_seconds=0)
    return load


def _first_loglikelihood(lm) -> float:
    context = lm.tok_encode("Question: What is the capital of France?\nAnswer:")
    continuation = lm.tok_encode(" Paris")
    [(ll, _)] = lm._loglikelihood_tokens([(("q", " Paris"), context, continuation)])
    return ll


@pytest.mark.slow
def test_int8_loads_linear8bitlt_and_scores(loaded, caplog):
    lm = loaded("int8")
    assert lm._precision == "int8"
    assert lm._quantized_modules["Linear8bitLt"] == 210  # 30 layers x 7 projections
    with caplog.at_level(logging.WARNING, logger=BNB_MATMUL_LOGGER):
        ll = _first_loglikelihood(lm)
        assert _first_loglikelihood(lm) == ll
    assert math.isfinite(ll) and ll < 0
    # bitsandbytes' cast note, said on each of the 420 int8 matmuls, is said once (N18_24)
    notes = [r.getMessage() for r in caplog.records if r.name == BNB_MATMUL_LOGGER]
    assert notes == ["MatMul8bitLt: inputs will be cast from torch.bfloat16 to float16 during "
                     "quantization"]
    # a quantised checkpoint checked against a plain plan is refused, and the advice works
    with pytest.raises(PrecisionError, match="the checkpoint is already quantised .*"
                       "pass precision=int8\\|nf4\\|fp4 to match it"):
        verify_precision(lm.model, plan_precision(None, "auto", {}))
    assert verify_precision(lm.model, plan_precision("int8", "auto", {}))[0] == "int8"


@pytest.mark.slow
def test_nf4_loads_linear4bit_nf4(loaded):
    lm = loaded("nf4")
    assert lm._quantized_modules == {"Linear8bitLt": 0, "Linear4bit": 210}
    assert lm.model.model.layers[0].mlp.down_proj.weight.quant_type == "nf4"
    assert math.isfinite(_first_loglikelihood(lm))
    with pytest.raises(PrecisionError, match="precision=fp4 was requested but the Linear4bit "
                       "weights use nf4"):
        verify_precision(lm.model, plan_precision("fp4", "auto", {}))


@pytest.mark.slow
def test_bf16_and_fp32_change_the_dtype_and_scores_stay_close(loaded):
    bf16, fp32 = loaded("bf16"), loaded("fp32")
    assert (bf16.model.dtype, fp32.model.dtype) == (torch.bfloat16, torch.float32)
    assert _first_loglikelihood(bf16) == pytest.approx(_first_loglikelihood(fp32), abs=0.5)


@pytest.mark.slow
def test_a_precision_that_did_not_take_effect_is_an_error(loaded):
    fp32 = loaded("fp32")
    with pytest.raises(PrecisionError, match="no Linear8bitLt modules"):
        verify_precision(fp32.model, PrecisionPlan("int8", "bfloat16", "int8"))
    with pytest.raises(PrecisionError, match="loaded as torch.float32"):
        verify_precision(fp32.model, PrecisionPlan("bf16", "bfloat16", None))
