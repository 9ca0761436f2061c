"""Issue 50: campaign and grid files lose nothing silently and name each mistake as it is.

A YAML mapping keeps the last of two equal keys, so two ``M0:`` conditions ran one cell; here
each case is one line (exit code 2) before any folder is made.
"""

from __future__ import annotations

import pytest

from lm_eval_ext.cli import main as cli_main

CAMPAIGN = """\
name: twice
models:
  smollm2: idle_seconds=0
tasks: [bbq_subset_12p5pct_loglik]
conditions:
  M0: {batch_size: 1}
  M1: {batch_size: 4}
  M0: {batch_size: 8}
"""

GRID = """\
name: envelope
models:
  smollm2: precision=bf16
  gemma: precision=int8
  smollm2: precision=fp32
benchmarks: [bbq_subset_12p5pct]
"""


def _refused(command: str, text: str, tmp_path, capsys) -> str:
    spec = tmp_path / f"{command}.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    code = cli_main.main([command, str(spec), "--out", str(out), "--dry-run",
                          "--calibration-limit", "0"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert not out.exists()
    return lines[0]


def test_a_condition_given_twice_names_both_lines(tmp_path, capsys):
    line = _refused("campaign", CAMPAIGN, tmp_path, capsys)
    assert "campaign.yaml: key 'M0' appears twice in one mapping (lines 6 and 8)" in line


def test_a_grid_model_given_twice_names_both_lines(tmp_path, capsys):
    line = _refused("grid", GRID, tmp_path, capsys)
    assert "grid.yaml: key 'smollm2' appears twice in one mapping (lines 3 and 5)" in line


@pytest.mark.parametrize(("text", "message"), [
    ("models: {a__b: '', a: ''}\ntasks: [bbq_subset_12p5pct_loglik]\n"
     "conditions: {c: {}, b__c: {}}\n",
     "model 'a__b' with condition 'c' and model 'a' with condition 'b__c' both make cell "
     "'a__b__c__bbq_subset_12p5pct_loglik' (labels are joined with '__')"),
    ("tasks: [bbq_subset_12p5pct_loglik]\n"
     "conditions: {M0: {tasks: [bbq_subset_12p5pct_loglik, bbq_subset_12p5pct_loglik]}}\n",
     "conditions.M0: task 'bbq_subset_12p5pct_loglik' is listed twice"),
    ("tasks: [bbq_subset_12p5pct_loglik]\nconditions: {M0: batch_size=1}\n",
     "conditions.M0: expected a mapping of lm_eval options (e.g. M0: {batch_size: 8}), got "
     "'batch_size=1'"),
])
def test_cell_clashes_and_string_conditions_are_named_as_what_they_are(text, message, tmp_path,
                                                                      capsys):
    assert message in _refused("campaign", text, tmp_path, capsys)
