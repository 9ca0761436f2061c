"""A campaign names its backend; cells with their own answers_from are left to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lm_eval_ext.campaign import build_spec
from lm_eval_ext.campaign.derivation import plan_derivations
from lm_eval_ext.errors import ConfigError

STAND_IN = Path(__file__).parent / "stand_in_vllm"


def _raw(**extra):
    return {"models": {"m": ""}, "tasks": ["bbq_subset_25pct_loglik"],
            "conditions": {"M0": {"batch_size": 1}, "M4": {"batch_size": 1, "limit": 8}},
            **extra}


def test_vllm_cells_run_vllm_metered_and_record_it():
    cells = build_spec(_raw(backend="vllm-metered", execution="lm-eval")).cells
    assert [c.lm_eval_argv("out")[:2] for c in cells] == [["--model", "vllm-metered"]] * 2
    assert {c.config()["model"] for c in cells} == {"vllm-metered"}
    assert {c.model_args for c in cells} == {""}  # lm-eval mode sets no hf-metered arg on vLLM
    assert plan_derivations(cells) == {}  # answers_from is hf-metered's
    hf = build_spec(_raw()).cells
    assert plan_derivations(hf) == {hf[1].cell_id: hf[0].cell_id}
    assert hf[0].config()["model"] == "hf-metered" and hf[0].load_key() != cells[0].load_key()


def test_an_unknown_backend_is_one_line():
    with pytest.raises(ConfigError, match=r"^backend: 'hf' is not a metered model; use "
                                          r"hf-metered or vllm-metered"):
        build_spec(_raw(backend="hf"))


def _check_in_fresh_process(model_args: str, stand_in: bool) -> str:
    """``check_model_args`` for vllm-metered in a new process (vLLM importable or not): its line."""
    code = ("from lm_eval_ext.campaign.preflight import check_model_args\n"
            "from lm_eval_ext.errors import ConfigError\n"
            "try:\n"
            f"    check_model_args({model_args!r}, 1, 'models.m', backend='vllm-metered')\n"
            "    print('accepted')\n"
            "except ConfigError as e:\n    print(e)\n")
    path = f"{STAND_IN}:{Path.cwd()}" if stand_in else str(Path.cwd())
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": path, "PATH": "/usr/bin"}, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_dry_run_checks_vllm_args_as_vllm_metered_would():
    assert _check_in_fresh_process("precision=fp8", stand_in=False).startswith(
        "models.m: --model vllm-metered needs vLLM, which is not installed")
    assert _check_in_fresh_process("precision=fp8", stand_in=True) == "accepted"
    assert _check_in_fresh_process("precision=int8", stand_in=True).startswith(
        "models.m: vllm-metered: precision=int8 is not available")


def test_a_cell_with_its_own_answers_from_is_neither_planned_nor_a_parent():
    """The campaign appended its own answers_from after the user's (two on one argv)."""
    raw = _raw()
    raw["conditions"]["M4"]["model_args"] = "answers_from=/runs/m0/results.json"
    cells = build_spec(raw).cells
    assert plan_derivations(cells) == {}
    assert cells[1].lm_eval_argv("out").count("--model_args") == 1
