"""Bad lm-eval arguments stop before any model loads, in one line."""

from __future__ import annotations

import os
import re

import pytest
from helpers import run_cli

from lm_eval_ext.campaign.spec import build_spec
from lm_eval_ext.command_preflight import (
    PreflightError,
    check_command_line,
    check_limit,
    check_num_fewshot,
    check_output_path,
    unknown_task_message,
)
from lm_eval_ext.errors import ConfigError


@pytest.mark.parametrize("value", ["0", "-5", "0.0", "nan", "inf", "ten", "2.5"])
def test_limits_that_lm_eval_would_fail_on_or_misread_are_refused(value):
    with pytest.raises(PreflightError, match=f"--limit {value}"):
        check_limit(value)


@pytest.mark.parametrize("value", ["8", "1", "0.25", "12.0"])  # "1.0" is 1 item: refused
def test_counts_and_fractions_pass(value):
    check_limit(value)


def test_negative_few_shot_is_refused():
    with pytest.raises(PreflightError, match="--num_fewshot -1: give 0 or more"):
        check_num_fewshot("-1")
    check_num_fewshot("0")


def test_output_path_that_is_a_file_or_under_a_file_is_refused(tmp_path):
    existing = tmp_path / "results.txt"
    existing.write_text("x")
    with pytest.raises(PreflightError, match="is an existing file; lm-eval writes a folder"):
        check_output_path(str(existing))
    with pytest.raises(PreflightError, match="is a file, so no folder can be made under it"):
        check_output_path(str(existing / "out"))
    check_output_path(str(tmp_path / "new" / "out"))  # created by lm-eval
    assert not (tmp_path / "new").exists()  # tested, then removed: a failed run leaves none
    check_output_path(str(existing.with_suffix(".json")))  # lm-eval writes results beside it


def test_cuda_on_a_machine_without_it_is_refused():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(PreflightError, match="--device cuda: no CUDA device is visible here"):
        check_command_line(["--model", "hf-metered", "--device", "cuda"])


def test_cuda_in_model_args_on_a_machine_without_it_is_one_step_advice():
    """`--model_args device=cuda` was told "pass it once, as --device cuda", and that then
    "no CUDA device is visible here; use --device cpu": two steps to the one that runs."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", "hf-metered", "--model_args", "idle_seconds=0,device=cuda"])
    assert str(caught.value) == (
        "--model_args device=cuda: no CUDA device is visible here (torch.cuda.is_available() is "
        "False); use --device cpu in place of --model_args device=cuda")
    check_command_line(["--tasks", "bbq_subset_25pct", "--model", "hf-metered", "--model_args",
                        "idle_seconds=0", "--device", "cpu"])  # the advice, followed


def test_the_closest_task_name_is_suggested():
    message = unknown_task_message("bbq_subset_25pc, nosuchthing", ["bbq_subset_25pct", "arc"])
    assert message.startswith("unknown task(s) bbq_subset_25pc (did you mean bbq_subset_25pct?)"
                              ", nosuchthing;")


@pytest.mark.parametrize("limit", [0, -5])
def test_a_campaign_file_with_a_bad_limit_is_refused_when_read(limit):
    raw = {"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct_loglik"],
           "lm_eval": {"limit": limit}, "conditions": {"fp32": {}}}
    with pytest.raises(ConfigError, match=f"lm_eval: limit: {limit}: give a positive number"):
        build_spec(raw)


@pytest.mark.slow
@pytest.mark.parametrize("command", [["lm_eval"], ["lm-eval-ext", "run"]])
def test_bad_arguments_stop_before_the_model_loads(command, tmp_path):
    existing = tmp_path / "file.txt"
    existing.write_text("x")
    cases = {("--limit", "0"): "--limit 0: give a positive number",
             ("--num_fewshot", "-1"): "--num_fewshot -1: give 0 or more",
             ("--output_path", str(existing)): "is an existing file",
             ("--device", "cuda", "--output_path", str(tmp_path / "made" / "out")):
                 "no CUDA device is visible here"}
    for extra, message in cases.items():
        proc = run_cli([*command, "--model", "hf-metered", "--tasks", "bbq_subset_25pct",
                        *extra], timeout=120)
        assert proc.returncode == 2, (extra, proc.stderr[-1500:])
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-1500:]
        assert "Loading" not in proc.stderr  # no model was loaded
    assert not (tmp_path / "made").exists()  # a refused run left an empty folder (trial 2)


@pytest.mark.slow
def test_an_unknown_task_is_one_line_with_the_closest_name():
    proc = run_cli(["lm-eval-ext", "run", "--model", "hf-metered", "--tasks", "bbq_subset_25pc",
                    "--limit", "2"], timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert "unknown task(s) bbq_subset_25pc (did you mean bbq_subset_25pct" in proc.stderr


def test_an_invalid_batch_size_in_model_args_is_the_error_not_the_duplicate():
    """batch_size=0 in --model_args said "pass it once, as --batch_size 0"."""
    from lm_eval_ext.backends.model_args import merge_model_args

    with pytest.raises(ConfigError, match="batch_size='0' is not valid; use a positive integer"):
        merge_model_args("hf-metered", {"batch_size": "0"}, {"batch_size": 1})
    with pytest.raises(ConfigError, match="pass it once, as --batch_size 4"):
        merge_model_args("hf-metered", {"batch_size": "4"}, {"batch_size": "1"})  # typed 1
    # lm-eval's default (the int 1) is no clash: --model_args' value stands
    assert merge_model_args("hf-metered", {"batch_size": "4"}, {"batch_size": 1}) == {
        "batch_size": "4"}


def test_sequential_names_the_batch_flag_it_blames(tmp_path):
    """`sequential --reference-batch 0` blamed --reference-args."""
    from lm_eval_ext.campaign.sequential_evaluation import Arm, run_sequential

    with pytest.raises(ConfigError, match=r"sequential: --reference-batch: .*batch_size='0'"):
        run_sequential(tmp_path / "seq", Arm("precision=fp32", "0"), Arm("precision=bf16", "1"),
                       looks=["12p5pct"])
    assert not (tmp_path / "seq").exists()


@pytest.mark.parametrize(("settings", "message"), [
    ({"metric": "acc"}, "sequential: --metric 'acc'; choose one of accuracy, bias_s_dis, "
                        "bias_s_amb"),
    ({"path": "mc"}, "sequential: --path must be loglik or generative"),
])
def test_sequential_settings_the_command_line_cannot_give_are_named(tmp_path, settings,
                                                                      message):
    """The library's own checks (the command line offers only the valid choices)."""
    from lm_eval_ext.campaign.sequential_evaluation import Arm, run_sequential

    with pytest.raises(ConfigError) as caught:
        run_sequential(tmp_path / "seq", Arm("precision=fp32"), Arm("precision=bf16"),
                       looks=["12p5pct"], **settings)
    assert str(caught.value) == message and not (tmp_path / "seq").exists()


def test_sequential_keeps_another_pre_registration(tmp_path):
    from lm_eval_ext.campaign.sequential_evaluation import Arm, run_sequential

    card = tmp_path / "seq" / "preregistration.json"
    card.parent.mkdir()
    card.write_text('{"margin_pp": 1.0}\n')
    with pytest.raises(ConfigError) as caught:
        run_sequential(tmp_path / "seq", Arm("precision=fp32"), Arm("precision=bf16"),
                       looks=["12p5pct"])
    assert str(caught.value).startswith(f"{card} holds another pre-registration (")
    # trial 17 (N17_191): the line said not what differs (a look file's content, here)
    assert "arms.reference.batch_size: '<absent>' -> '1'" in str(caught.value)
    assert str(caught.value).endswith("; use a new --out (a look file's changed content counts "
                                      "too)")
    assert card.read_text() == '{"margin_pp": 1.0}\n'


@pytest.mark.parametrize(("argv", "message"), [
    (["--limit", "3", "--samples", '{"t": [0]}'], "--limit and --samples exclude each other"),
    (["--batch_size", "0"], "--batch_size 0: give a positive whole number, auto or auto:N"),
    (["--batch_size", "auto:0"], "--batch_size auto:0: give a positive whole number"),
    (["--gen_kwargs", "max_gen_toks=-1"], "max_gen_toks must be a positive whole number"),
    (["--gen_kwargs", "temperature=-0.5,do_sample=true"], "temperature must be a number >= 0"),
    (["--gen_kwargs", "top_p=1.5"], "top_p must be a number in (0, 1]"),
    # trial 14: -0.0 and 1.0 were told "give 0 or more", which they are
    (["--num_fewshot", "1.0"], "--num_fewshot 1.0: give 0 or more few-shot examples, as a whole "
                               "number written without a decimal point or a sign (e.g. 0 or 5)"),
    (["--num_fewshot", "-0.0"], "--num_fewshot -0.0: give 0 or more few-shot examples, as a whole"),
])
def test_more_arguments_that_would_fail_or_mislead_after_loading(argv, message):
    """More bad arguments: --limit with --samples was a traceback after lm-eval's start;
    --gen_kwargs max_gen_toks=-1 ran all 500 items and wrote results."""
    with pytest.raises(PreflightError, match=re.escape(message)):
        check_command_line(["--model", "hf-metered", "--tasks", "t", *argv])
    check_command_line(["--batch_size", "auto:4", "--gen_kwargs", "max_gen_toks=8,temperature=0"])


def test_a_campaign_file_with_bad_gen_kwargs_is_refused_when_read():
    raw = {"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct"],
           "lm_eval": {"gen_kwargs": {"max_gen_toks": 0}}, "conditions": {"a": {}}}
    with pytest.raises(ConfigError, match="lm_eval: gen_kwargs: max_gen_toks=0"):
        build_spec(raw)


@pytest.mark.parametrize(("model", "message"), [
    ("hf-metred", "--model 'hf-metred' is not an lm-eval model; did you mean hf-metered or "
                  "vllm-metered or hf-multimodal-metered?"),
    ("zzz", "--model 'zzz' is not an lm-eval model; did you mean hf-metered?"),
])
def test_a_misspelt_model_is_one_line_before_anything_loads(model, message, embedded_checkpoint):
    """`--model hf-metred` ended in lm-eval's registry traceback (tasks had did-you-mean)."""
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", model, "--tasks", "bbq_subset_25pct_loglik"])
    assert str(caught.value) == message
    check_command_line(["--model", "hf", "--model_args", f"pretrained={embedded_checkpoint}",
                        "--tasks", "bbq_subset_25pct_loglik"])  # lm-eval's own


def test_our_model_names_pass_before_anything_registered_them():
    """With the start-up hook off, `lm-eval-ext run --model hf-metered` was refused as "not an
    lm-eval model; did you mean hf-metered?" (the check ran before run registered our models)."""
    import subprocess
    import sys

    code = ("from lm_eval.api.registry import model_registry\n"
            "from lm_eval_ext.command_preflight import check_model_name\n"
            "for name in ('hf-metered', 'vllm-metered', 'hf-multimodal-metered'):\n"
            "    check_model_name(name)\n"
            "print('hf-metered' in model_registry)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "LM_EVAL_EXT_DISABLE": "1"})
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.strip() == "False"  # the hook really was off, and the check wrote nothing


def test_log_samples_without_an_output_path_is_one_line():
    """lm-eval's own ValueError reached the user as a traceback."""
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct_loglik",
                            "--log_samples"])
    assert str(caught.value) == ("--log_samples and --predict_only need --output_path (the "
                                 "folder for the samples), e.g. --output_path results")


def test_a_loglik_name_of_a_generative_only_task_points_to_the_task():
    """`xstest_ext_loglik` was told "did you mean toxigen_ext_loglik?" (another benchmark);
    a grid's `benchmarks: [bbq]` with `scoring_path: [loglik]` was told "bbq_loglik (did you
    mean bbq?)", which the grid had been given (trial 7)."""
    from lm_eval_ext.command_preflight import unknown_task_message
    from lm_eval_ext.plugin.task_folders import our_task_names

    message = unknown_task_message("xstest_ext_loglik", list(our_task_names()))
    assert message.startswith("unknown task(s) xstest_ext_loglik (xstest_ext has no "
                              "log-likelihood form: run xstest_ext on the generative path, or a "
                              "task with both, e.g. bbq_subset_25pct)")
    assert "bbq_subset_25pct_loglik" in our_task_names()  # the example has both


@pytest.mark.parametrize("model_args", [["pretrained=embedded"], ['{"pretrained": "embedded"}'],
                                        ["dtype=float32", "pretrained=embedded"]])
def test_our_model_names_given_to_lm_evals_hf_name_the_folder(model_args, embedded_checkpoint):
    """`--model hf --model_args pretrained=embedded` ended in a transformers OSError traceback."""
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", "hf", "--model_args", *model_args, "--tasks", "x"])
    assert str(caught.value) == (
        "--model hf: pretrained=embedded is hf-metered's name for a packaged model; use --model "
        f"hf-metered, or give hf the folder: pretrained={embedded_checkpoint} (`lm-eval-ext "
        "model prepare --model embedded` writes it)")
    check_command_line(["--tasks", "bbq_subset_25pct", "--model", "hf", "--model_args",
                        f"pretrained={embedded_checkpoint}"])


def test_an_offline_hub_id_lm_evals_hf_cannot_load_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", "hf", "--model_args", "pretrained=org/not-cached"])
    assert str(caught.value) == (
        "--model hf: pretrained='org/not-cached' is no model folder or model in the Hugging Face "
        "cache, and the hub is offline (HF_HUB_OFFLINE); pass a model folder")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online, lm-eval may download it
    check_command_line(["--tasks", "bbq_subset_25pct", "--model", "hf", "--model_args",
                        "pretrained=org/not-cached"])


def test_a_local_path_that_does_not_exist_is_named(tmp_path, embedded_checkpoint):
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", "hf", "--model_args", f"pretrained={tmp_path}/nope"])
    assert str(caught.value) == (
        f"--model hf: pretrained='{tmp_path}/nope': the local path {tmp_path}/nope does not "
        "exist; pass an existing model folder or a hub id")
    check_command_line(["--tasks", "bbq_subset_25pct", "--model", "hf", "--model_args",
                        f"pretrained={embedded_checkpoint}"])  # followed (a model folder)


def test_a_chat_template_for_a_base_model_is_refused_before_the_load():
    """Trial 17 (N17_104): --apply_chat_template with the packaged Gemma (its template removed
    at conversion) gave transformers' 58-line "Cannot use chat template functions" traceback
    after the load; the same for stock hf given the converted folder."""
    from lm_eval_ext.backends.packaged_models import GEMMA3_270M

    folder = GEMMA3_270M.checkpoint_dir()
    for model, pretrained in (("hf-metered", "gemma3-270m"), ("hf", str(folder))):
        with pytest.raises(PreflightError) as refused:
            check_command_line(["--model", model, "--model_args", f"pretrained={pretrained}",
                                "--apply_chat_template", "--tasks", "bbq_subset_12p5pct_loglik"])
        assert str(refused.value) == (
            f"--apply_chat_template: pretrained={pretrained} has no chat template (a base model: "
            "its tokenizer defines none), so lm-eval cannot apply one; leave "
            "--apply_chat_template out (its prompts then go as they are)")
        check_command_line(["--model", model, "--model_args", f"pretrained={pretrained}",
                            "--tasks", "bbq_subset_12p5pct_loglik"])  # followed
    # the embedded model has one (no pretrained: hf-metered's default)
    check_command_line(["--model", "hf-metered", "--apply_chat_template", "--tasks",
                        "bbq_subset_12p5pct_loglik"])


def test_a_config_files_batch_size_goes_in_as_the_flag_unless_the_command_line_gives_one(
        tmp_path):
    """Trial 19 (N19_86): lm-eval hands a file's `batch_size: 1` over as its default; as the
    flag it is typed (lm-eval's parser, the same value). A command line's own wins, as in
    lm-eval, and is not given twice."""
    from lm_eval_ext.command_preflight import config_batch_size_typed

    config = tmp_path / "c.yaml"
    config.write_text("batch_size: 1\n")
    argv = ["--config", str(config), "--tasks", "t"]
    assert config_batch_size_typed(argv) == [*argv, "--batch_size=1"]
    for given in (["--batch_size", "4"], ["--batch_size=4"], ["-b", "4"], ["-b4"]):
        assert config_batch_size_typed([*argv, *given]) == [*argv, *given]
    config.write_text("limit: 2\n")
    assert config_batch_size_typed(argv) == argv
    assert config_batch_size_typed(["--tasks", "t"]) == ["--tasks", "t"]


def test_a_config_option_the_command_line_replaces_is_one_note_each(tmp_path):
    """Trial 19 (N19_129): lm-eval drops the file's value for the command line's silently."""
    from lm_eval_ext.command_preflight import config_overrides

    config = tmp_path / "c.yaml"
    config.write_text("tasks: [a, b]\nlimit: 2\nnum_fewshot: 0\nlog_samples: true\n")
    argv = ["--config", str(config), "--tasks", "a,c", "--limit", "3", "--num_fewshot", "0"]
    assert config_overrides(argv) == [
        "--tasks a,c on the command line replaces the --config file's tasks: a,b (lm-eval "
        "takes the command line's)",
        "--limit 3 on the command line replaces the --config file's limit: 2 (lm-eval takes "
        "the command line's)"]  # the same value, and a switch, say nothing
    assert config_overrides(["--config", str(config)]) == []
    assert config_overrides(["--tasks", "a"]) == []
