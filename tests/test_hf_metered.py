"""hf-metered end to end: the config.metering contract, bad args, task grouping order."""

import json
import re

import pytest
from helpers import package_task_manager, run_cli
from lm_eval import simple_evaluate
from lm_eval.models.huggingface import HFLM

from lm_eval_ext.errors import ConfigError

METERING_KEYS = {"precision", "batch_size", "inference_seconds", "forward_seconds", "load_seconds",
                 "energy_joules", "energy_joules_idle_corrected", "energy_source", "flags", "gpus",
                 "per_task", "quantized_modules", "boundary", "counter_period_s"}
PER_TASK_KEYS = {"inference_seconds", "energy_joules", "n_requests", "request_types"}


@pytest.fixture(scope="module")
def task_manager(data_dir):
    return package_task_manager()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"chat_template": "always"}, "chat_template='always' is not valid; use one of auto, off"),
        ({"energy": "zeus"}, "energy='zeus' is not valid; use one of auto, nvml, rapl, off"),
        ({"precison": "int8"}, "unknown model arg(s) precison (did you mean precision?); valid: "),
    ],
)
def test_bad_model_args_list_the_valid_values(args, message):
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    with pytest.raises(ConfigError, match=re.escape(message)):
        HFMeteredLM(device="cpu", **args)


@pytest.mark.slow
def test_cli_run_writes_complete_metering_block(tmp_path, embedded_checkpoint):
    out = tmp_path / "OUT"
    proc = run_cli(["lm_eval", "--model", "hf-metered", "--model_args",
                    "precision=bf16,codecarbon=true,idle_seconds=0.5",
                    "--tasks", "bbq_subset_12p5pct_loglik,bbq_subset_25pct", "--limit", "3",
                    "--batch_size", "2", "--output_path", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    metering = results["config"]["metering"]
    assert METERING_KEYS <= set(metering)
    assert (metering["precision"], metering["batch_size"]) == ("bf16", 2)
    per_task = metering["per_task"]
    assert set(per_task) == {"bbq_subset_12p5pct_loglik", "bbq_subset_25pct"}
    assert all(PER_TASK_KEYS <= set(v) for v in per_task.values())
    assert per_task["bbq_subset_12p5pct_loglik"]["n_requests"] == 9  # 3 items x 3 options
    assert per_task["bbq_subset_25pct"]["request_types"]["generate_until"]["n_requests"] == 3
    total = sum(v["inference_seconds"] for v in per_task.values())
    assert metering["inference_seconds"] == pytest.approx(total)
    assert 0 < metering["forward_seconds"] <= metering["inference_seconds"]
    assert metering["inference_seconds"] < float(results["total_evaluation_time_seconds"])
    if metering["energy_source"] == "unavailable":  # this CPU machine exposes no RAPL
        assert metering["energy_joules"] is None and "energy_unavailable" in metering["flags"]
    else:
        assert metering["energy_joules"] > 0
    cc = metering["codecarbon"]
    assert cc["total_kwh"] > 0 and cc["cpu_kwh"] > 0
    assert cc["water_litres_estimate"]["low"] == pytest.approx(1.8 * cc["total_kwh"])
    assert cc["water_litres_estimate"]["high"] == pytest.approx(4.0 * cc["total_kwh"])
    assert "ESTIMATE" in cc["water_litres_estimate"]["note"]


@pytest.mark.slow
def test_grouping_by_task_keeps_answers_in_request_order(task_manager, embedded_checkpoint):
    """Mixed-task requests give the same per-item log-likelihoods as plain HFLM."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    tasks = ["bbq_subset_12p5pct_loglik", "bbq_subset_25pct_loglik"]
    runs = {}
    for name, lm in (("hf", HFLM(pretrained=str(embedded_checkpoint), device="cpu")),
                     ("metered", HFMeteredLM(device="cpu", idle_seconds=0))):
        res = simple_evaluate(model=lm, tasks=tasks, task_manager=task_manager, limit=4,
                              log_samples=True, bootstrap_iters=0)
        runs[name] = {t: [float(r[0][0]) for s in res["samples"][t] for r in s["resps"]]
                      for t in tasks}
    for task in tasks:
        assert len(runs["metered"][task]) == 12
        assert runs["metered"][task] == pytest.approx(runs["hf"][task], abs=1e-4)


@pytest.mark.slow
def test_auto_batch_size_probe_is_cut_out(task_manager, embedded_checkpoint):
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lm = HFMeteredLM(device="cpu", batch_size="auto", max_batch_size=4, idle_seconds=0)
    res = simple_evaluate(model=lm, tasks=["bbq_subset_12p5pct_loglik"],
                          task_manager=task_manager, limit=4, bootstrap_iters=0)
    task = res["config"]["metering"]["per_task"]["bbq_subset_12p5pct_loglik"]
    assert task["windows"] == 2  # the probe split the window in two segments
    assert task["forward_seconds"] <= task["inference_seconds"]
    assert res["config"]["metering"]["batch_sizes_detected"] == [4]


@pytest.mark.slow
def test_generation_auto_batch_size_is_recorded_and_the_probe_cut_out(task_manager,
                                                                       embedded_checkpoint):
    """lm-eval probes first thing in generate_until; the probe is excluded and the batch size
    it found is recorded (generate_until keeps it in a local variable)."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    # max_length bounds the probe's forward (it runs at the model's full context otherwise)
    lm = HFMeteredLM(device="cpu", batch_size="auto", max_batch_size=2, max_length=640,
                     idle_seconds=0, generation="standard")
    res = simple_evaluate(model=lm, tasks=["bbq_subset_12p5pct"], task_manager=task_manager,
                          limit=2, bootstrap_iters=0, gen_kwargs="max_gen_toks=8")
    metering = res["config"]["metering"]
    assert metering["batch_sizes_detected"] == [2]
    task = metering["per_task"]["bbq_subset_12p5pct"]
    assert task["windows"] == 2 and task["n_requests"] == 2
    assert 0 < task["forward_seconds"] <= task["inference_seconds"]


def test_hf_metered_is_composed_of_three_package_classes_with_one_init_and_one_generate_until():
    from lm_eval_ext.backends.hf.metered import HFMeteredLM, HFMeteredLMArgs

    ours = [k for k in HFMeteredLM.__mro__ if k.__module__.startswith("lm_eval_ext")]
    assert [k.__name__ for k in ours] == ["HFMeteredLM", "HFMeteredBase", "MeteredLM"]
    assert [k.__name__ for k in ours if "__init__" in vars(k)] == ["HFMeteredBase"]
    assert [k.__name__ for k in ours if "generate_until" in vars(k)] == ["MeteredLM"]
    # one declared schema: every own arg with its default
    assert HFMeteredLMArgs.names()[-6:] == ("mc_scoring", "generation", "cuda_graphs",
                                            "answers_from", "recheck", "recheck_seed")
    assert HFMeteredLMArgs().generation == "fast"


@pytest.mark.parametrize(("args", "message"), [
    ("idle_seconds=0,recheck=0.5", "hf-metered: model arg recheck applies to a run that takes its "
     "answers from a parent (answers_from), which is not given: leave recheck out, or add "
     "answers_from=<the parent's results file>"),
    ("recheck_seed=3", "hf-metered: model arg recheck_seed applies to a run that takes its answers"),
    ("carbon_intensity=400", "hf-metered: model arg carbon_intensity sets CodeCarbon's cross-check,"
     " which is off: add codecarbon=true, or leave carbon_intensity out"),
    ("codecarbon_country=FRA", "hf-metered: model arg codecarbon_country sets CodeCarbon's cross-check"),
    ("codecarbon_country=CAN", "hf-metered: model arg codecarbon_country sets CodeCarbon's"),  # default
    ("codecarbon_region=ontario", "hf-metered: model arg codecarbon_region sets CodeCarbon's"),
    ("codecarbon_region=paris,codecarbon=false", "hf-metered: model arg codecarbon_region sets CodeCarbon's"),
])
def test_model_args_that_act_only_beside_another_are_refused_without_it(args, message):
    """trial 12: recheck/recheck_seed without answers_from and the carbon settings without
    codecarbon=true were taken and did nothing (rc 0, no word)."""
    import dataclasses

    from lm_eval_ext.backends.hf.metered import HFMeteredLM, HFMeteredLMArgs

    own = HFMeteredLMArgs(carbon_intensity=400.0, recheck=0.5)
    assert HFMeteredLM._codecarbon(own) is None  # CodeCarbon's settings reach nothing
    assert HFMeteredLM.derivation(None, own, {}, {}) is None  # nor does the re-check
    with pytest.raises(ConfigError) as caught:
        HFMeteredLM.check_model_args(args)
    assert str(caught.value).startswith(message)
    HFMeteredLM.check_model_args("codecarbon=true,carbon_intensity=400,codecarbon_country=FRA")
    # trial 15: the defaults given by name were taken without a word; not given, they still apply
    assert HFMeteredLMArgs().codecarbon_location() == ("CAN", "ontario")
    assert HFMeteredLMArgs(codecarbon_country="FRA").codecarbon_location() == ("FRA", None)
    own = HFMeteredLM.checked_args({"answers_from": "r.json", "recheck": "0.5"})[0]
    assert (own.recheck, own.recheck_seed) == (0.5, 0)
    assert dataclasses.astuple(HFMeteredLM.checked_args({})[0])[-2:] == (0.05, 0)


def test_energy_rapl_where_rapl_cannot_be_read_is_refused_before_the_load():
    """trial 14: energy=rapl where RAPL is not readable was an OSError traceback from
    metering/sources.py after the model loaded; it is refused exactly where RAPL cannot be
    read (this machine's RaplSource is the reference)."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.metering.sources import RaplSource

    try:
        RaplSource()
    except OSError as exc:
        with pytest.raises(ConfigError) as caught:
            HFMeteredLM.check_model_args("energy=rapl")
        assert str(caught.value) == (
            f"hf-metered: energy=rapl needs RAPL counters this process can read ({exc}); use "
            "energy=auto (RAPL where it can be read, else none), or run where "
            "/sys/class/powercap/intel-rapl:*/energy_uj is readable")
    else:
        HFMeteredLM.check_model_args("energy=rapl")
    HFMeteredLM.check_model_args("energy=auto")  # followed


@pytest.mark.parametrize(("args", "message"), [
    ("max_length=1", "model arg max_length=1: give a whole number of tokens, at least 16"),
    ("max_length=-1", "model arg max_length=-1: give a whole number of tokens"),
    ("backend=seq2seq", "model arg backend='seq2seq': hf-metered runs causal language models"),
    ("add_bos_token=maybe", "model arg add_bos_token='maybe' is not a boolean"),
    ("revision=nope", "model arg revision='nope' names a hub revision, and this model is the "
                      "embedded or a packaged one"),
])
def test_lm_evals_own_hf_args_that_fail_after_the_load_are_refused(args, message):
    """trial 14: max_length=1 (lm-eval's bare AssertionError), backend=seq2seq, add_bos_token=
    maybe (tracebacks after the load) and revision=nope on the embedded model (recorded, not
    used) passed the model-arg check."""
    import inspect

    from lm_eval.models.huggingface import HFLM

    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    assert "assert len(continuation_enc) <= self.max_length" in inspect.getsource(HFLM)
    with pytest.raises(ConfigError) as caught:
        HFMeteredLM.check_model_args(f"idle_seconds=0,{args}")
    assert str(caught.value).startswith(f"hf-metered: {message}")
    HFMeteredLM.check_model_args("max_length=2048,backend=causal,add_bos_token=true,"
                                 "revision=main")  # followed


def test_hf_args_that_need_what_this_machine_lacks_are_refused():
    """trial 14: parallelize=True without CUDA, peft= without the peft package and
    attn_implementation=flash_attention_2 without flash-attn were tracebacks at the load."""
    import importlib.util

    import torch

    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    lacking = {"parallelize=True": not torch.cuda.is_available(),
               "peft=/x": importlib.util.find_spec("peft") is None,
               "attn_implementation=flash_attention_2":
                   importlib.util.find_spec("flash_attn") is None or not torch.cuda.is_available()}
    assert any(lacking.values())  # this machine (and CI) lacks them
    for args, lacks in lacking.items():
        if lacks:
            with pytest.raises(ConfigError, match=re.escape(args.split("=")[0])):
                HFMeteredLM.check_model_args(args)
    if lacking["attn_implementation=flash_attention_2"]:
        with pytest.raises(ConfigError) as caught:
            HFMeteredLM.check_model_args("attn_implementation=flash_attention_2")
        assert str(caught.value) == (
            "hf-metered: model arg attn_implementation=flash_attention_2 needs the flash-attn "
            "package and a CUDA GPU; use attn_implementation=sdpa (or eager), or leave it out")
        HFMeteredLM.check_model_args("attn_implementation=sdpa")  # followed


def test_power_check_without_a_cuda_gpu_is_refused_before_the_load():
    """trial 15: power_check=true on the CPU ran (rc 0); its block held only 'not sampled'."""
    import torch

    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError) as caught:
        HFMeteredLM.check_model_args("power_check=true")
    assert str(caught.value) == (
        "hf-metered: power_check=true samples a GPU's power through NVML, and this run has none "
        "(device=auto, CUDA available: False); leave power_check out, or run on a CUDA GPU")
    HFMeteredLM.check_model_args("power_check=false")  # followed


@pytest.mark.parametrize(("make", "problem"), [
    (lambda p: p.mkdir(), "holds no config.json, so it is no transformers model folder"),
    (lambda p: p.write_text(""), "is a file, not a model folder"),
    (lambda p: (p.mkdir(), (p / "config.json").write_text("{}")),
     "config.json names no model_type, so transformers cannot tell the architecture"),
    (lambda p: (p.mkdir(), (p / "config.json").write_text('{"model_type": "llama"}')),
     "holds no weights (*.safetensors, *.bin)"),
])
def test_a_local_model_folder_transformers_cannot_load_is_one_line(make, problem, tmp_path,
                                                                   embedded_checkpoint):
    """trial 15: an empty folder, a file, a config.json without model_type and a half-copied
    checkpoint were transformers tracebacks after the tasks were built (the judge's: the
    catch-all)."""
    import shutil

    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.command_preflight import PreflightError, check_command_line
    from lm_eval_ext.judge.run import judge_model_class

    folder = tmp_path / "model"
    make(folder)
    for check in (lambda: HFMeteredLM.check_model_args(f"pretrained={folder}"),
                  lambda: judge_model_class("hf-metered", f"pretrained={folder}"),
                  lambda: check_command_line(["--model", "hf", "--model_args",
                                              f"pretrained={folder}", "--tasks", "x"])):
        with pytest.raises((ConfigError, PreflightError)) as caught:
            check()
        assert f"pretrained='{folder}': " in str(caught.value) and problem in str(caught.value)
        assert str(caught.value).endswith(
            "; pass a model folder holding config.json, the weights and the tokenizer (a "
            "download or conversion that has finished)")
    shutil.rmtree(folder, ignore_errors=True)
    folder.unlink(missing_ok=True)
    shutil.copytree(embedded_checkpoint, folder)  # a finished conversion: the fix
    HFMeteredLM.check_model_args(f"pretrained={folder}")


def test_energy_nvml_on_the_cpu_offers_only_what_can_measure_here():
    """trial 16: the fix offered energy=rapl, which this machine cannot read (refused next)."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM
    from lm_eval_ext.backends.model_args import rapl_problem

    with pytest.raises(ConfigError) as caught:
        HFMeteredLM.check_model_args("energy=nvml,device=cpu")
    offered = "use energy=auto or energy=rapl on the CPU" if rapl_problem() is None else \
        "use energy=auto on the CPU"
    assert str(caught.value).endswith(offered)
    for fix in ("energy=auto", *(["energy=rapl"] if rapl_problem() is None else [])):
        HFMeteredLM.check_model_args(f"{fix},device=cpu")  # each offered fix, followed



def test_a_scored_text_longer_than_the_given_max_length_is_refused_at_its_exact_bound():
    """Trial 18 (N18_152): max_length=32 on a log-likelihood task cut every context from 88
    tokens to 24 with only lm-eval's per-request warnings, and the items were scored as if
    whole. lm-eval keeps the last max_length + 1 tokens of a context and its answer
    (``_loglikelihood_tokens``): a pair of exactly that many passes, one more is refused."""
    from lm_eval_ext.backends.hf.context_room import check_room_for_scoring

    pairs = [("a", [1] * 30, [2] * 3), ("b", [1] * 10, [2])]  # 33 and 11 tokens
    check_room_for_scoring(None, 8, pairs)  # the model's own length: lm-eval's business
    check_room_for_scoring(32, 32, pairs)
    with pytest.raises(ConfigError) as refused:
        check_room_for_scoring(31, 31, pairs)
    assert str(refused.value) == (
        "--model_args max_length=31 cuts 1 of 2 scored texts (lm-eval keeps the last "
        "max_length + 1 tokens of a context and its answer): give max_length=32 or more (the "
        "longest of this run's 2 contexts and answers), or leave max_length out (the model's "
        "own)")
    with pytest.raises(ConfigError, match="cuts 2 of 2 scored texts"):
        check_room_for_scoring(9, 9, pairs)


@pytest.mark.slow
def test_the_advised_max_length_scores_like_the_models_own(embedded_lm):
    """The advice of the refusal above, followed on the embedded model: the advised length
    gives the log-likelihoods of the model's own length exactly (nothing cut), and one token
    less is refused before any request runs."""
    from lm_eval.api.instance import Instance

    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    requests = [Instance("loglikelihood", {}, ("Question: " + "why " * 20 + "\nAnswer:", a),
                         i, ("t", i, 1)) for i, a in enumerate([" yes", " no, never"])]
    short = HFMeteredLM(device="cpu", idle_seconds=0, batch_size=4, max_length=16)
    with pytest.raises(ConfigError) as refused:
        short.loglikelihood(requests, disable_tqdm=True)
    need = int(re.search(r"give max_length=(\d+)", str(refused.value)).group(1))
    assert need == max(len(short.tok_encode(r.args[0] + r.args[1])) for r in requests) - 1
    with pytest.raises(ConfigError, match="cuts 1 of 2 scored texts"):
        HFMeteredLM(device="cpu", idle_seconds=0, batch_size=4,
                    max_length=need - 1).loglikelihood(requests, disable_tqdm=True)
    advised = HFMeteredLM(device="cpu", idle_seconds=0, batch_size=4, max_length=need)
    assert advised.loglikelihood(requests, disable_tqdm=True) == \
        embedded_lm.loglikelihood(requests, disable_tqdm=True)
