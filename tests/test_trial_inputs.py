"""Input the new-user trials (3 to 7) found ending in a traceback, a silent result or wrong
advice.

Each case is one line naming what was wrong and the fix (and the fix, followed, works); the
cases that need a real lm-eval process are in test_console_autoload.py (marked slow).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from lm_eval_ext.campaign.preflight import check_cells
from lm_eval_ext.campaign.sequential_evaluation import plan_looks
from lm_eval_ext.campaign.spec import build_spec
from lm_eval_ext.campaign.yaml_file import read_yaml
from lm_eval_ext.cli import main as cli_main
from lm_eval_ext.errors import INTERRUPTED, ConfigError
from lm_eval_ext.tasks.bbq.registered import check_task_name


def _refused(argv: list[str], capsys) -> str:
    code = cli_main.main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    return lines[0]


def test_a_task_name_over_the_file_name_limit_is_an_unknown_task():
    """`--tasks xxx...` (300 characters) was OSError: File name too long."""
    from lm_eval_ext.plugin.task_names import unknown_task_names

    long = "x" * 300
    assert unknown_task_names([long], []) == [long]


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    """Ctrl-C printed a 178-line KeyboardInterrupt traceback."""
    from lm_eval_ext.cli import mde

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(mde, "run", interrupted)
    assert cli_main.main(["mde", "--m", "5", "--rho-d", "0.1"]) == 130
    assert capsys.readouterr().err.strip() == (
        "lm-eval-ext mde: interrupted (Ctrl-C): nothing was saved half-written; run the command "
        "again")  # trial 18 (N18_90): "(a campaign resumes ...)" in a command that is none


@pytest.mark.parametrize(("argv", "line"), [
    (["campaign", "c.yaml"], "lm-eval-ext campaign: interrupted (Ctrl-C): nothing was saved "
     "half-written; run the command again (it resumes from its finished cells)"),
    (["sequential", "--out", "s"], "lm-eval-ext sequential: interrupted (Ctrl-C): nothing was "
     "saved half-written; run the command again (it resumes from its finished looks)")])
def test_a_multi_step_commands_ctrl_c_says_how_its_rerun_resumes(argv, line, monkeypatch,
                                                                 capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "build_parser", interrupted)
    assert cli_main.main(argv) == 130
    assert capsys.readouterr().err.strip() == line


def test_a_ctrl_c_a_library_swallowed_still_ends_the_command_as_interrupted(monkeypatch,
                                                                          capsys):
    """trial 13: analyze (0.4 s) and run (0.01 s, in CPython's import-lock callback) went on past
    a Ctrl-C whose repeat was taken for the same one, rc 0 without a word."""
    import signal
    import time

    from lm_eval_ext.cli import mde
    from lm_eval_ext.errors import interrupt_once

    def swallowing(args):
        for _ in range(2):  # timeout's SIGINT to the command, then to its process group
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
            except KeyboardInterrupt:
                pass  # a library's bare except
        return 0

    monkeypatch.setattr(mde, "run", swallowing)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupt_once()
        assert cli_main.main(["mde", "--m", "5", "--rho-d", "0.1"]) == 130
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert capsys.readouterr().err.strip().startswith("lm-eval-ext mde: interrupted (Ctrl-C)")
    monkeypatch.setattr(mde, "run", lambda args: 0)
    assert cli_main.main(["mde", "--m", "5", "--rho-d", "0.1"]) == 0  # said once, not again


def test_the_same_look_twice_is_refused_before_any_run():
    """`sequential --looks A,A` was 'unexpected ValueError: looks must increase' (a bug)."""
    with pytest.raises(ConfigError) as error:
        plan_looks(["25pct", "25pct", "instrument"])
    assert str(error.value) == (
        "sequential: look 25pct adds no natural units (BBQ contexts) to the look before (e.g. "
        "the same set twice); give each look once, each with more units than the one before")
    _, fractions = plan_looks(["25pct", "instrument"])  # followed
    assert fractions[-1] == 1.0 and 0 < fractions[0] < 1


@pytest.mark.parametrize(("device", "message"), [
    ("mps", "--device mps: there is no mps device here (lm-eval would fail on it, or run on "
            "the CPU and record mps); use --device cpu"),
    ("xpu", "--device xpu: there is no xpu device here (lm-eval would fail on it, or run on "
            "the CPU and record xpu); use --device cpu"),
])
def test_judge_checks_its_device_as_a_run_does(device, message, capsys, tmp_path):
    """`judge --device mps` was 'unexpected RuntimeError'; `--device xpu` ran on the CPU."""
    line = _refused(["judge", str(tmp_path), "--device", device], capsys)
    assert line == f"lm-eval-ext: error: {message}"


def test_analyze_takes_every_runs_option_and_one_reference():
    """A second --runs dropped the first one's runs; a second --reference replaced the first."""
    parser = cli_main.build_parser()
    args = parser.parse_args(["analyze", "--reference", "r", "--runs", "a", "--runs", "b",
                              "--out", "o"])
    assert args.runs == ["a", "b"]
    with pytest.raises(SystemExit):
        parser.parse_args(["analyze", "--reference", "r", "--reference", "s", "--runs", "a",
                           "--out", "o"])


@pytest.mark.parametrize("argv", [
    ["analyze", "--reference", "r", "--runs", "a", "--out", ""],
    ["compare-harness", "lm_eval=a", "lm_eval:b=b", "--out", ""],
    ["export-upstream", "xstest_ext", "--out", ""],
])
def test_an_empty_out_is_refused_not_the_current_folder(argv, capsys, tmp_path, monkeypatch):
    """`--out ''` wrote the analysis (or the export) into the current folder, rc 0."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main(argv)
    assert exit_info.value.code == 2
    assert "argument --out: the path is empty; give a folder or file name (e.g. out)" in \
        capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_register_names_are_checked_even_when_empty_or_a_loglik_name(capsys, tmp_path):
    """`--register ''` registered nothing, rc 0; `--register bbq_foo_loglik` made a generative
    task of that name and bbq_foo_loglik_loglik."""
    manifest = tmp_path / "m.csv"
    manifest.write_text("category,example_id\nAge,1\n")
    line = _refused(["data", "fingerprint", str(manifest), "--register", ""], capsys)
    assert line.startswith("lm-eval-ext: error: task name '' is invalid: use 'bbq_' and then")
    with pytest.raises(ConfigError) as error:
        check_task_name("bbq_foo_loglik")
    assert str(error.value) == (
        "task name 'bbq_foo_loglik' ends in _loglik, which names the log-likelihood task "
        "registered beside NAME; give 'bbq_foo' (it registers bbq_foo and bbq_foo_loglik)")
    check_task_name("bbq_foo")  # followed


@pytest.mark.parametrize(("options", "message"), [
    ({"device": "xpu"}, "cell embedded__bad__bbq_subset_25pct_loglik: device: xpu cannot run "
                        "here: device: xpu: there is no xpu device here"),
    ({"num_fewshot": 99}, "cell embedded__bad__bbq_subset_25pct_loglik: num_fewshot: 99: "
                          "bbq_subset_25pct_loglik has 22 few-shot examples in its pool"),
])
def test_a_dry_run_refuses_cells_the_real_run_would(options, message):
    """A campaign condition with `device: xpu` or `num_fewshot: 99` passed --dry-run."""
    raw = {"models": {"embedded": ""}, "tasks": ["bbq_subset_25pct_loglik"],
           "conditions": {"bad": options}}
    with pytest.raises(ConfigError) as error:
        check_cells(build_spec(raw).cells)
    assert str(error.value).startswith(message)
    # a device another machine has passes a dry run (it may plan for a GPU machine)
    check_cells(build_spec({**raw, "conditions": {"bad": {"device": "cuda:0"}}}).cells)


def test_a_campaign_file_that_is_a_folder_is_named_as_one(tmp_path):
    """`campaign FOLDER --dry-run` said 'campaign file FOLDER does not exist'."""
    (tmp_path / "c.yaml").write_text("models: {}\n")
    with pytest.raises(ConfigError) as error:
        read_yaml(tmp_path)
    assert str(error.value) == (f"campaign file {tmp_path} is a folder; pass the YAML file in "
                                "it (it holds c.yaml)")
    assert read_yaml(tmp_path / "c.yaml") == {"models": {}}  # followed


def test_an_empty_model_arg_name_is_said():
    """`--model_args '='` was 'unknown model arg(s) ;' (the empty name invisible)."""
    from lm_eval_ext.backends.model_args import check_unknown_args

    with pytest.raises(ConfigError) as error:
        check_unknown_args("hf-metered", object, [""])
    assert "a model arg has an empty name (e.g. '=' or ',=x'); write KEY=VALUE pairs" in \
        str(error.value)


def test_a_damaged_cached_model_is_converted_again(tmp_path, capsys, monkeypatch):
    """A cut model.safetensors in the cache was a SafetensorError traceback, and `model
    prepare` kept it; one flipped byte ran silently (trials 4, 5); a damaged record or a
    missing file of the checkpoint (config.json, tokenizer.json) was a traceback (trial 5)."""
    import json
    import os

    from lm_eval_ext.backends import embedded_model
    from lm_eval_ext.data.store import sha256_of

    target = tmp_path / "model"
    converted = []

    def convert(folder):  # what convert_gguf writes: the weights and their record
        folder.mkdir(exist_ok=True)
        weights = folder / "model.safetensors"
        weights.write_bytes(bytes(range(256)) * 4)
        (folder / embedded_model.MARKER).write_text(json.dumps(
            {"files": embedded_model.files_record(folder)}))
        converted.append(folder)

    def flip_a_byte(keep_time: bool) -> None:  # same size: only the SHA-256 tells
        before = weights.stat()
        data = bytearray(weights.read_bytes())
        data[500] ^= 0xFF
        weights.write_bytes(bytes(data))
        if keep_time:  # a write that also puts the modification time back
            os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))

    embedded_model.converted_once(target, convert)
    embedded_model.converted_once(target, convert)
    assert len(converted) == 1  # converted once
    weights = target / "model.safetensors"
    flipped = (f"lm-eval-ext: note: the cached model {target} is damaged (model.safetensors's "
               "SHA-256 differs from the one recorded when it was converted); converting it again")
    flip_a_byte(keep_time=False)
    embedded_model.converted_once(target, convert)  # as a run does: written since, so hashed
    assert len(converted) == 2 and weights.read_bytes() == bytes(range(256)) * 4
    assert capsys.readouterr().err.strip() == flipped
    flip_a_byte(keep_time=True)  # `touch -r`: the change time moves all the same (trial 6)
    embedded_model.converted_once(target, convert)
    assert len(converted) == 3 and weights.read_bytes() == bytes(range(256)) * 4
    assert capsys.readouterr().err.strip() == flipped
    hashed = []
    monkeypatch.setattr(embedded_model, "sha256_of",
                        lambda path: hashed.append(path) or sha256_of(path))
    embedded_model.converted_once(target, convert)
    assert hashed == []  # unchanged since converted: a run hashes nothing
    os.utime(weights, ns=(0, 0))  # touched, content as converted: hashed, and kept
    embedded_model.converted_once(target, convert)
    assert len(converted) == 3 and capsys.readouterr().err == "" and len(hashed) == 1
    embedded_model.converted_once(target, convert, verify=True)  # records the new time
    embedded_model.converted_once(target, convert)
    assert len(converted) == 3 and len(hashed) == 2  # the run after it hashes nothing
    (target / "config.json").write_text("{}")  # a file the record does not list: not damage
    embedded_model.converted_once(target, convert, verify=True)
    assert len(converted) == 3
    marker = target / embedded_model.MARKER
    marker.write_text(json.dumps({"files": {"model.safetensors": {"bytes": "1024"}}}))
    embedded_model.converted_once(target, convert)  # a record of the wrong shape is damage
    assert len(converted) == 4
    assert "(its record lm_eval_ext_model.json cannot be read)" in capsys.readouterr().err
    weights.write_bytes(b"x" * 1000)
    embedded_model.converted_once(target, convert)
    assert len(converted) == 5
    assert "(model.safetensors is 1000 bytes, 1024 when converted)" in capsys.readouterr().err
    (target / embedded_model.MARKER).write_text("{not json")  # its record damaged (trial 5)
    embedded_model.converted_once(target, convert)
    assert len(converted) == 6
    assert "(its record lm_eval_ext_model.json cannot be read)" in capsys.readouterr().err
    weights.unlink()
    embedded_model.converted_once(target, convert)
    assert len(converted) == 7 and weights.is_file()


@pytest.mark.parametrize(("text", "message"), [
    ("model: hf-metered\ntasks: [bbq_subset_25pct_loglik\n",
     "is not valid YAML at line 3, column 1: expected ',' or ']', but got '<stream end>'"),
    ("- a\n- b\n", "holds a list, not a mapping of lm-eval's options"),
    ("", "holds nothing, not a mapping of lm-eval's options"),
])
def test_a_damaged_config_file_is_one_line(text, message, tmp_path):
    """A damaged --config was a yaml ParserError or TypeError traceback (trial 4)."""
    from lm_eval_ext.command_preflight import PreflightError, check_command_line

    config = tmp_path / "run.yaml"
    config.write_text(text)
    with pytest.raises(PreflightError) as error:
        check_command_line(["--config", str(config)])
    assert str(error.value).startswith(f"--config {config} {message}")
    with pytest.raises(PreflightError, match=f"^--config {tmp_path} is a folder; give the path"):
        check_command_line(["--config", str(tmp_path)])


def test_a_dry_run_refuses_an_out_the_run_cannot_write_and_a_run_listed_twice():
    """`campaign --dry-run --out /proc/x` passed; so did `runs: [M1, M1]` (trial 4)."""
    from lm_eval_ext.campaign.store import CampaignFolder
    from lm_eval_ext.errors import LmEvalExtError

    raw = {"models": {"embedded": ""}, "tasks": ["bbq_subset_25pct_loglik"],
           "conditions": {"M0": {"batch_size": 1}, "M1": {"batch_size": 4}}}
    with pytest.raises(LmEvalExtError, match="^cannot write /proc/camp"):
        CampaignFolder("/proc/camp").check(build_spec(raw))
    with pytest.raises(ConfigError) as error:
        build_spec({**raw, "compare": {"b": {"reference": "M0", "runs": ["M1", "M1"]}}})
    assert str(error.value) == ("compare.b: M1 is listed twice in runs; list each condition "
                                "once (runs: [M1])")


def test_recommend_on_a_file_of_the_pilot_names_its_folder(tmp_path, capsys):
    """`recommend PILOT/items.csv` said the (existing) path was not found (trial 4)."""
    table = tmp_path / "items.csv"
    table.write_text("run\n")
    line = _refused(["recommend", str(table), "--claim", "accuracy=2"], capsys)
    assert line == (f"lm-eval-ext: error: recommend: {table} is a file; pass the folder that "
                    f"holds it ({tmp_path}), the folder `lm-eval-ext analyze --out` wrote for "
                    "the pilot")


def test_recommend_refuses_a_power_not_above_alpha_and_an_unwritable_out(tmp_path, capsys):
    """recommend took --power 0.01 (mde and sequential refuse it) and printed the whole card
    before refusing --out /proc/... (trial 4)."""
    line = _refused(["recommend", str(tmp_path), "--claim", "accuracy=2", "--power", "0.01"],
                    capsys)
    assert line == ("lm-eval-ext: error: recommend: --power 0.01 is not above --alpha 0.05: with "
                    "no effect at all the test already rejects alpha of the time, so no effect "
                    "size has that power; give a power above alpha (0.8 is usual)")
    assert cli_main.main(["recommend", str(tmp_path), "--claim", "accuracy=2", "--out",
                          "/proc/card"]) != 0
    captured = capsys.readouterr()
    assert captured.out == "" and "cannot write /proc/card" in captured.err


def test_version_is_printed(capsys):
    """`lm-eval-ext --version` was reported as a missing command (trial 4)."""
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        cli_main.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"lm-eval-ext {version('lm-eval-ext')}"


@pytest.mark.parametrize(("text", "message"), [
    ("modle: hf-metered\ntasks: bbq_subset_25pct\n",
     "'modle' is not an lm-eval option (did you mean model?); the options are those of "
     "`lm_eval run --help`, written without the dashes"),
    ("model: hf-metered\ntasks: 5\n",
     "tasks: 5 is not a task name or a list of them (e.g. tasks: [bbq_subset_25pct])"),
])
def test_a_config_files_options_are_checked_as_lm_eval_reads_them(text, message, tmp_path):
    """A misspelt key, `tasks: 5` or `{}` in --config were lm-eval tracebacks (trial 5)."""
    from lm_eval_ext.command_preflight import PreflightError, check_command_line

    config = tmp_path / "run.yaml"
    config.write_text(text)
    with pytest.raises(PreflightError) as error:
        check_command_line(["--config", str(config)])
    assert str(error.value) == f"--config {config}: {message}"
    config.write_text("{}\n")
    with pytest.raises(PreflightError) as error:
        check_command_line(["--config", str(config)])
    assert str(error.value) == (f"--tasks is missing (and --config {config} names none): name "
                                "the tasks to run (e.g. --tasks bbq_subset_25pct; `lm-eval ls "
                                "tasks` lists them)")
    config.write_text("model: hf-metered\ntasks: [bbq_subset_25pct]\n")
    check_command_line(["--config", str(config)])  # followed


def test_a_config_files_output_path_is_checked_before_the_run(tmp_path):
    """--config with `output_path: /proc/x` ran the evaluation and failed when saving (trial 5)."""
    from lm_eval_ext.command_preflight import PreflightError, check_command_line

    config = tmp_path / "run.yaml"
    config.write_text("model: hf-metered\ntasks: [bbq_subset_25pct]\noutput_path: /proc/x/out\n")
    with pytest.raises(PreflightError) as error:
        check_command_line(["--config", str(config)])
    assert str(error.value).startswith(f"--config {config}: --output_path: cannot write /proc/x/out")
    config.write_text(f"model: hf-metered\ntasks: [bbq_subset_25pct]\noutput_path: {tmp_path}\n")
    check_command_line(["--config", str(config)])  # followed


# "-1" parses, and numpy refuses it: test_preflight_lm_eval_options holds seeds to their ranges
SEEDS = ["42", "0,None,8,52", "1,2,3", " 7 ", "none", "-0", "1_000", "abc", "1,2", "1,2,3,4,5",
         "", "1,,3,4", "1.5", "0x10"]


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_is_refused_exactly_where_lm_evals_own_parser_refuses_it(seed):
    """`--seed abc` showed lm-eval's `invalid functools.partial(...)` repr (trials 4, 5)."""
    import lm_eval._cli.utils as lm_eval_cli_utils

    from lm_eval_ext.command_preflight import PreflightError, check_seed

    try:  # the reference: lm-eval's own type function for --seed (lm_eval/_cli/run.py)
        lm_eval_cli_utils._int_or_none_list_arg_type(3, 4, "0,1234,1234,1234", seed)
        lm_eval_accepts = True
    except ValueError:
        lm_eval_accepts = False
    if lm_eval_accepts:
        check_seed(seed)
        return
    with pytest.raises(PreflightError) as error:
        check_seed(seed)
    assert str(error.value) == (
        f"--seed {seed}: give one integer for all four seeds (e.g. --seed 42) or four "
        "integers or None, comma-separated (e.g. --seed 0,None,8,52)")


def test_the_samples_rule_counts_a_config_files_output_path(tmp_path):
    """--log_samples with --config naming output_path was refused as if no folder were given."""
    from lm_eval_ext.command_preflight import (
        SAMPLES_NEED_OUTPUT_PATH,
        PreflightError,
        check_arguments_lm_eval_parses,
    )

    config = tmp_path / "run.yaml"
    config.write_text(f"model: hf-metered\ntasks: [bbq_subset_25pct]\noutput_path: {tmp_path}\n")
    check_arguments_lm_eval_parses(["--config", str(config), "--log_samples"])
    config.write_text("model: hf-metered\ntasks: [bbq_subset_25pct]\nlog_samples: true\n")
    for argv, where in ((["--config", str(config)], f"--config {config}: "),
                        (["--tasks", "bbq_subset_25pct", "--predict_only"], "")):
        with pytest.raises(PreflightError) as error:
            check_arguments_lm_eval_parses(argv)
        assert str(error.value) == where + SAMPLES_NEED_OUTPUT_PATH
    check_arguments_lm_eval_parses(["--config", str(config), "--output_path", str(tmp_path)])


@pytest.mark.parametrize(("argv", "name"), [
    (["model", "prepare", "--model", "all"], "lm-eval-ext model prepare"),
    (["data", "verify", "bbq"], "lm-eval-ext data verify"),
    (["model", "--help"], "lm-eval-ext model"),
    (["campaign", "spec.yaml"], "lm-eval-ext campaign"),
    ([], "lm-eval-ext")])
def test_messages_name_the_sub_command(argv, name):
    """Ctrl-C in `model prepare` said 'lm-eval-ext model: interrupted' (trial 5)."""
    assert cli_main.command_name(argv) == name


SECOND_SIGINT = """
import os, signal, sys, time
from lm_eval_ext.errors import interrupt_once, say_interrupted
if sys.argv[1] == "once":
    interrupt_once("cmd")
try:  # a library that swallows the first Ctrl-C: a later one must still interrupt
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    pass
time.sleep(1.1)
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    os.kill(os.getpid(), signal.SIGINT)  # the second signal, while the line is being said
    time.sleep(0.2)
    raise SystemExit(say_interrupted("cmd"))
"""


def test_a_second_ctrl_c_while_the_first_is_said_is_ignored():
    """`timeout -s INT` signals the command and its group: the second SIGINT landed inside
    say_interrupted, two chained KeyboardInterrupt tracebacks (trial 6); a Ctrl-C a second
    later interrupts again (trial 7: one a library swallowed must not disarm Ctrl-C)."""
    import subprocess
    import sys

    def run(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", SECOND_SIGINT, mode], capture_output=True,
                              text=True, timeout=60)

    once = run("once")
    assert (once.returncode, once.stderr.strip()) == (130, f"cmd: {INTERRUPTED}")
    plain = run("plain")  # Python's own handler: the traceback the trial saw
    assert plain.returncode == -2 and "Traceback" in plain.stderr  # killed by SIGINT


SWALLOWING_EVERY_CTRL_C = """
import time
from lm_eval_ext.errors import interrupt_once
interrupt_once("cmd")
ready = False
end = time.monotonic() + 20
while time.monotonic() < end:  # a library that swallows every KeyboardInterrupt
    try:
        if not ready:  # said inside the try: a Ctrl-C may land while it is printed
            ready = True
            print("ready", flush=True)
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
print("ran on")
"""


def test_a_second_ctrl_c_stops_a_run_whose_library_swallowed_the_first():
    """The slow tier under load: two SIGINTs 0.2 s apart were both swallowed, and `lm_eval`
    ran its 600 requests on; a second Ctrl-C before the first was said stops at once."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", SWALLOWING_EVERY_CTRL_C],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    assert (proc.returncode, out, err.strip()) == (130, "", f"cmd: {INTERRUPTED}")


BLOCKED_BY_THE_PARENT = """
import time
from lm_eval_ext.errors import interrupt_once, say_interrupted
interrupt_once("cmd")
try:
    print("ready", flush=True)  # inside the try: a Ctrl-C may land while it is printed
    time.sleep(20)
    print("ran on")
except KeyboardInterrupt:
    raise SystemExit(say_interrupted("cmd"))
"""


def test_a_ctrl_c_the_parent_blocked_still_reaches_the_command():
    """The slow tier: `lm_eval` started from a test worker whose main thread had SIGINT
    blocked inherited the mask and ran its 600 requests past both Ctrl-Cs (a probe with the
    mask blocked reproduced it); the command unblocks SIGINT as it installs its handler."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_BY_THE_PARENT], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT]))
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err.strip()) == (130, "", f"cmd: {INTERRUPTED}")


EARLY_SIGINT = """
import os, signal, sys
when, program, package = sys.argv[1:4]
sys.argv[0] = "/usr/bin/" + program  # the command
import _lm_eval_ext_autoload as hook
hook._catch_early_interrupts(package)
from lm_eval_ext.errors import interrupt_once
if when == "late":
    interrupt_once()  # what the command puts in its place once it can say the line itself
os.kill(os.getpid(), signal.SIGINT)
import time; time.sleep(5)
"""


@pytest.mark.parametrize(("program", "package"), [("lm_eval", "lm_eval"),
                                                  ("lm-eval-ext", "lm_eval_ext")])
@pytest.mark.parametrize("when", ["early", "late"])
def test_ctrl_c_as_a_command_starts_is_one_line(program, package, when):
    """Ctrl-C in the first 0.25 s of the stock lm_eval was a traceback from `import lm_eval`,
    in the first 20 ms of lm-eval-ext one from its console script's import (trials 7, 8); the
    start-up hook's early handler says one line, and gives way to interrupt_once."""
    import sys

    proc = subprocess.run([sys.executable, "-c", EARLY_SIGINT, when, program, package],
                          capture_output=True, text=True, timeout=60)
    if when == "early":
        assert (proc.returncode, proc.stderr.strip()) == (130, (
            f"{program}: interrupted (Ctrl-C) while starting: nothing ran; run the command "
            "again"))
    else:  # interrupt_once's KeyboardInterrupt, uncaught in this bare script
        assert proc.returncode == -2 and proc.stderr.strip().endswith("KeyboardInterrupt")


def _shell(script: str, tmp_path, **env) -> subprocess.CompletedProcess:
    from helpers import console_script

    return subprocess.run(["bash", "-c", script.format(cli=console_script("lm-eval-ext"))],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, **env})


def test_a_closed_output_or_a_deleted_folder_is_one_line_and_an_odd_encoding_escapes(tmp_path):
    """`mde ... >&-` printed nothing and exited 0; a deleted current folder was 'a folder on the
    path does not exist ... pass another path'; PYTHONIOENCODING=ascii and --out anä wrote the
    report, then an UnicodeEncodeError bug line (trial 7)."""
    closed = _shell("{cli} mde --m 500 --rho-d 0.1 >&-", tmp_path)
    assert (closed.returncode, closed.stderr.strip()) == (2, (
        "lm-eval-ext mde: error: standard output is closed (>&-): the command's results would "
        "be lost; redirect it instead (> FILE, or > /dev/null to discard them)"))
    assert _shell("{cli} mde --m 500 --rho-d 0.1 > /dev/null", tmp_path).returncode == 0
    gone = _shell("mkdir gone && cd gone && rmdir ../gone && {cli} mde --m 500 --rho-d 0.1",
                  tmp_path)
    assert (gone.returncode, gone.stderr.strip()) == (2, (
        "lm-eval-ext mde: error: the current folder no longer exists (it was deleted or moved); "
        "cd to an existing folder and run the command again"))
    ascii_out = _shell("{cli} mde --m 500 --rho-d 0.1 --card cä.md", tmp_path,
                       PYTHONIOENCODING="ascii")
    assert ascii_out.returncode == 0 and (tmp_path / "cä.md").is_file()
    assert ascii_out.stdout.splitlines()[-1] == "wrote c\\xe4.md"


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "hf", "--tasks", "bbq_subset_25pct"],
     "--model hf needs --model_args pretrained=... (a model folder or hub id); or use --model "
     "hf-metered, whose default is the embedded model"),
    (["--model", "hf-metered", "--tasks", "bbq_subset_25pct", "--verbosity", "LOUD"],
     "--verbosity LOUD: give a log level: DEBUG, INFO, WARNING, ERROR or CRITICAL")])
def test_what_lm_eval_would_crash_on_after_loading_is_one_line(argv, message):
    """`run --model hf` without pretrained= and `--verbosity LOUD` were lm-eval tracebacks
    (trial 8)."""
    from lm_eval_ext.command_preflight import PreflightError, check_command_line

    with pytest.raises(PreflightError) as error:
        check_command_line(argv)
    assert str(error.value) == message
    check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct", "--verbosity",
                        "debug"])  # followed: hf-metered, and a level (in any case)


def test_every_command_starts_under_python_oo(tmp_path):
    """PYTHONOPTIMIZE=2 strips docstrings: building the parser from __doc__ failed (trial 8)."""
    proc = _shell("{cli} mde --m 500 --rho-d 0.1", tmp_path, PYTHONOPTIMIZE="2")
    assert proc.returncode == 0 and proc.stdout.startswith("paired MDE = 3.96 pp"), proc.stderr


@pytest.mark.parametrize(("argv", "message"), [
    (["--num_fewshot", "1", "--fewshot_as_multiturn"],
     "--fewshot_as_multiturn needs --apply_chat_template (lm-eval's rule): add it, or leave "
     "--fewshot_as_multiturn out"),
    (["--wandb_args", "project=x"],
     "--wandb_args needs the wandb package, which is not installed: pip install wandb, or "
     "leave --wandb_args out"),
    (["--hf_hub_log_args", "hub_results_org=x,push_results_to_hub=True"],
     "--hf_hub_log_args pushes to the Hugging Face hub, and HF_HUB_OFFLINE is set: unset it "
     "where the hub can be reached, or leave push_results_to_hub/push_samples_to_hub out")])
def test_lm_evals_options_it_refuses_after_loading_are_one_line_first(argv, message):
    """--fewshot_as_multiturn without --apply_chat_template, --wandb_args without wandb and a
    hub push offline were lm-eval tracebacks after the model had loaded (trial 9)."""
    import importlib.util

    from lm_eval_ext.command_preflight import PreflightError, check_command_line

    assert importlib.util.find_spec("wandb") is None  # as in the package's own environment
    base = ["--model", "hf-metered", "--tasks", "bbq_subset_25pct"]
    with pytest.raises(PreflightError) as error:
        check_command_line([*base, *argv])
    assert str(error.value) == message
    check_command_line([*base, "--num_fewshot", "1", "--fewshot_as_multiturn",
                        "--apply_chat_template"])  # followed
    check_command_line([*base, "--hf_hub_log_args", "push_results_to_hub=False"])


def test_a_subnormal_or_infinite_weight_is_refused():
    """--weights b4=5e-324 normalised the weights through inf, with numpy's warning (trial 9)."""
    from lm_eval_ext.analysis.errors import AnalysisInputError
    from lm_eval_ext.cli.recommend import _weights

    for value in ("5e-324", "inf", "nan"):
        with pytest.raises(AnalysisInputError) as error:
            _weights(f"b4={value}")
        assert str(error.value) == (f"recommend: --weights entry 'b4={value}': a weight is a "
                                    "finite number of at least 1e-300 (e.g. 0.8)")
    assert _weights("b4=0.8,nf4=1e300") == {"b4": 0.8, "nf4": 1e300}
    with pytest.raises(AnalysisInputError) as error:  # trial 12: the last weight, no word
        _weights("b4=1,b4=2")
    assert str(error.value) == "recommend: --weights names b4 twice; give each run's weight once"


def test_a_hub_push_without_a_token_is_one_line(monkeypatch, tmp_path):
    """Online but with no token, lm-eval's tracker raised its ValueError after the run."""
    from lm_eval_ext.command_preflight import PreflightError, check_command_line

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no_token"))  # no stored token either
    with pytest.raises(PreflightError) as error:
        check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct",
                            "--hf_hub_log_args", "push_samples_to_hub=true"])
    assert str(error.value) == (
        "--hf_hub_log_args pushes to the Hugging Face hub without a token: set HF_TOKEN (or "
        "`hf auth login`), or leave push_results_to_hub/push_samples_to_hub out")
    monkeypatch.setenv("HF_TOKEN", "hf_x")  # followed: a token (not checked against the hub)
    check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct",
                        "--hf_hub_log_args", "push_samples_to_hub=true"])


def test_a_limit_beyond_any_task_is_one_line():
    """`--limit 1e300` was lm-eval's islice ValueError traceback (trial 9)."""
    from lm_eval_ext.command_preflight import PreflightError, check_limit

    with pytest.raises(PreflightError) as error:
        check_limit("1e300")
    assert str(error.value) == ("--limit 1e300: more items than any task holds; leave --limit "
                                "out for every item")
    check_limit("1000000")  # a large count that lm-eval cuts to the task's size
