"""The stock `lm_eval` console script finds hf-metered and our tasks through the .pth hook.

These tests run the real console scripts of the environment the package is installed in
(`pip install .`, non-editable, as the README says).
"""

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import console_script, run_cli


def test_wheel_installed_the_startup_hook():
    purelib = Path(sysconfig.get_paths()["purelib"])
    pth = purelib / "lm_eval_ext_autoload.pth"
    assert pth.is_file(), "install the package non-editable: pip install ."
    assert pth.read_text() == (Path(__file__).parents[1] / "lm_eval_ext" / "plugin" /
                               "autoload.pth").read_text()


def test_ctrl_c_while_the_hook_imports_exits_as_interrupted(tmp_path):
    """trial 11: a Ctrl-C landing in the hook's import during `site` was "Fatal Python error:
    init_import_site" with a traceback through _lm_eval_ext_autoload.py. The .pth line, run
    as site runs it (exec), with a stand-in hook that is interrupted."""
    (tmp_path / "_lm_eval_ext_autoload.py").write_text("raise KeyboardInterrupt\n")
    line = (Path(sysconfig.get_paths()["purelib"]) / "lm_eval_ext_autoload.pth").read_text()
    proc = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, "
                           f"{str(tmp_path)!r}); exec({line!r}); print('went on')"],
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "")


def _python(code: str, **env) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env})


def test_startup_hook_is_cheap():
    # Interpreter start-up imports neither lm_eval nor lm_eval_ext nor torch.
    proc = _python("import sys; print(sorted(m for m in sys.modules "
                   "if m.split('.')[0] in ('lm_eval', 'lm_eval_ext', 'torch')))")
    assert proc.stdout.strip() == "[]"


def test_the_cli_parser_starts_without_heavy_libraries():
    # `lm-eval-ext --help`, `mde`, `analyze` ...: each command imports what it needs when it runs
    # (the task prompts' `datasets` import cost the CLI's start 1 s before it moved into the
    # function that builds splits)
    proc = _python("import sys; from lm_eval_ext.cli.main import build_parser; build_parser(); "
                   "print(sorted({m.split('.')[0] for m in sys.modules} & "
                   "{'datasets', 'torch', 'transformers', 'lm_eval', 'pandas', 'scipy'}))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_model_registry_resolves_hf_metered_and_keeps_builtins():
    code = ("from lm_eval.api.registry import get_model; "
            "print(get_model('hf-metered').__name__, get_model('hf').__name__)")
    assert _python(code).stdout.split() == ["HFMeteredLM", "HFLM"]


def test_importing_the_wrapper_first_keeps_builtin_models():
    # The empty-registry pitfall: registering before lm_eval.models hides --model hf.
    code = ("import lm_eval_ext.backends.hf.metered; from lm_eval.api.registry import "
            "get_model; print(get_model('hf').__name__)")
    assert _python(code, LM_EVAL_EXT_DISABLE="1").stdout.strip() == "HFLM"


def test_an_opt_out_value_the_hook_does_not_read_is_one_line(tmp_path):
    """trial 12: LM_EVAL_EXT_DISABLE=y (or 2, disable) left the hook on without a word."""
    code = ("from lm_eval.api.registry import get_model\n"
            "try:\n    print(get_model('hf-metered').__name__)\nexcept Exception:\n"
            "    print('missing')")
    assert _python(code, LM_EVAL_EXT_DISABLE="y").stdout.strip() == "HFMeteredLM"  # still on
    for value in ("y", "2"):
        proc = run_cli(["lm_eval", "--model", "hf-metered", "--tasks", "bbq_subset_25pct_loglik",
                        "--limit", "1", "--output_path", str(tmp_path)],
                       env={"LM_EVAL_EXT_DISABLE": value})
        assert proc.returncode == 2 and proc.stderr.strip() == (
            f"lm_eval: error: LM_EVAL_EXT_DISABLE={value} is neither on nor off: set "
            "LM_EVAL_EXT_DISABLE=1 to turn lm-eval-ext's hook off (lm_eval is then lm-eval "
            "alone), or unset it to keep the hook"), proc.stderr[-2000:]
    assert not any(tmp_path.iterdir())


def test_our_model_in_the_stock_command_with_the_hook_off_is_one_line(tmp_path):
    """trial 13: LM_EVAL_EXT_DISABLE=1 lm_eval --model hf-metered ended in lm-eval's "Tasks not
    found" traceback (the hook off, lm-eval knows neither our tasks nor our models)."""
    from lm_eval_ext.backends.lm_eval_names import MODELS

    ours = _python("import _lm_eval_ext_autoload as a; print(','.join(a.OUR_MODELS))")
    assert set(ours.stdout.strip().split(",")) == set(MODELS)  # it cannot import the package
    for value, model in (("1", ["--model", "hf-metered"]), ("true", ["--model=vllm-metered"])):
        proc = run_cli(["lm_eval", *model, "--tasks", "bbq_subset_25pct_loglik", "--limit", "1",
                        "--output_path", str(tmp_path)], env={"LM_EVAL_EXT_DISABLE": value})
        name = model[-1].removeprefix("--model=")
        assert proc.returncode == 2 and proc.stderr.strip() == (
            f"lm_eval: error: --model {name} is lm-eval-ext's, and LM_EVAL_EXT_DISABLE={value} "
            "turns lm-eval-ext off in the stock lm_eval: unset LM_EVAL_EXT_DISABLE, or run "
            "`lm-eval-ext run ...` instead"), proc.stderr[-2000:]
    # another program's --model is left alone
    assert _python("print('ran')", LM_EVAL_EXT_DISABLE="1").stdout.strip() == "ran"


def test_opt_out_disables_the_hook():
    code = ("from lm_eval.api.registry import get_model\n"
            "try:\n    get_model('hf-metered'); print('found')\n"
            "except ValueError:\n    print('missing')")
    assert _python(code, LM_EVAL_EXT_DISABLE="1").stdout.strip() == "missing"


@pytest.mark.parametrize(("argv0", "tasks", "skipped"), [
    ("lm_eval", "bbq_subset_25pct,crows_pairs_ext", "True"),  # our tasks alone
    ("lm_eval", "bbq_subset_25pct,arc_easy", "False"),  # one of lm-eval's own: full index
    ("python-script", "bbq_subset_25pct", "False"),  # not the lm_eval command: untouched
])
def test_lm_eval_skips_its_own_task_index_only_for_our_tasks_alone(argv0, tasks, skipped):
    # (a TaskManager over lm-eval's whole index takes ~8 s, so only the narrowed one is built)
    code = (f"import sys; sys.argv = [{argv0!r}, 'validate', '--tasks', {tasks!r}]\n"
            "from lm_eval.tasks import TaskManager\n"
            "from lm_eval_ext.plugin.task_folders import lm_eval_index_skipped\n"
            "skipped = lm_eval_index_skipped(); print(skipped)\n"
            "if skipped: print(sorted({'bbq_subset_25pct', 'arc_easy'} & set(TaskManager().all_tasks)))")
    proc = _python(code)
    expected = [skipped, "['bbq_subset_25pct']"] if skipped == "True" else [skipped]
    assert proc.stdout.splitlines() == expected, proc.stderr


_WRAPPED = """
import json, sys
sys.argv = ["lm_eval", "validate", "--tasks", "bbq_subset_25pct"]  # the stock command's installs too
import lm_eval._cli, lm_eval.evaluator, lm_eval.loggers.evaluation_tracker, lm_eval.models
import lm_eval.tasks
import lm_eval.models.vllm_causallms  # the stand-in vLLM on the path
from lm_eval_ext.plugin.wrapping import MARK

def mark(value):
    try:
        return getattr(value, MARK, None)
    except Exception:  # a lazy module or proxy
        return None

modules = [m for n, m in list(sys.modules.items()) if n in ("sys", "lm_eval") or n.startswith("lm_eval.")]
values = [v for m in modules for v in vars(m).values()]
values += [v for c in values if isinstance(c, type) for v in vars(c).values()]
hook = sys.modules["_lm_eval_ext_autoload"]
listed = [install.split(":")[1] for _, install in (*hook.BEFORE, *hook.INSTALLS)]
print(json.dumps([listed, sorted({mark(v) for v in values} - {None})]))
"""


def test_the_hook_lists_every_install_it_makes():
    """Whatever the hook wrapped in lm-eval (or sys) is named in ``autoload.INSTALLS``."""
    stand_in = Path(__file__).parent / "stand_in_vllm"
    proc = _python(_WRAPPED, PYTHONPATH=f"{stand_in}:{Path.cwd()}")
    assert proc.returncode == 0, proc.stderr
    listed, wrapped = json.loads(proc.stdout)
    # the installs that replace no attribute: the registry's and logging's public methods, checks
    assert sorted(set(listed) - {"register_models", "drop_metadata_hint",
                                 "check_stock_command_line", "check_stock_arguments",
                                 "start_stock_command", "check_stock_user_tasks"}) == wrapped
    assert len(listed) == len(set(listed)) and "add_task_folders" in wrapped


def test_command_line_tasks_are_read_as_lm_eval_reads_them(tmp_path):
    from lm_eval_ext.plugin.task_folders import command_line_tasks

    assert command_line_tasks(["run", "--model", "hf", "-t", "a,b", "c", "--limit", "2",
                               "--include_path", "dir"]) == (("a", "b", "c"), "dir")
    assert command_line_tasks(["--config", "run.yaml"]) == ((), None)
    assert command_line_tasks(["--task", "a"]) == ((), None)  # no abbreviations guessed


@pytest.mark.slow
def test_lm_eval_validate_sees_our_tasks_and_opt_out_hides_them():
    from lm_eval.tasks._index import TaskIndex

    from lm_eval_ext.paths import package_tasks_dir

    tasks = ",".join(sorted(k for k, e in TaskIndex().build([package_tasks_dir()]).items()
                            if e.kind.name in ("TASK", "PY_TASK")))
    assert "xstest_ext" in tasks and "bbq_v_ext" in tasks and "truthfulqa_ext_mc2_loglik" in tasks
    ok = run_cli(["lm-eval", "validate", "--tasks", tasks])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "All tasks found and valid" in ok.stdout
    off = run_cli(["lm-eval", "validate", "--tasks", tasks], env={"LM_EVAL_EXT_DISABLE": "1"})
    assert off.returncode != 0 and "Tasks not found" in off.stdout


def _read_run(out: Path, task: str) -> tuple[dict, list[dict]]:
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    samples_path = next(out.rglob(f"samples_{task}_*.jsonl"))
    samples = [json.loads(line) for line in samples_path.read_text().splitlines()]
    return results, samples


@pytest.mark.slow
def test_headline_command_runs_the_embedded_model(tmp_path, embedded_checkpoint):
    out = tmp_path / "OUT"
    proc = run_cli(["lm_eval", "--model", "hf-metered", "--tasks", "bbq_subset_25pct",
                    "--limit", "8", "--output_path", str(out), "--log_samples"],
                   cwd=tmp_path)  # outside any git checkout, as a user's run folder
    assert proc.returncode == 0, proc.stderr[-3000:]
    # lm-eval's noise that the user did not cause: git's error, the --metadata hint
    assert "fatal: not a git repository" not in proc.stderr
    assert "Custom kwargs can be passed" not in proc.stderr
    results, samples = _read_run(out, "bbq_subset_25pct")
    assert results["git_hash"] is None
    # lm-eval records its --device default; where the model ran is in the metering record
    assert results["config"]["device"] == "cuda:0"
    assert results["config"]["metering"]["model_device"] == "cpu"
    assert results["n-samples"]["bbq_subset_25pct"] == {"original": 500, "effective": 8}
    assert len(samples) == 8
    assert results["config"]["hf_metered"]["embedded_model"]["gguf_sha256"].startswith("b179c95")
    for sample in samples:
        assert sample["resps"][0][0].strip()  # a real generation
        parsed = json.loads(sample["filtered_resps"][0])
        assert set(parsed) == {"answer", "reasoning", "method", "detail"}
        assert sample["doc"]["unit_id"].startswith(sample["doc"]["category"] + ":")
    metrics = results["results"]["bbq_subset_25pct"]
    n_parsed = sum(json.loads(s["filtered_resps"][0])["answer"] is not None for s in samples)
    assert metrics["parse_failure_rate,parsed"] == pytest.approx(1 - n_parsed / 8)
    # no --batch_size: the fast path planned the batch (all 8 at once), not lm-eval's default 1
    # that config.metering records; the card and the run's label had said batch 1 (N18_30)
    from lm_eval_ext.analysis.loader import load_run
    from lm_eval_ext.cards import task_card

    assert results["config"]["metering"]["batch_size"] == 1
    assert results["config"]["metering"]["generation"]["batch_sizes"] == [8]
    assert task_card(results, "bbq_subset_25pct", samples)["batch_size"] == "planned:8"
    run = load_run(next(out.rglob("results_*.json")))
    assert run.run_id == "SmolLM2-135M-Instruct@fp32/bsplanned:8/25pct"


@pytest.mark.slow
def test_a_batch_size_in_a_config_file_is_typed(tmp_path, embedded_checkpoint):
    """Trial 19 (N19_86): `batch_size: 1` in a --config file reached the model as lm-eval's
    default (the int 1), so the fast path generated in a planned batch of 4 while the results
    said batch 1; docs/hf-metered.md: a batch size you typed sets the batch."""
    from lm_eval_ext.cards import task_card

    config = tmp_path / "run.yaml"
    config.write_text("model: hf-metered\nmodel_args: {idle_seconds: 0}\nbatch_size: 1\n"
                      "limit: 3\nlog_samples: true\ntasks: bbq_subset_12p5pct\n")
    out = tmp_path / "OUT"
    proc = run_cli(["lm_eval", "--config", str(config), "--tasks", "bbq_subset_25pct",
                    "--output_path", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # trial 19 (N19_129): the file's tasks were dropped for the command line's without a word
    assert proc.stderr.count("lm-eval-ext: note: --tasks bbq_subset_25pct on the command line "
                             "replaces the --config file's tasks: bbq_subset_12p5pct (lm-eval "
                             "takes the command line's)\n") == 1
    results, samples = _read_run(out, "bbq_subset_25pct")
    generation = results["config"]["metering"]["generation"]
    assert (generation["batch_size_asked"], generation["batch_sizes"]) == (1, [1])  # was [3]
    assert task_card(results, "bbq_subset_25pct", samples)["batch_size"] == "1"


def _reader_gone(args: list[str]) -> tuple[int, str]:
    """Run a console script whose output pipe is closed at once (as `| head` ends early)."""
    proc = subprocess.Popen([console_script(args[0]), *args[1:]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    return proc.wait(timeout=600), err


@pytest.mark.slow
@pytest.mark.parametrize("command", [["lm_eval"], ["lm-eval-ext", "run"]])
def test_ctrl_c_during_a_run_is_one_line_and_leaves_no_folder(command, tmp_path):
    """Ctrl-C printed a 178-line KeyboardInterrupt traceback (trial 3)."""
    import signal
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen([console_script(command[0]), *command[1:], "--model", "hf-metered",
                             "--model_args", "idle_seconds=0", "--tasks",
                             "bbq_subset_25pct_loglik", "--limit", "200", "--output_path",
                             str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(15)  # the model is loaded and scoring
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)  # a second, as `timeout -s INT` sends to the command and its group (trial 6)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert "Traceback" not in err, err[-2000:]
    name = "lm_eval" if command == ["lm_eval"] else "lm-eval-ext run"
    assert (f"{name}: interrupted (Ctrl-C): nothing was saved half-written; run the command "
            "again\n") in err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("option", "message"), [
    (["--log_samples"], "--log_samples and --predict_only need --output_path (the folder for "
                        "the samples), e.g. --output_path results"),
    (["--seed", "abc"], "--seed abc: give one integer for all four seeds (e.g. --seed 42) or "
                        "four integers or None, comma-separated (e.g. --seed 0,None,8,52)"),
    (["--num_fewshot", "1", "--fewshot_as_multiturn"],  # lm-eval's ValueError (trial 9)
     "--fewshot_as_multiturn needs --apply_chat_template (lm-eval's rule): add it, or leave "
     "--fewshot_as_multiturn out")])
def test_lm_evals_own_parsing_rules_are_one_line_exit_2(option, message, tmp_path):
    """`lm_eval ... --log_samples` without --output_path: lm-eval's ValueError traceback, then
    exit 1; `--seed abc`: a functools.partial repr (trials 3-5)."""
    proc = run_cli(["lm_eval", "--model", "hf-metered", "--tasks", "bbq_subset_25pct",
                    *option], cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"lm_eval: error: {message}"]
    assert proc.returncode == 2


@pytest.mark.slow
@pytest.mark.parametrize("args", [["lm_eval", "ls", "tasks"], ["lm-eval-ext", "data", "verify"]])
def test_output_cut_by_its_reader_ends_quietly(args):
    """`lm-eval ls tasks | head` ended in a BrokenPipeError traceback (trial 2)."""
    returncode, err = _reader_gone(args)
    assert returncode == 1  # as Python's docs advise for a closed pipe (exit 1, no message)
    assert "Traceback" not in err and "Broken pipe" not in err and "BrokenPipe" not in err
    assert run_cli(args).returncode == 0  # with its reader there, the same command succeeds


# `lm_eval --model hf` with the hook installed: test_request_integrity (chat_template=off equals
# --model hf item for item); `lm-eval-ext run` with the hook disabled: test_bad_inputs
# (batch_size given both ways).


@pytest.mark.slow
def test_regression_our_errors_in_stock_lm_eval_are_one_line(tmp_path):
    """hf-metered's own messages arrived at the bottom of a long lm-eval traceback."""
    proc = run_cli(["lm_eval", "--model", "hf-metered", "--model_args", "precision=int3",
                    "--tasks", "bbq_subset_12p5pct_loglik", "--limit", "1", "--output_path",
                    str(tmp_path)])
    # a usage error exits 2, whichever check caught it (it was 1 here)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "lm_eval: error: hf-metered: precision='int3' is not valid; use one of bf16, fp16, "
        "fp32, int8, nf4, fp4")
    # other exceptions keep Python's traceback; LM_EVAL_EXT_TRACEBACK=1 shows ours in full
    full = run_cli(["lm_eval", "--model", "hf-metered", "--model_args", "precision=int3",
                    "--tasks", "bbq_subset_12p5pct_loglik", "--limit", "1"],
                   env={"LM_EVAL_EXT_TRACEBACK": "1"})
    assert "Traceback" in full.stderr and "PrecisionError" in full.stderr


def test_a_group_or_tag_that_may_gather_lm_evals_tasks_keeps_the_full_index(tmp_path):
    from lm_eval_ext.plugin.task_folders import lm_eval_index_skipped, narrow_to_command_line

    (tmp_path / "mine.yaml").write_text("group: my_mix\ntask:\n  - arc_easy\n  - bbq_subset_25pct\n")
    (tmp_path / "tagged.yaml").write_text(
        "include: " + str(Path(__file__).resolve().parents[1] / "lm_eval_ext" / "tasks" / "bbq"
                          / "bbq_subset_25pct.yaml") + "\ntask: my_bbq\ntag: my_tag\n")
    try:
        for argv, skipped in (
                (["--tasks", "my_bbq", "--include_path", str(tmp_path)], True),  # a task
                (["--tasks", "my_mix", "--include_path", str(tmp_path)], False),  # their group
                (["--tasks", "my_tag", "--include_path", str(tmp_path)], False)):  # a tag
            narrow_to_command_line(argv)
            assert lm_eval_index_skipped() is skipped, argv
    finally:
        narrow_to_command_line([])  # no command line: lm-eval's full index again
    assert not lm_eval_index_skipped()


def test_the_metadata_hint_is_dropped_for_our_tasks_only():
    import logging

    from lm_eval_ext.plugin.upstream_noise import drop_metadata_hint

    drop_metadata_hint()
    task_logger = logging.getLogger("lm_eval.api.task")

    def shown(message: str) -> bool:
        record = task_logger.makeRecord(task_logger.name, logging.WARNING, __file__, 0,
                                        message, None, None)
        return all(f.filter(record) for f in task_logger.filters)

    hint = ": Custom kwargs can be passed to `--metadata` in console (as json string)"
    assert not shown("bbq_subset_25pct" + hint)
    assert not shown("xstest_ext" + hint)
    assert shown("ruler_niah_single_1" + hint)  # lm-eval's own task: the hint is meant for it
    assert shown("bbq_subset_25pct: another warning")


def test_every_registered_model_is_an_lm_eval_models_entry_point():
    """The upstream plugin group names the same classes the start-up hook registers."""
    from importlib.metadata import entry_points

    from lm_eval_ext.backends.lm_eval_names import MODELS

    declared = {e.name: e.value for e in entry_points(group="lm_eval.models")
                if e.value.startswith("lm_eval_ext.")}
    assert declared == MODELS
