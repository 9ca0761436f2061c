"""lm-eval's options that it turns into a traceback after parsing: refused first, in one line.

Each check is held against lm-eval's own code on the same values: what lm-eval's parser,
model or cache would raise on is refused, what it takes is passed (trial 9).
"""

from __future__ import annotations

import json
import os
import re
import types

import pytest

from lm_eval_ext.command_preflight import PreflightError, check_command_line
from lm_eval_ext.errors import ConfigError

BASE = ["--model", "hf-metered", "--tasks", "bbq_subset_25pct_loglik"]
GENERATIVE = ["--model", "hf-metered", "--tasks", "bbq_subset_25pct"]


@pytest.mark.parametrize("option", ["--model_args", "--gen_kwargs", "--metadata",
                                    "--hf_hub_log_args"])
@pytest.mark.parametrize("value", ["{bad", '{"a": 1', "{'a': 1}", '{"a": 1}', "a=1", "a={1}",
                                   '{"max_gen_toks": 4}', "[1, {2}]"])
def test_json_options_are_refused_exactly_where_lm_evals_parser_fails(option, value):
    """`--metadata '{bad'` was lm-eval's ValueError traceback from inside its parser."""
    from lm_eval._cli.utils import try_parse_json  # lm-eval's parser reads the first value so

    refused = True
    base = GENERATIVE if option == "--gen_kwargs" else BASE  # gen_kwargs act on generation
    try:
        check_command_line([*base, option, value])
    except PreflightError as exc:
        assert str(exc).startswith(f"{option} {value}: lm-eval reads a value holding {{ as JSON")
    else:
        refused = False
    try:
        try_parse_json(value)
        lm_eval_raises = False
    except ValueError:
        lm_eval_raises = True
    assert refused == lm_eval_raises


def test_a_json_mistake_names_where_it_is_and_both_ways_to_write_it():
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--metadata", "{bad"])
    assert str(caught.value) == (
        "--metadata {bad: lm-eval reads a value holding { as JSON, and this is not valid JSON "
        "(Expecting property name enclosed in double quotes at character 2); write a JSON "
        "object with double quotes (e.g. --metadata '{\"key\": 1}') or key=value pairs (e.g. "
        "--metadata key=1)")


@pytest.mark.parametrize("value", ["8", "1e300", "8.0", "inf", "+3", "auto", "auto:2", "0x10"])
def test_a_batch_size_is_refused_exactly_where_lm_evals_model_cannot_read_it(value):
    """`--batch_size 1e300` passed the check (a float above 0) and failed in HFLM's int()."""
    refused = True
    try:
        check_command_line([*BASE, "--batch_size", value])
    except PreflightError as exc:
        assert str(exc) == (f"--batch_size {value}: give a positive whole number, auto or "
                            "auto:N (e.g. --batch_size 8)")
    else:
        refused = False
    try:  # lm-eval's HFLM: `int(batch_size)` unless it starts with auto
        readable = value.startswith("auto") or int(value) > 0
    except ValueError:
        readable = False
    assert refused == (not readable)


@pytest.mark.parametrize("value", ["-1", "0", "64", "+2"])
def test_max_batch_size_below_one_is_refused(value):
    """`--batch_size auto --max_batch_size -1` was torch's negative-dimension traceback."""
    argv = [*BASE, "--batch_size", "auto", "--max_batch_size", value]
    if int(value) > 0:
        check_command_line(argv)
        return
    with pytest.raises(PreflightError) as caught:
        check_command_line(argv)
    assert str(caught.value) == (f"--max_batch_size {value}: give a positive whole number (the "
                                 "largest batch --batch_size auto tries, e.g. 64)")


def lm_eval_cache_opens(prefix: str) -> bool:
    """Whether lm-eval's CachingLM opens its database for ``--use_cache prefix`` (rank 0)."""
    from lm_eval.api.model import CachingLM

    model = types.SimpleNamespace(set_cache_hook=lambda hook: None)
    try:
        cache = CachingLM(model, prefix + "_rank0.db")
    except OSError:
        return False
    cache.dbdict.close()
    return True


@pytest.mark.parametrize("where", ["/proc/nope/db", "{tmp}/file.txt/db", "{tmp}/new/deeper/db",
                                   "{tmp}/db", "{tmp}/folder_rank0.db/../x", "{tmp}/locked/db"])
def test_the_response_cache_is_refused_exactly_where_lm_eval_cannot_open_it(where, tmp_path):
    """`--use_cache /proc/nope/db` was FileNotFoundError after the model had loaded."""
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "locked").mkdir(mode=0o500)
    prefix = where.format(tmp=tmp_path)
    refused = True
    try:
        check_command_line([*BASE, "--use_cache", prefix])
    except PreflightError as exc:
        assert str(exc).startswith("--use_cache")
    else:
        refused = False
    # a refused check leaves no folder behind; a passed one makes the cache's folder, with the
    # file naming whose answers it will hold, as the run starts (lm-eval would make it too)
    assert (tmp_path / "new").exists() == ("new" in where and not refused)
    if os.geteuid() == 0 and "locked" in where:  # root writes anywhere: so does lm-eval
        assert not refused
        return
    assert refused == (not lm_eval_cache_opens(prefix))


def test_an_empty_cache_name_or_a_folder_is_refused_with_an_example(tmp_path):
    for value in ("", f"{tmp_path}/"):
        with pytest.raises(PreflightError) as caught:
            check_command_line([*BASE, "--use_cache", value])
        assert str(caught.value) == (f"--use_cache {value!r}: give the start of a file name, "
                                     "e.g. --use_cache cache/responses (lm-eval adds _rank0.db)")


def test_check_integrity_is_refused_where_lm_eval_cannot_find_its_tests():
    """`--check_integrity` was "Unable to find package root" after the model had loaded."""
    from pathlib import Path

    import lm_eval.evaluator_utils as evaluator_utils

    with pytest.raises(FileNotFoundError):  # lm-eval's own lookup, in this (pip) install
        evaluator_utils.find_test_root(Path(evaluator_utils.__file__))
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--check_integrity"])
    assert str(caught.value) == (
        "--check_integrity runs lm-eval's own test suite, which an installed lm-eval does not "
        "ship; run it from a clone of lm-evaluation-harness, or leave --check_integrity out")


def test_trackio_args_without_trackio_name_the_package():
    """`--trackio_args project=x` was lm-eval's ImportError traceback after the evaluation."""
    import importlib.util

    assert importlib.util.find_spec("trackio") is None  # as installed by README's set-up
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--trackio_args", "project=x"])
    assert str(caught.value) == ("--trackio_args needs the trackio package, which is not "
                                 "installed: pip install trackio, or leave --trackio_args out")


@pytest.mark.parametrize("seed", ["-1", "0", "4294967296", "99999999999999999999999",
                                  "0,-1,0,0", "0,0,-9223372036854775809", "0,0,18446744073709551615",
                                  "0,0,18446744073709551616", "-5,0,0,-7", "None,None,None"])
def test_seeds_are_refused_exactly_where_numpy_or_torch_would_raise(seed):
    """`--seed -1` and `--seed 10^23` were numpy's "Seed must be between 0 and 2**32 - 1"
    traceback once lm-eval set its seeds."""
    import numpy as np
    import torch

    items = seed.split(",")
    seeds = items * 4 if len(items) == 1 else items
    try:  # what lm-eval's simple_evaluate does with the numpy and torch slots
        if seeds[1] != "None":
            np.random.seed(int(seeds[1]))
        if seeds[2] != "None":
            torch.manual_seed(int(seeds[2]))
        libraries_raise = False
    except (ValueError, RuntimeError, OverflowError):
        libraries_raise = True
    refused = True
    try:
        check_command_line([*BASE, f"--seed={seed}"])
    except PreflightError as exc:
        assert str(exc).startswith(f"--seed {seed}: the ") and "(e.g. --seed 42)" in str(exc)
    else:
        refused = False
    assert refused == libraries_raise


def test_an_include_path_lm_eval_would_skip_is_named(tmp_path):
    """`--include_path FILE` and a folder with a broken task YAML ran on without the tasks
    (lm-eval indexes *.yaml under a folder and skips what it cannot load, at debug level)."""
    from lm_eval.tasks import TaskManager

    (tmp_path / "ok.yaml").write_text("task: my_ok\ndataset_path: json\n"
                                      "process_results: !function utils.process\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.yaml").write_text("task: my_bad\ndataset_path: [json\n")
    known = TaskManager(include_path=str(tmp_path), include_defaults=False).all_tasks
    assert "my_ok" in known and "my_bad" not in known  # lm-eval's own silence
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--include_path", str(tmp_path)])
    assert str(caught.value) == (
        f"--include_path {tmp_path}: {tmp_path / 'sub' / 'bad.yaml'} is not valid YAML at line "
        "3, column 1: expected ',' or ']', but got '<stream end>' (lm-eval would skip it and "
        "its tasks without a word); fix the file")
    (tmp_path / "sub" / "bad.yaml").unlink()
    check_command_line([*BASE, "--include_path", str(tmp_path)])
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--include_path", str(tmp_path / "ok.yaml")])
    assert str(caught.value) == (f"--include_path {tmp_path / 'ok.yaml'} is a file; lm-eval "
                                 "reads every .yaml file of a folder (a file holds none): give "
                                 f"--include_path {tmp_path}")


def test_a_command_line_argparse_cannot_read_is_left_to_lm_evals_usage_line():
    """`--seed -5,0,0,-7` (a value argparse takes for an option) exited through this module's
    own parser with a usage line naming __main__.py and none of lm-eval's options."""
    check_command_line([*BASE, "--seed", "-5,0,0,-7"])  # lm-eval's parser says it next


@pytest.fixture(scope="module")
def loglik_task():
    """lm-eval's own Task object of bbq_subset_25pct_loglik (500 items, local data)."""
    from lm_eval_ext.plugin.registration import activate
    from lm_eval_ext.plugin.task_folders import our_task_manager

    activate()
    name = "bbq_subset_25pct_loglik"
    return our_task_manager().load([name])["tasks"][name]


def what_lm_eval_runs(task, samples) -> str:
    """lm-eval's evaluator on ``samples``: ``samples.get(task)`` into the task's doc_iterator."""
    if not isinstance(samples, dict):
        return "fails"  # the evaluator logs samples.keys()
    indices = samples.get(task.config.task)
    try:
        picked = [i for i, _ in task.doc_iterator(samples=indices)]
    except (AssertionError, TypeError, AttributeError):
        return "fails"
    if not picked:
        return "fails"  # build_all_requests: "did not find any docs!"
    return "every item" if len(picked) == len(task.eval_docs) else "the items named"


@pytest.mark.parametrize("samples", [
    {"bbq_subset_25pct_loglik": [0, 3]}, {"bbq_subset_25pct_loglik": [-1]},
    {"bbq_subset_25pct_loglik": []}, {"bbq_subset_25pct_loglik": "x"}, {"other_task": [0]},
    {"bbq_subset_25pct_loglik": [0.5]}, [0, 1]])
def test_samples_are_refused_exactly_where_lm_eval_fails_or_runs_every_item(samples, loglik_task):
    """trial 10's probes: a list, [-1], "x" were tracebacks; [] and another task's name ran all
    500 items without a word."""
    import json

    outcome = what_lm_eval_runs(loglik_task, samples)
    refused = True
    try:
        check_command_line([*BASE, "--samples", json.dumps(samples)])
    except PreflightError as exc:
        assert str(exc).startswith(f"--samples {json.dumps(samples)}: ")
        assert str(exc).endswith("or the path of a JSON file holding one") or \
            str(exc).endswith("name the tasks --tasks runs")
    else:
        refused = False
    assert refused == (outcome != "the items named"), outcome


def test_samples_from_a_file_are_read_as_lm_eval_reads_them(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"bbq_subset_25pct_loglik": [0, 1]}')
    bad.write_text("[1")
    check_command_line([*BASE, "--samples", str(good)])
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--samples", str(bad)])
    assert str(caught.value).startswith(f"--samples {bad} is not valid JSON (Expecting")
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--samples", str(tmp_path / "none.json")])
    assert str(caught.value).startswith(f"--samples {tmp_path / 'none.json'}: not JSON and no "
                                        "such file; give a JSON object of task -> item indices")


def test_an_index_beyond_the_task_is_lm_evals_assertion_said_in_one_line(loglik_task):
    from lm_eval_ext.plugin.lm_eval_cli import one_line_error

    with pytest.raises(AssertionError) as caught:
        list(loglik_task.doc_iterator(samples=[999999]))
    assert str(one_line_error(caught.value)) == (
        "--samples: an index is beyond a task's 500 items; give indices from 0 to 499")


def test_wandb_config_args_without_wandb_args_are_refused():
    """lm-eval builds its W&B logger only for --wandb_args: the config args ran to the end
    unused, without a word."""
    import inspect

    from lm_eval._cli.run import Run

    assert "if cfg.wandb_args:" in inspect.getsource(Run)  # lm-eval's only use of them
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--wandb_config_args", "a=1"])
    assert str(caught.value) == (
        "--wandb_config_args applies to --wandb_args, which is not given: give --wandb_args "
        "(e.g. project=my-evals), or leave --wandb_config_args out")


def test_the_seed_and_samples_messages_in_full():
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--seed", "-1"])
    assert str(caught.value) == ("--seed -1: the numpy seed -1 is outside the range numpy takes "
                                 "(0 to 4294967295); give a seed in it (e.g. --seed 42)")
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--samples", '{"bbq_subset_25pct_loglik": []}'])
    assert str(caught.value) == (
        '--samples {"bbq_subset_25pct_loglik": []}: bbq_subset_25pct_loglik: [] is not a list '
        "of item indices (whole numbers from 0; lm-eval would run every item); give a JSON "
        'object of task -> item indices, e.g. --samples \'{"bbq_subset_25pct": [0, 1, 2]}\', '
        "or the path of a JSON file holding one")


@pytest.mark.parametrize(("lines", "message"), [
    ("limit: 1.0e+300\n", "--limit 1e+300: more items than any task holds"),
    # trial 13: YAML reads 1e1 as text; lm-eval's TypeError came after the model loaded
    ("limit: 1e1\n", "1e1 (line 4) is read by YAML as text, not a number: write 10, or quote "
                     "it for text"),
    # trial 14: `num_fewshot: 1e0` was told to write 1.0e+0, which a count refuses in turn
    ("num_fewshot: 1e0\n", "1e0 (line 4) is read by YAML as text, not a number: write 1, or "
                           "quote it for text"),
    ("limit: 5e-324\n", "5e-324 (line 4) is read by YAML as text, not a number: write "
                        "5.0e-324, or quote it for text"),
    ("limit: 2\nfewshot_as_multiturn: true\nnum_fewshot: 1\n",
     "--fewshot_as_multiturn needs --apply_chat_template (lm-eval's rule)"),
    ("limit: 2\nbatch_size: auto\nmax_batch_size: -1\n", "--max_batch_size -1: give a positive"),
    ("limit: 2\nseed: -1\n", "--seed -1: the numpy seed -1 is outside the range numpy takes"),
    ("limit: 2\nwandb_config_args: {a: 1}\n", "--wandb_config_args applies to --wandb_args"),
    ("limit: 2\nmetadata: '{bad'\n", "metadata: '{bad' is text, which lm-eval reads as key=value "
                                      "pairs (a key named '{bad'); write a YAML mapping"),
    ("samples: {bbq_subset_25pct_loglik: []}\n",
     '--samples {"bbq_subset_25pct_loglik": []}: bbq_subset_25pct_loglik: [] is not a list'),
])
def test_a_config_files_options_are_checked_as_their_flags_are(lines, message, tmp_path):
    """trial 10: `limit: 1e300`, `seed: -1`, `max_batch_size: -1` and more in a --config file
    were tracebacks after the model loaded (the flags get one line); `metadata: '{bad'` became a
    key named '{bad' without a word."""
    config = tmp_path / "run.yaml"
    config.write_text("model: hf-metered\nmodel_args: idle_seconds=0\n"
                      f"tasks: bbq_subset_25pct_loglik\n{lines}")
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--config", str(config), "--output_path", str(tmp_path / "o")])
    assert str(caught.value).startswith(f"--config {config}: {message}")


def test_a_config_file_whose_flag_replaces_the_bad_value_passes(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("model: hf-metered\nmodel_args: idle_seconds=0\n"
                      "tasks: bbq_subset_25pct_loglik\nlimit: 1.0e+300\nseed: -1\n")
    check_command_line(["--config", str(config), "--limit", "2", "--seed", "3"])


def test_a_task_repeated_in_samples_or_an_option_repeated_in_a_config_file_is_refused(tmp_path):
    """trial 11: JSON and YAML keep the second of two equal keys, so 3 of 4 chosen items and
    the first `limit:` were dropped without a word."""
    import json

    twice = '{"bbq_subset_25pct_loglik": [0, 1, 2], "bbq_subset_25pct_loglik": [3]}'
    assert json.loads(twice) == {"bbq_subset_25pct_loglik": [3]}  # what lm-eval would read
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--samples", twice])
    assert str(caught.value) == (f"--samples {twice}: names bbq_subset_25pct_loglik twice (JSON "
                                 "keeps the second list only); give each task once, with all "
                                 "its indices")
    config = tmp_path / "run.yaml"
    config.write_text("model: hf-metered\ntasks: bbq_subset_25pct_loglik\nlimit: 2\nlimit: 3\n")
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--config", str(config)])
    assert str(caught.value) == (f"--config {config}: key 'limit' appears twice in one mapping "
                                 "(lines 3 and 4); YAML would keep only the second: give each "
                                 "its own name, or remove one")


def test_a_task_yaml_given_by_path_is_read_first(tmp_path):
    """trial 11: `--tasks bad.yaml` (lm-eval takes a task file's path) was PyYAML's traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: [unclosed\n")
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", "hf-metered", "--tasks", str(bad)])
    assert str(caught.value).startswith(f"--tasks {bad} is not valid YAML at line 2, column 1: ")
    assert str(caught.value).endswith("; fix the file")


def test_auto_batch_schedules_beyond_the_requests_are_one_line():
    """trial 11: `--batch_size auto:1e300` passed the check and ended in lm-eval's
    ZeroDivisionError from HFLM._batch_scheduler: int(len(requests) / N) is 0 for N above the
    requests."""
    from lm_eval.models.huggingface import HFLM

    from lm_eval_ext.plugin.lm_eval_cli import one_line_error

    model = HFLM.__new__(HFLM)  # lm-eval's own scheduler, on a bare instance
    model.batch_schedule, model.batch_sizes = 1e300, {}
    with pytest.raises(ZeroDivisionError) as caught:
        HFLM._batch_scheduler(model, 0, list(range(6)))
    assert str(one_line_error(caught.value)) == (
        "--batch_size auto:N asks lm-eval to find the batch size N times, more often than this "
        "run has requests (lm-eval then divides by zero): give a smaller N (e.g. auto:2) or auto")
    assert one_line_error(ZeroDivisionError("elsewhere")).args == ("elsewhere",)  # others kept


def test_max_batch_size_without_an_automatic_batch_size_is_refused(tmp_path):
    """trial 11: `--max_batch_size 8` with a fixed batch size ran and did nothing (lm-eval's
    HFLM and our generation read it only for --batch_size auto)."""
    import inspect

    from lm_eval.models.huggingface import HFLM

    assert 'if str(batch_size).startswith("auto")' in inspect.getsource(HFLM.__init__)
    for argv in (["--batch_size", "4", "--max_batch_size", "8"], ["--max_batch_size", "8"]):
        with pytest.raises(PreflightError) as caught:
            check_command_line([*BASE, *argv])
        size = "4" if "4" in argv else "1"
        assert str(caught.value) == (f"--max_batch_size 8 applies to --batch_size auto, which is "
                                     f"not given (the batch size is {size}): give --batch_size "
                                     "auto, or leave --max_batch_size out")
    check_command_line([*BASE, "--batch_size", "auto:2", "--max_batch_size", "8"])


def test_a_campaign_condition_with_max_batch_size_and_a_fixed_batch_is_refused():
    from lm_eval_ext.campaign.preflight import check_cells
    from lm_eval_ext.campaign.spec import build_spec

    spec = build_spec({"models": {"m": "idle_seconds=0"}, "tasks": ["bbq_subset_12p5pct_loglik"],
                       "conditions": {"a": {"batch_size": 2, "max_batch_size": 8}}})
    with pytest.raises(ConfigError) as caught:
        check_cells(spec.cells)
    assert str(caught.value) == (
        f"cell {spec.cells[0].cell_id}: max_batch_size: 8 applies to batch_size: auto, which is "
        "not given (the batch size is 2): give batch_size: auto, or leave max_batch_size: out")


@pytest.mark.parametrize(("gen_kwargs", "message"), [
    ({"do_sample": True, "temperature": -0.0},
     "do_sample=True,temperature=-0.0: sampling needs a temperature above 0"),
    ({"do_sample": True, "temperature": "1e300"},
     "temperature='1e300': temperature must be a number, not text"),
])
def test_a_files_sampling_settings_lm_eval_cannot_run_are_refused(gen_kwargs, message):
    """trial 11: a grid's decoding `temperature: -0.0` with sampling, or `1e300` (YAML text),
    passed the checks; every calibration run failed and the dry run exited 0."""
    from lm_eval_ext.campaign.spec import build_spec

    with pytest.raises(ConfigError) as caught:
        build_spec({"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct"],
                    "conditions": {"a": {"gen_kwargs": gen_kwargs}}})
    assert message in str(caught.value)


@pytest.mark.parametrize(("line", "message"), [
    ("apply_chat_template: \"false\"", "apply_chat_template: 'false' is text, which lm-eval reads "
                                       "as a chat template's name; write true or false"),
    ("predict_only: \"false\"", "predict_only: 'false' is not true or false (lm-eval takes any "
                                "text, 'false' too, as true)"),
    ("log_samples: \"no\"", "log_samples: 'no' is not true or false"),
    ("use_cache: no", 'no (line 4) is read by YAML as false, not as written: quote it ("no") '
                      "for a name, or write false for a switch"),
    ("log_samples: yes", "yes (line 4) is read by YAML as true, not as written"),
    ("device: [cpu]", "device: ['cpu'] is not a name or path"),
    ("limit: 010", "010 (line 4) is read by YAML as 8, not as written: write the number without "
                   "a leading zero or a colon, or quote it for text"),
    ("limit: 1:30", "1:30 (line 4) is read by YAML as 90, not as written"),
    # trial 14: an AttributeError from lm-eval's cfg.cache_requests.get after the load, and a
    # nested config file never read
    ("cache_requests: 1", "cache_requests: 1 is not read by lm-eval from a file (it takes a "
                          "mapping there, e.g. cache_requests: {cache_requests: true})"),
    ("config: other.yaml", "config: 'other.yaml': a --config file cannot name another (lm-eval "
                           "would not read it); copy its options into this file"),
])
def test_a_config_value_yaml_or_lm_eval_reads_otherwise_is_refused(line, message, tmp_path):
    """trial 12: `predict_only: "false"` turned predict-only on, `limit: 010` ran 8 items,
    `use_cache: no` and `device: [cpu]` were tracebacks after the model loaded."""
    import yaml

    config = tmp_path / "run.yaml"
    config.write_text(f"model: hf-metered\nmodel_args: idle_seconds=0\n"
                      f"tasks: bbq_subset_25pct_loglik\n{line}\n")
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--config", str(config), "--output_path", str(tmp_path / "o")])
    assert message in str(caught.value) and str(caught.value).startswith(f"--config {config}: ")
    if "limit" in line:  # PyYAML's own reading, which lm-eval uses
        assert yaml.safe_load(line)["limit"] in (8, 90)


def test_a_campaign_condition_named_yes_is_told_to_quote_it(tmp_path):
    """trial 12: conditions `yes:`/`no:` were "condition label True: use letters, digits ..."."""
    from lm_eval_ext.campaign.yaml_file import read_yaml

    path = tmp_path / "c.yaml"
    path.write_text("models: {m: ''}\ntasks: [bbq_subset_12p5pct_loglik]\nconditions:\n"
                    "  yes: {batch_size: 1}\n  no: {batch_size: 2}\n")
    with pytest.raises(ConfigError) as caught:
        read_yaml(path)
    assert 'yes (line 4) is read by YAML as true, not as written: quote it ("yes") for a name, ' \
        "or write true for a switch" in str(caught.value)
    # trial 13: with the keys quoted, `runs: [no]` was "tasks must be a task name" (YAML's false)
    path.write_text("models: {m: ''}\ntasks: [bbq_subset_12p5pct_loglik]\nconditions:\n"
                    '  "yes": {batch_size: 1}\n  "no": {batch_size: 2}\n'
                    "compare: {b: {reference: yes, runs: [no]}}\n")
    with pytest.raises(ConfigError) as caught:
        read_yaml(path)
    assert 'yes (line 6) is read by YAML as true, not as written: quote it ("yes")' in \
        str(caught.value)
    path.write_text(path.read_text().replace("reference: yes, runs: [no]",
                                             'reference: "yes", runs: ["no"]'))
    assert read_yaml(path)["compare"] == {"b": {"reference": "yes", "runs": ["no"]}}  # followed


def test_apply_chat_template_false_on_the_command_line_is_refused():
    """trial 12: `--apply_chat_template false` applied a chat template named "false" (lm-eval's
    parser takes any value as a template's name), rc 0."""
    from lm_eval._cli.harness import HarnessCLI

    cli = HarnessCLI()
    read = cli._parser.parse_args(["run", *BASE, "--apply_chat_template", "false"])
    assert read.apply_chat_template == "false"  # a name to lm-eval, not a switch
    assert cli._parser.parse_args(["run", *BASE, "--apply_chat_template"]).apply_chat_template \
        is True
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--apply_chat_template", "false"])
    assert str(caught.value) == (
        "--apply_chat_template 'false' is text, which lm-eval reads as a chat template's name; "
        "give --apply_chat_template alone to apply the model's template, or leave it out")
    check_command_line([*BASE, "--apply_chat_template"])
    check_command_line([*BASE, "--apply_chat_template", "chatml"])


def test_a_json_option_naming_a_key_twice_is_refused():
    """trial 12: `--metadata '{"a": 1, "a": 2}'` ran with a: 2 (JSON's last key), rc 0."""
    from lm_eval._cli.utils import try_parse_json

    assert try_parse_json('{"a": 1, "a": 2}') == {"a": 2}  # lm-eval keeps the second
    for option in ("--metadata", "--gen_kwargs", "--model_args"):
        with pytest.raises(PreflightError) as caught:
            check_command_line([*BASE, option, '{"a": 1, "a": 2}'])
        assert str(caught.value) == (f'{option} {{"a": 1, "a": 2}}: names a twice (JSON keeps '
                                     "the second without a word); give a once")
    check_command_line([*BASE, "--metadata", '{"a": 1, "b": 2}'])


@pytest.mark.parametrize(("words", "key", "first", "last"), [
    (["--model_args", "precision=fp32,idle_seconds=0,precision=bf16"], "precision", "fp32",
     "bf16"),
    (["--gen_kwargs", "max_gen_toks=8,max_gen_toks=9"], "max_gen_toks", "8", "9"),
    (["--metadata", "a=1", "--metadata", "b=2,a=3"], "a", "1", "3"),
    (["--gen_kwargs", '{"a": 1}', "--gen_kwargs", "a=2"], "a", "1", "2"),
    (["-a", "x=[1,2]", "x=3"], "x", "[1,2]", "3"),
])
def test_a_key_given_twice_as_key_value_words_is_refused(words, key, first, last):
    """trial 15: `--model_args precision=fp32,...,precision=bf16` ran in bf16 with only
    lm-eval's "Overwriting key" warning; `--gen_kwargs max_gen_toks=8,max_gen_toks=9` used 9."""
    import argparse

    from lm_eval._cli.utils import MergeDictAction

    parser = argparse.ArgumentParser()
    parser.add_argument("--model_args", "-a", nargs="+", action=MergeDictAction)
    parser.add_argument("--gen_kwargs", nargs="+", action=MergeDictAction)
    parser.add_argument("--metadata", nargs="+", action=MergeDictAction)
    option = {"-a": "model_args"}.get(words[0], words[0].removeprefix("--"))
    kept = getattr(parser.parse_args(words), option)[key]
    assert str(kept) == last  # lm-eval keeps the last value
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, *words])
    assert str(caught.value) == (
        f"--{option} names {key} twice ({key}={first} and {key}={last}); lm-eval keeps the "
        f"last with no more than a warning: give {key} once")


def test_key_value_words_with_brackets_and_a_config_flag_overridden_are_not_repeats(tmp_path):
    check_command_line([*GENERATIVE, "--gen_kwargs", "until=[a,b],max_gen_toks=4"])
    config = tmp_path / "c.yaml"
    config.write_text("model_args: pretrained=gemma3-270m\nlimit: 2\n")
    check_command_line([*BASE, "--config", str(config), "--limit", "3"])  # a scalar: overridden
    # trial 17 (N17_225): lm-eval takes --model_args whole, so the file's pretrained was
    # dropped and the run evaluated the embedded model
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--config", str(config), "--model_args", "idle_seconds=1"])
    assert str(caught.value) == (
        f"--model_args is given on the command line and as model_args in --config {config}; "
        "lm-eval would take the command line's whole and drop the file's "
        "(pretrained=gemma3-270m): give model_args in one place")
    config.write_text("model_args: idle_seconds=0\n")
    config.write_text("model_args: idle_seconds=0,idle_seconds=1\n")
    with pytest.raises(PreflightError, match=f"--config {config}: --model_args names "
                                             "idle_seconds twice"):
        check_command_line([*BASE, "--config", str(config)])


def _task_yaml(folder, text):
    folder.mkdir(exist_ok=True)
    path = folder / "t.yaml"
    path.write_text(text)
    return path


JSON_TASK = ("dataset_path: json\ndataset_kwargs: {data_files: {test: d.jsonl}}\ntest_split: test\n"
             "doc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n")


def test_a_task_file_naming_a_key_twice_or_no_documents_is_refused(tmp_path):
    """trial 12: an --include_path task YAML with `task:` twice registered the second name only
    (rc 0); a task YAML by path without dataset_path was a datasets traceback after the load."""
    import yaml
    from lm_eval.tasks import TaskManager

    twice = _task_yaml(tmp_path / "inc", f"task: incd_t1\n{JSON_TASK}task: incd_t2\n")
    assert "incd_t2" in TaskManager(include_path=str(twice.parent)).all_tasks  # the second
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE[:2], "--tasks", "incd_t2", "--include_path", str(twice.parent)])
    assert str(caught.value) == (
        f"--include_path {twice.parent}: {twice} is refused: key 'task' appears twice in one "
        "mapping (lines 1 and 7); YAML would keep only the second: give each its own name, or "
        "remove one")
    bare = _task_yaml(tmp_path / "bare", "task: bare_t\ndoc_to_text: '{{q}}'\n")
    assert yaml.safe_load(bare.read_text()).get("dataset_path") is None
    message = ("names no dataset_path (nor include, custom_dataset or class), so lm-eval has no "
               "documents to load; add dataset_path (a hub dataset, or a loader such as json "
               "with dataset_kwargs: {data_files: ...})")
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE[:2], "--tasks", str(bare)])
    assert str(caught.value) == f"--tasks {bare} {message}"
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE[:2], "--tasks", "bare_t", "--include_path", str(bare.parent)])
    assert str(caught.value) == f"--include_path {bare.parent}: {bare} {message}"
    # followed: with its documents named, the same file passes
    (tmp_path / "d.jsonl").write_text('{"q": "2+2", "a": "4"}\n')
    fixed = _task_yaml(tmp_path / "fixed", f"task: fixed_t\n{JSON_TASK}".replace(
        "test: d.jsonl", f"test: {tmp_path}/d.jsonl"))
    check_command_line([*BASE[:2], "--tasks", str(fixed)])


@pytest.mark.parametrize(("body", "cause"), [
    (JSON_TASK.replace("d.jsonl", "/nonexistent/d.jsonl"), "FileNotFoundError: Unable to find "
                                                          "'/nonexistent/d.jsonl'"),
    (JSON_TASK.replace("'{{a}}'", "5").replace("doc_to_text", "doc_to_choice: [a, b]\n"
                                               "output_type: multiple_choice\ndoc_to_text"),
     "IndexError: list index out of range"),
])
def test_an_include_path_task_lm_eval_cannot_build_is_one_line(body, cause, tmp_path):
    """An include-path task with a missing data file or a target beyond its choices ended in
    lm-eval's traceback, after the model had loaded (lm-eval builds the tasks then)."""
    from lm_eval.tasks import TaskManager, get_task_dict

    folder = tmp_path / "inc"
    _task_yaml(folder, f"task: mine\n{body}".replace("test: d.jsonl", f"test: {folder}/d.jsonl"))
    (folder / "d.jsonl").write_text('{"q": "2+2", "a": "4"}\n')
    with pytest.raises(Exception, match=re.escape(cause.split(": ", 1)[1])):  # lm-eval's own
        get_task_dict(["mine"], TaskManager(include_path=str(folder), include_defaults=False))
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE[:2], "--tasks", "mine", "--include_path", str(folder)])
    assert str(caught.value) == (
        f"lm-eval cannot build the task(s) mine ({cause}); fix the task YAML in {folder} (its "
        "keys, data files, prompt, choices or target), and run again")


def test_sampling_without_a_temperature_is_refused():
    """trial 13: `--gen_kwargs do_sample=true` on bbq_subset_25pct (no temperature in its YAML)
    was transformers' 'temperature (=0.0) has to be a strictly positive float' traceback after
    the model loaded."""
    import inspect

    from lm_eval.models.huggingface import HFLM
    from transformers.generation.logits_process import TemperatureLogitsWarper

    # lm-eval's default where neither the task nor --gen_kwargs sets one
    assert 'generation_kwargs.get("temperature", 0.0)' in inspect.getsource(HFLM)
    with pytest.raises(ValueError, match="has to be a strictly positive float"):
        TemperatureLogitsWarper(0.0)  # the warper transformers builds for do_sample=True
    with pytest.raises(PreflightError) as caught:
        check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct",
                            "--gen_kwargs", "do_sample=true"])
    assert str(caught.value) == (
        "--gen_kwargs do_sample=True without a temperature samples at lm-eval's default "
        "temperature, 0, which transformers refuses after the model loads; add one (e.g. "
        "do_sample=True,temperature=0.7)")
    check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct", "--gen_kwargs",
                        "do_sample=true,temperature=0.7"])  # followed


def test_a_task_yaml_given_by_its_path_that_lm_eval_cannot_build_is_one_line(tmp_path):
    """trial 14: a task YAML in --tasks with an unknown key (a YAML anchor's helper `base:`)
    was lm-eval's 'TaskConfig.__init__() got an unexpected keyword argument' traceback after the
    model loaded."""
    from lm_eval.tasks import TaskManager, get_task_dict

    task = tmp_path / "t.yaml"
    (tmp_path / "d.jsonl").write_text('{"q": "2+2", "a": "4"}\n')
    task.write_text("base: &b {dataset_path: json}\ntask: mine\n<<: *b\n"
                    + JSON_TASK.replace("dataset_path: json\n", "").replace(
                        "test: d.jsonl", f"test: {tmp_path}/d.jsonl"))
    with pytest.raises(TypeError, match="unexpected keyword argument 'base'"):  # lm-eval's own
        get_task_dict([str(task)], TaskManager(include_defaults=False))
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE[:2], "--tasks", str(task)])
    assert str(caught.value) == (
        f"lm-eval cannot build the task(s) {task} (TypeError: TaskConfig.__init__() got an "
        f"unexpected keyword argument 'base'); fix the task YAML in {task} (its keys, data "
        "files, prompt, choices or target), and run again")
    task.write_text(f"task: mine\n{JSON_TASK}".replace("test: d.jsonl",
                                                      f"test: {tmp_path}/d.jsonl"))
    check_command_line([*BASE[:2], "--tasks", str(task)])  # followed: no helper key


@pytest.mark.parametrize(("setting", "processor", "message"), [
    ("top_k=-1", ("TopKLogitsWarper", -1), "top_k must be a whole number, written without a "
                                           "decimal point (e.g. 8), 0 or more (0: no top-k)"),
    ("repetition_penalty=0", ("RepetitionPenaltyLogitsProcessor", 0.0),
     "repetition_penalty must be a number above 0 (1: no penalty)"),
    ("min_p=2", ("MinPLogitsWarper", 2.0), "min_p must be a number in [0, 1]"),
    ("typical_p=0", ("TypicalLogitsWarper", 0.0), "typical_p must be a number in (0, 1]"),
    ("num_beams=0", None, "num_beams must be a positive whole number"),
    ("max_gen_toks=8.0", None, "max_gen_toks must be a positive whole number, written without a "
                               "decimal point (e.g. 8)"),
])
def test_generation_settings_transformers_refuses_after_the_load_are_refused(setting, processor,
                                                                             message):
    """trial 14: top_k=-1, repetition_penalty=0 and num_beams=0 passed, then transformers'
    ValueError (ZeroDivisionError for the beams) after the model loaded; max_gen_toks=8.0 was
    refused without saying to write 8."""
    import transformers.generation.logits_process as processors

    if processor is not None:  # transformers' own refusal, once the model has loaded
        name, value = processor
        with pytest.raises(ValueError):
            getattr(processors, name)(value)
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE[:2], "--tasks", "bbq_subset_25pct", "--gen_kwargs",
                            f"do_sample=true,temperature=0.7,{setting}"])
    assert str(caught.value).startswith(f"--gen_kwargs {setting}: {message}")
    check_command_line([*BASE[:2], "--tasks", "bbq_subset_25pct", "--gen_kwargs",
                        "do_sample=true,temperature=0.7,top_k=0,repetition_penalty=1.1,"
                        "min_p=0,typical_p=1,num_beams=1,max_gen_toks=8"])  # the edges pass


def test_lm_eval_reads_a_files_cache_requests_as_a_mapping():
    import inspect

    from lm_eval._cli.run import Run

    assert 'cfg.cache_requests.get("cache_requests", False)' in inspect.getsource(Run)


@pytest.mark.parametrize("indices", ["[3, 1]", "[1, 1, 3]"])
def test_samples_out_of_order_are_refused_because_lm_eval_mislabels_them(indices, embedded_lm,
                                                                        tmp_path):
    """trial 15 (found while fixing its `--samples` case): lm-eval runs the selected items in
    the data's order and logs the i-th under the i-th index given, so `[3, 1]` logs item 1's
    answer as doc 3's, and an analysis pairs the wrong items."""
    import json

    from helpers import save_lm_eval_run

    task = "bbq_subset_12p5pct_loglik"
    run = save_lm_eval_run(embedded_lm, task, None, tmp_path / "run", samples={task: [3, 1]})
    logged = {json.loads(line)["doc_id"]: json.loads(line)["doc"]["example_id"] for line in
              next(run.rglob("samples_*.jsonl")).read_text().splitlines()}
    ordered = save_lm_eval_run(embedded_lm, task, None, tmp_path / "ok", samples={task: [1, 3]})
    right = {json.loads(line)["doc_id"]: json.loads(line)["doc"]["example_id"] for line in
             next(ordered.rglob("samples_*.jsonl")).read_text().splitlines()}
    assert logged == {3: right[1], 1: right[3]}  # each item under the other's index
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--samples", f'{{"bbq_subset_25pct_loglik": {indices}}}'])
    assert "is not in ascending order without repeats; lm-eval runs the items in the data's " \
           "order and labels the i-th with the i-th index given" in str(caught.value)
    assert str(caught.value).endswith("give [1, 3]")


def test_gen_kwargs_for_tasks_that_all_score_by_log_likelihood_are_refused():
    """trial 15: `--gen_kwargs temperature=0.5` on a log-likelihood task ran (rc 0); lm-eval
    recorded it in the results config and used it nowhere."""
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--gen_kwargs", "temperature=0.5,do_sample=True"])
    assert str(caught.value) == (
        "--gen_kwargs applies to generation, and bbq_subset_25pct_loglik scores by "
        "log-likelihood (lm-eval would record the setting and use it nowhere): leave "
        "--gen_kwargs out, or run the generative form (bbq_subset_25pct)")
    check_command_line([*GENERATIVE, "--gen_kwargs", "temperature=0.5,do_sample=True"])  # fix
    check_command_line(["--model", "hf-metered", "--tasks", "bbq_subset_25pct_loglik,"
                        "bbq_subset_25pct", "--gen_kwargs", "max_gen_toks=8"])  # one generates


@pytest.mark.parametrize(("value", "fix"), [
    ('{"max_gen_toks": "32"}', "max_gen_toks='32': max_gen_toks must be a number, not text (a "
                               "number in quotes: write 32 without them)"),
    ('{"temperature": "0.7", "do_sample": true}', "not text (a number in quotes: write 0.7 "
                                                  "without them)"),
])
def test_a_json_number_in_quotes_is_told_to_drop_them(value, fix):
    """trial 15: `--gen_kwargs '{"max_gen_toks": "32"}'` got the YAML exponent hint (write
    1.0e+300), which followed was refused again."""
    import json

    with pytest.raises(PreflightError) as caught:
        check_command_line([*GENERATIVE, "--gen_kwargs", value])
    assert str(caught.value).startswith("--gen_kwargs ") and fix in str(caught.value)
    followed = {k: (float(v) if isinstance(v, str) and "." in v else
                    int(v) if isinstance(v, str) else v) for k, v in json.loads(value).items()}
    check_command_line([*GENERATIVE, "--gen_kwargs", json.dumps(followed)])


def test_a_response_cache_of_another_model_or_precision_is_refused(tmp_path):
    """Trial 17 (N17_216, N17_223): a SmolLM2 run (or an int8 run) given the --use_cache path
    of a Gemma (or fp32) run took every answer from the cache, rc 0, reported as its own."""
    from lm_eval_ext.response_cache import owner_path

    cache = tmp_path / "cache" / "responses"
    gemma = [*BASE, "--model_args", "pretrained=gemma3-270m,idle_seconds=0", "--use_cache",
             str(cache)]
    check_command_line(gemma)  # the first run records whose answers the cache holds
    assert json.loads(owner_path(str(cache)).read_text()) == {
        "model": "hf-metered", "answer_args": {"pretrained": "gemma3-270m"}}
    check_command_line([*gemma[:-2], "--batch_size", "4", "--use_cache", str(cache)])  # same
    for other, shown in (("idle_seconds=3", "{}"), ("pretrained=gemma3-270m,precision=int8",
                                                    "{'pretrained': 'gemma3-270m', 'precision': "
                                                    "'int8'}")):
        with pytest.raises(PreflightError) as caught:
            check_command_line([*BASE, "--model_args", other, "--use_cache", str(cache)])
        assert str(caught.value) == (
            f"--use_cache {cache}: the cache holds the answers of another model or settings "
            f"(filled by hf-metered with {{'pretrained': 'gemma3-270m'}}; this run: hf-metered "
            f"with {shown}), and lm-eval keys a cached answer by the request's text alone, so "
            "they would be taken as this run's: give this model and settings a cache path of "
            f"their own (e.g. --use_cache {cache}_2)")
    check_command_line([*BASE, "--model_args", "idle_seconds=3", "--use_cache",
                        f"{cache}_2"])  # followed


def test_a_response_cache_without_a_record_of_its_filler_is_refused(tmp_path):
    """Trial 17 (N17_236): a cache Gemma filled before the record existed was adopted by the
    next run (SmolLM2), which took Gemma's answers and recorded the cache as its own."""
    cache = tmp_path / "responses"
    database = tmp_path / "responses_rank0.db"
    database.write_bytes(b"SQLite format 3\0")  # filled by an earlier run, no record beside it
    with pytest.raises(PreflightError) as caught:
        check_command_line([*BASE, "--use_cache", str(cache)])
    assert str(caught.value) == (
        f"--use_cache {cache}: {database} holds cached answers with no record of the model and "
        "settings that filled them, and lm-eval keys a cached answer by the request's text "
        "alone, so they could be another model's taken as this run's: give a new cache path "
        f"(e.g. --use_cache {cache}_2), or delete responses_rank0.db to start this cache afresh")
    database.unlink()  # followed
    check_command_line([*BASE, "--use_cache", str(cache)])
