"""lm-eval's options that it turns into a traceback after parsing: refused first, in one line.

Each check is held against lm-eval's own code on the same values: what lm-eval's parser,
model or cache would raise on is refused, what it takes is passed (trial 9).
"""

from __future__ import annotations

import os
import types

import pytest

from lm_eval_ext.command_preflight import PreflightError, check_command_line

BASE = ["--model", "hf-metered", "--tasks", "bbq_subset_25pct_loglik"]


@pytest.mark.parametrize("option", ["--model_args", "--gen_kwargs", "--metadata",
                                    "--wandb_config_args", "--hf_hub_log_args"])
@pytest.mark.parametrize("value", ["{bad", '{"a": 1', "{'a': 1}", '{"a": 1}', "a=1", "a={1}",
                                   '{"max_gen_toks": 4}', "[1, {2}]"])
def test_json_options_are_refused_exactly_where_lm_evals_parser_fails(option, value):
    """`--metadata '{bad'` was lm-eval's ValueError traceback from inside its parser."""
    from lm_eval._cli.utils import try_parse_json  # lm-eval's parser reads the first value so

    refused = True
    try:
        check_command_line([*BASE, option, value])
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
    assert not (tmp_path / "new").exists()  # the check leaves no folder behind
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
