"""vllm-metered: lm-eval's vllm model inside the metering seam.

vLLM's GPU engine cannot run here, so the end-to-end test puts a CPU stand-in engine on the
path (``tests/stand_in_vllm``: the same checkpoint through transformers, answering lm-eval's
two engine calls as vLLM does); lm-eval's ``VLLM`` class, the metering and the switches are
the real code. The real engine is measured on the H200 (``benchmarks/vllm_compare.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import package_task_manager, run_cli

from lm_eval_ext.backends.vllm.engine_args import EnginePlan, plan_engine
from lm_eval_ext.errors import ConfigError

STAND_IN = Path(__file__).parent / "stand_in_vllm"
TASKS = ["bbq_subset_25pct", "bbq_subset_25pct_loglik"]


def test_without_vllm_the_run_stops_with_one_line(tmp_path):
    proc = run_cli(["lm_eval", "--model", "vllm-metered", "--tasks", TASKS[0], "--limit", "1",
                    "--output_path", str(tmp_path)])
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        'lm_eval: error: --model vllm-metered needs vLLM, which is not installed: '
        'pip install "lm-eval-ext[vllm]"')


@pytest.mark.parametrize(("precision", "dtype", "quantization"), [
    ("bf16", "bfloat16", None), ("fp16", "float16", None), ("fp32", "float32", None),
    ("fp8", "bfloat16", "fp8")])
def test_precision_becomes_vllm_dtype_and_quantization(precision, dtype, quantization):
    args = {"gpu_memory_utilization": 0.5}
    plan = plan_engine(precision, 1, args)
    assert (plan.dtype, plan.quantization) == (dtype, quantization)
    assert args == {"gpu_memory_utilization": 0.5}  # the rest goes to vLLM unchanged


@pytest.mark.parametrize(("precision", "batch_size", "args", "message", "followed"), [
    ("int8", 1, {"dtype": "float16"}, "precision=int8 and dtype='float16' both set the weights' "
     "format; pass one of them", (None, 1, {"dtype": "float16"})),
    (None, 8, {"max_num_seqs": "4"}, "--batch_size 8 and max_num_seqs=4 both set how many "
     "sequences vLLM runs at once; pass one of them", (None, 1, {"max_num_seqs": "4"})),
])
def test_a_setting_given_twice_is_told_to_pass_one(precision, batch_size, args, message,
                                                    followed):
    with pytest.raises(ConfigError) as error:
        plan_engine(precision, batch_size, dict(args))
    assert str(error.value) == f"vllm-metered: {message}"
    plan = plan_engine(*followed)  # followed: one of them
    assert (plan.dtype, plan.max_num_seqs) == (("float16", None) if precision else ("auto", 4))


def test_batch_size_becomes_max_num_seqs_and_gpus_multiply():
    assert plan_engine(None, "64", {}).max_num_seqs == 64
    assert plan_engine(None, 1, {}).max_num_seqs is None  # lm-eval's default: vLLM's own
    assert plan_engine(None, "1", {}).max_num_seqs == 1   # typed --batch_size 1
    assert plan_engine(None, "auto", {"max_num_seqs": "32"}).max_num_seqs == 32
    plan = plan_engine(None, 1, {"tensor_parallel_size": "2", "dtype": "bfloat16"})
    assert plan == EnginePlan(None, "bfloat16", None, None, 2, 1) and plan.gpus == 2
    assert plan.engine_kwargs() == {"dtype": "bfloat16", "quantization": None,
                                    "tensor_parallel_size": 2, "data_parallel_size": 1}


@pytest.mark.parametrize(("precision", "batch_size", "args", "message"), [
    ("int8", 1, {}, "precision=int8 is not available: vLLM has no in-flight 8-bit bitsandbytes"
     " quantisation; use precision=fp8 (8-bit) or precision=nf4 (4-bit), or --model hf-metered"),
    ("fp4", 1, {}, "precision=fp4 is not available"),
    ("int3", 1, {}, "precision='int3' is not one of bf16, fp16, fp32, fp8, nf4"),
    ("bf16", 1, {"dtype": "float16"}, "precision=bf16 and dtype='float16' both set"),
    (None, "8", {"max_num_seqs": 16}, "--batch_size 8 and max_num_seqs=16 both set"),
    (None, 1, {"tensor_parallel_size": "two"}, "tensor_parallel_size='two' must be a positive"),
    (None, 0, {}, "batch_size=0 is not valid"),
])
def test_bad_switches_are_one_line_with_the_fix(precision, batch_size, args, message):
    with pytest.raises(ConfigError, match="^vllm-metered: ") as caught:
        plan_engine(precision, batch_size, dict(args))
    assert message in str(caught.value)


def test_data_parallel_replicas_with_bars_off_are_refused_before_the_engine_starts():
    """lm-eval's replicas call vLLM with a bar, which divides by zero under TQDM_DISABLE (tqdm
    reads it at import: a fresh process per setting)."""
    plan = ("from lm_eval_ext.errors import ConfigError\n"
            "from lm_eval_ext.backends.vllm.engine_args import plan_engine\n"
            "try:\n    print(plan_engine(None, 1, {'data_parallel_size': 2}).gpus)\n"
            "except ConfigError as e:\n    print(e)\n"
            "print(plan_engine(None, 1, {'tensor_parallel_size': 2}).gpus)")
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    off = subprocess.run([sys.executable, "-c", plan], env={**env, "TQDM_DISABLE": "1"},
                         capture_output=True, text=True, timeout=120)
    on = subprocess.run([sys.executable, "-c", plan], env=env, capture_output=True, text=True,
                        timeout=120)
    assert off.returncode == on.returncode == 0, off.stderr + on.stderr
    assert off.stdout.splitlines() == [
        "vllm-metered: data_parallel_size=2 with progress bars off (TQDM_DISABLE): lm-eval's "
        "replicas call vLLM 0.24 with a bar, which then divides by zero (vLLM issue 28097); "
        "unset TQDM_DISABLE for a data-parallel run", "2"]  # one engine: no bar, no refusal
    assert "progress bars off" not in on.stdout and on.stdout.splitlines()[-1] == "2"


def _samples(lm, tasks):
    from lm_eval import simple_evaluate

    results = simple_evaluate(model=lm, tasks=tasks, limit=2, log_samples=True,
                              bootstrap_iters=0, gen_kwargs="max_gen_toks=16",
                              task_manager=package_task_manager())
    by_task = {task: sorted(results["samples"][task], key=lambda s: s["doc_id"])
               for task in tasks}
    return results, by_task


@pytest.fixture
def stand_in_engine(monkeypatch, tmp_path):
    """The stand-in ``vllm`` on the path for this test; its engine arguments logged."""
    monkeypatch.syspath_prepend(str(STAND_IN))
    log = tmp_path / "engine.json"
    monkeypatch.setenv("LM_EVAL_EXT_STAND_IN_LOG", str(log))
    yield log
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


def test_vllm_metered_sends_what_hf_metered_sends_and_meters_each_task(stand_in_engine,
                                                                       embedded_lm):
    """Same prompts (chat template included), same greedy text and log-likelihoods per item
    as hf-metered (fp32, CPU); one window per task, forward time null with its flag."""
    from lm_eval_ext.backends.vllm.metered import VLLMMeteredLM

    lm = VLLMMeteredLM(precision="fp32", batch_size="8")
    results, ours = _samples(lm, TASKS)
    _, theirs = _samples(embedded_lm, TASKS)
    gen, loglik = TASKS
    assert [s["doc_id"] for s in ours[gen]] == [s["doc_id"] for s in theirs[gen]] == [0, 1]
    assert [s["arguments"] for s in ours[gen]] == [s["arguments"] for s in theirs[gen]]
    assert [s["resps"] for s in ours[gen]] == [s["resps"] for s in theirs[gen]]
    for mine, hf in zip(ours[loglik], theirs[loglik], strict=True):
        assert [r[0][1] for r in mine["resps"]] == [r[0][1] for r in hf["resps"]]  # is_greedy
        assert [r[0][0] for r in mine["resps"]] == pytest.approx(
            [r[0][0] for r in hf["resps"]], abs=1e-4)
    assert json.loads(stand_in_engine.read_text())["dtype"] == "float32"
    assert json.loads(stand_in_engine.read_text())["max_num_seqs"] == 8
    metering = results["config"]["metering"]
    assert sorted(metering["per_task"]) == sorted(TASKS)
    for block in (metering, *metering["per_task"].values()):
        assert block["forward_seconds"] is None and block["forward_share"] is None
        assert "forward_time_not_observable" in block["flags"]
    assert metering["per_task"][gen]["n_requests"] == 2
    assert metering["engine"]["running"] == {"dtype": "float32", "quantization": None,
                                             "max_num_seqs": 8}
    info = results["config"]["vllm_metered"]
    assert info["generation_chat_template_applied_by"] == "vllm-metered"



@pytest.mark.slow
def test_disabled_progress_bars_do_not_crash_the_engine(tmp_path):
    """vLLM 0.24's generate divides by tqdm's elapsed time, 0 under TQDM_DISABLE (the stand-in
    does the same arithmetic, checked first); `lm_eval --model vllm-metered` then asks for no
    bar and finishes."""
    env = {"TQDM_DISABLE": "1", "PYTHONPATH": str(STAND_IN)}
    bare = run_cli(["python", "-c", "import vllm; vllm.LLM.generate(None, [], None)"], env=env)
    assert bare.returncode != 0 and "ZeroDivisionError" in bare.stderr
    proc = run_cli(["lm_eval", "--model", "vllm-metered", "--model_args", "precision=fp32",
                    "--tasks", TASKS[0], "--limit", "2", "--batch_size", "8", "--gen_kwargs",
                    "max_gen_toks=8", "--output_path", str(tmp_path)], env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [results] = tmp_path.rglob("results_*.json")
    assert json.loads(results.read_text())["n-samples"][TASKS[0]]["effective"] == 2
