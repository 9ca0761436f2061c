"""Input the third new-user trial found ending in a traceback, a silent result or failing advice.

Each case is one line naming what was wrong and the fix (and the fix, followed, works); the
cases that need a real lm-eval process are in test_console_autoload.py (marked slow).
"""

from __future__ import annotations

import pytest

from lm_eval_ext.campaign.preflight import check_cells
from lm_eval_ext.campaign.sequential_evaluation import plan_looks
from lm_eval_ext.campaign.spec import build_spec
from lm_eval_ext.campaign.yaml_file import read_yaml
from lm_eval_ext.cli import main as cli_main
from lm_eval_ext.errors import ConfigError
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
        "again (a campaign resumes from its finished cells)")


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
