"""A comparison whose conditions change several settings is named in the dry run (trial 9)."""

from __future__ import annotations

import yaml

from lm_eval_ext.campaign.confounds import confounded_comparison_lines
from lm_eval_ext.campaign.presets import preset
from lm_eval_ext.campaign.spec import build_spec
from lm_eval_ext.cli import main as cli_main

CONFOUNDED = {"name": "confound", "models": {"smollm2": "idle_seconds=0"},
              "tasks": ["bbq_subset_12p5pct_loglik"], "lm_eval": {"limit": 2},
              "conditions": {"M0": {"model_args": "precision=fp32", "batch_size": 1},
                             "M1": {"model_args": "precision=bf16", "batch_size": 4,
                                    "num_fewshot": 1},
                             "M2": {"model_args": "precision=fp32", "batch_size": 4,
                                    "limit": 1}},
              "compare": {"precision": {"reference": "M0", "runs": ["M1", "M2"]}}}


def test_a_comparison_changing_three_settings_is_named_and_one_change_is_not():
    """M1 changes precision, batch size and few-shot; M2 only the batch size (and, by design,
    its items: compared on the shared ones)."""
    assert confounded_comparison_lines(build_spec(CONFOUNDED)) == [
        "note: compare.precision (smollm2, bbq_subset_12p5pct_loglik): M1 differs from M0 in 3 "
        "settings at once (batch_size, num_fewshot, precision), so its deltas mix them (the "
        "report says so); to measure one change, let the two conditions differ in one setting"]


def test_the_paper_preset_changes_one_setting_per_comparison():
    for path in ("loglik", "generative"):
        assert confounded_comparison_lines(build_spec(preset("paper-stress-test",
                                                             path=path))) == []


def test_the_dry_run_prints_the_note_after_the_plan(tmp_path, capsys):
    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump(CONFOUNDED))
    assert cli_main.main(["campaign", str(spec), "--out", str(tmp_path / "o"), "--dry-run",
                          "--calibration-limit", "0"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("3 cells to run") and lines[-1].startswith(
        "note: compare.precision (smollm2, bbq_subset_12p5pct_loglik): M1 differs from M0 in 3")


def test_a_campaign_switch_written_as_text_is_refused():
    """trial 12: `apply_chat_template: "false"` in a campaign planned a chat template named
    'false' for every cell."""
    import pytest

    from lm_eval_ext.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        build_spec({**CONFOUNDED, "lm_eval": {"apply_chat_template": "false"}})
    assert str(caught.value) == ("lm_eval: apply_chat_template: 'false' is text, which lm-eval "
                                 "reads as a chat template's name; write true or false without "
                                 "quotes")


def test_a_repeat_of_the_reference_is_named_in_the_dry_run_and_the_report():
    """Trial 17 (N17_231): two identical conditions were compared as a protocol change
    ('nothing' differs, a runtime ratio), with no word that the comparison changes nothing."""
    import pandas as pd

    from lm_eval_ext.analysis.report_markdown import _difference_lines

    repeat = {**CONFOUNDED, "conditions": {"M0": {"batch_size": 1}, "M0b": {"batch_size": 1}},
              "compare": {"noise": {"reference": "M0", "runs": ["M0b"]}}}
    assert confounded_comparison_lines(build_spec(repeat)) == [
        "note: compare.noise (smollm2, bbq_subset_12p5pct_loglik): M0b has M0's settings and "
        "items: a repeat, whose deltas and ratios measure run-to-run variation, not a protocol "
        "change (the report says so)"]
    # trial 18 (N18_170): the repeat was planned as a copy of M0 (answers_from), which
    # measures no run-to-run variation at all; a repeat is measured
    from lm_eval_ext.campaign.derivation import plan_derivations

    assert plan_derivations(build_spec(repeat).cells) == {}
    fewer = {**repeat, "conditions": {"M0": {"batch_size": 1, "limit": 8},
                                      "M0b": {"batch_size": 1, "limit": 4}}}
    assert [p.split("__")[1] for p in plan_derivations(build_spec(fewer).cells).values()] == [
        "M0"]  # its first 4 items, not a repeat: still derived
    table = pd.DataFrame([{"run": "M0b", "task": "t", "n_factors": 0, "factors": "",
                           "differences": "nothing"}])
    assert _difference_lines(table)[1] == (
        "- M0b (t): nothing **(a repeat of the reference: it changes no setting, so its deltas "
        "and ratios measure run-to-run variation, not a protocol change)**\n")


def test_a_derived_cell_whose_parent_is_in_another_shard_says_it_may_run_in_full(tmp_path,
                                                                                 capsys):
    """Trial 19 (N19_194): shard 2/2's dry run planned M4 as derived from M0, which sits in
    shard 1/2: if shard 2 starts first, M4 runs in full (docs/campaigns.md)."""
    derived = {"name": "d", "models": {"smollm2": "idle_seconds=0"},
               "tasks": ["bbq_subset_12p5pct_loglik"],
               "conditions": {"M0": {"batch_size": 1, "limit": 40},
                              "M4": {"batch_size": 1, "limit": 24}}}
    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump(derived))
    lines = {}
    for shard in ("1/1", "2/2"):
        assert cli_main.main(["campaign", str(spec), "--out", str(tmp_path / "o"), "--dry-run",
                              "--calibration-limit", "0", "--shard", shard]) == 0
        [lines[shard]] = [x for x in capsys.readouterr().out.splitlines() if "__M4__" in x]
    assert "(derived: re-check of 10 items)  lm_eval" in lines["1/1"]  # its parent runs here
    assert ("(derived: re-check of 10 items, if its parent smollm2__M0__bbq_subset_12p5pct_"
            "loglik (another shard's) is done when it starts; else it runs in full)") in lines[
        "2/2"]
