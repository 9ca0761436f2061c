"""Campaign and grid files lose nothing silently and name each mistake as it is.

A YAML mapping keeps the last of two equal keys, so two ``M0:`` conditions ran one cell; here
each case is one line (exit code 2) before any folder is made.
"""

from __future__ import annotations

from pathlib import Path

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
     "task 'bbq_subset_12p5pct_loglik' is listed twice in the tasks of condition M0 (its own "
     "tasks:, else the campaign's)"),
    ("tasks: [bbq_subset_12p5pct_loglik]\nconditions: {M0: batch_size=1}\n",
     "conditions.M0: expected a mapping of lm_eval options (e.g. M0: {batch_size: 8}), got "
     "'batch_size=1'"),
])
def test_cell_clashes_and_string_conditions_are_named_as_what_they_are(text, message, tmp_path,
                                                                      capsys):
    assert message in _refused("campaign", text, tmp_path, capsys)


# -- the dry run checks what the run would; cells of other limits are compared -------

@pytest.mark.parametrize(("text", "message"), [
    ("tasks: [bbq_subset_12p5pct_loglik]\nconditions: {M0: {}, M1: {batch_size: 4}}\n"
     "compare: {q: {reference: M0, runs: [M0]}}\n",
     "compare.q: M0 is the reference and one of its runs, so it would be compared with itself; "
     "list other conditions in runs (e.g. runs: [M1])"),
    ("models: {m: answers_from=/nonexistent/results_x.json}\n"
     "tasks: [bbq_subset_12p5pct_loglik]\nconditions: {M0: {}}\n",
     "cell m__M0__bbq_subset_12p5pct_loglik: hf-metered: answers_from=/nonexistent/"
     "results_x.json: no such file; pass the parent run's results_*.json"),
    ("tasks: [bbq_subset_12p5pct_loglik]\nconditions: {M0: {limit: true}}\n",
     "conditions.M0: limit: true: give a number of items (e.g. 8) or a fraction of each task "
     "in (0, 1) (e.g. 0.25), not true/false"),
    ("models: {g: pretrained=gemma3-270m}\ntasks: [bbq_subset_12p5pct_loglik]\n"
     "conditions: {M0: {apply_chat_template: true}}\n",  # trial 17 (N17_171): failed the cell
     "cell g__M0__bbq_subset_12p5pct_loglik: --apply_chat_template: pretrained=gemma3-270m has "
     "no chat template (a base model: its tokenizer defines none), so lm-eval cannot apply one; "
     "leave --apply_chat_template out (its prompts then go as they are) (in the campaign file, "
     "each lm_eval option is its flag's name without --)"),
    ("models: {s: idle_seconds=0, g: pretrained=gemma3-270m}\n"
     "tasks: [bbq_subset_12p5pct_loglik]\nlm_eval: {use_cache: shared/db}\n"
     "conditions: {M0: {}}\n",  # trial 17 (N17_219): the Gemma cell took SmolLM2's answers
     "cells s__M0__bbq_subset_12p5pct_loglik and g__M0__bbq_subset_12p5pct_loglik share "
     "use_cache: shared/db but not the model and settings their answers depend on (hf-metered "
     "with {}; hf-metered with {'pretrained': 'gemma3-270m'}), and lm-eval keys a cached answer "
     "by the request's text alone: leave use_cache out (a campaign resumes from its finished "
     "cells without it), or give it only to conditions whose cells load one model with one "
     "setting"),
    ("tasks: [bbq_subset_12p5pct_loglik]\nconditions: {M0: {metadata: {template_teir: cot}}}\n",
     "cell embedded__M0__bbq_subset_12p5pct_loglik: --metadata key 'template_teir' is not a task "
     "setting; did you mean 'template_tier'?"),
])
def test_the_dry_run_refuses_what_the_run_would(text, message, tmp_path, capsys):
    """compare: {q: {reference: M0, runs: [M0]}} and answers_from=/nonexistent passed
    --dry-run; `limit: true` ran 1 item."""
    assert message in _refused("campaign", text, tmp_path, capsys)


def test_the_dry_run_checks_a_user_set_parent_as_hf_metered_would(tmp_path, capsys):
    """Trial 17 (N17_83): a condition's own answers_from, its parent run with idle_seconds=0
    and the cell without: --dry-run passed, the run failed the cell at load (its console line
    cut mid-word)."""
    import json

    parent = tmp_path / "b1" / "results_2026-01-01T00-00-00.000000.json"
    parent.parent.mkdir()
    parent.write_text(json.dumps({"config": {
        "model_args": "idle_seconds=0", "hf_metered": {"model_class": "hf-metered"},
        "metering": {"batch_size": 1}}, "configs": {}}))
    text = (f"models: {{m: answers_from={parent}}}\n"
            "tasks: [bbq_subset_12p5pct_loglik]\nconditions: {M0: {}}\n")
    assert _refused("campaign", text, tmp_path, capsys) == (
        f"lm-eval-ext: error: cell m__M0__bbq_subset_12p5pct_loglik: hf-metered: "
        f"answers_from={parent}: model args differ from the parent's (idle_seconds: 0.0 "
        "(parent) vs <absent> (this run); a derived run's joules are its parent's, measured "
        "with the parent's metering args); run with the parent's model args, or without "
        "answers_from")


def test_conditions_of_other_limits_are_compared_on_their_shared_items(tmp_path, data_dir):
    """M0 `limit: 24` against M4 `limit: 16` (the derived-cell docs' shape) failed at every
    analysis: "evaluated different items ... or pass --intersection", which `campaign` lacks."""
    import numpy as np

    from lm_eval_ext.analysis.report import analyze_to_folder
    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.campaign.spec import build_spec
    from lm_eval_ext.data.instrument import load_membership

    task = "bbq_subset_12p5pct_loglik"
    spec = build_spec({"tasks": [task], "conditions": {"M0": {"limit": 24},
                                                        "M4": {"limit": 16}}})
    rows = load_membership("12p5pct").rows
    answers = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    results = {cell.cell_id: str(write_run(tmp_path / cell.condition, task,
                                           rows[:cell.options["limit"]], answers))
               for cell in spec.cells}
    [job], skipped = spec.analysis_jobs(results)
    assert job.intersection and not skipped
    result, paths = analyze_to_folder(job.reference, list(job.runs), tmp_path / "analysis",
                                      intersection=job.intersection, n_resamples=100,
                                      mc_draws=10, progress=False)
    assert result.n_items == 16 and result.dropped == {"M0": 8, "M4": 0}
    assert ("Paired items: 16 in 4 natural units (the items all runs share; left "
            "out per run: {'M0': 8, 'M4': 0})") in paths["report_md"].read_text()


def test_a_campaigns_comparison_on_shared_items_says_so_on_the_console(tmp_path, data_dir,
                                                                      capsys):
    """Conditions of other limits were compared on their shared items with nothing said on the
    console (only report.md told it)."""
    import numpy as np

    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.campaign.analysis import run_comparisons
    from lm_eval_ext.campaign.spec import build_spec
    from lm_eval_ext.campaign.store import CampaignFolder
    from lm_eval_ext.data.instrument import load_membership

    task = "bbq_subset_12p5pct_loglik"
    spec = build_spec({"tasks": [task], "conditions": {"M0": {"limit": 24},
                                                        "M4": {"limit": 16}}})
    rows = load_membership("12p5pct").rows
    answers = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    records = {cell.cell_id: {"output_path": str(write_run(
        tmp_path / "cells" / cell.condition, task, rows[:cell.options["limit"]], answers,
        batch_size=1 if cell.condition == "M0" else 2).relative_to(tmp_path))}
        for cell in spec.cells}
    [report] = run_comparisons(spec, CampaignFolder(tmp_path), records, n_resamples=100,
                               mc_draws=10, seed=0, progress=False)
    [line] = [x for x in capsys.readouterr().out.splitlines() if "every run holds" in x]
    assert line.endswith(": compared on the 16 items every run holds (left out: {'M0': 8, "
                         "'M4': 0})") and report.is_file()


def test_a_comparison_of_disjoint_items_is_named_and_the_others_still_analysed(tmp_path,
                                                                               data_dir):
    """Trial 19 (N19_180): two BBQ memberships whose --limit slices share no item ran, then
    the campaign stopped at the analysis with 'compare runs of the same benchmark' (both were
    BBQ) and wrote no other comparison or summary."""
    import numpy as np

    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.campaign.analysis import ComparisonsFailed, run_comparisons
    from lm_eval_ext.campaign.spec import build_spec
    from lm_eval_ext.campaign.store import CampaignFolder
    from lm_eval_ext.data.instrument import load_membership

    task = "bbq_subset_12p5pct_loglik"
    other = "bbq_subset_12p5pct_r2_loglik"  # another membership: its first items, not M0's
    spec = build_spec({"tasks": [task], "conditions": {"M0": {"limit": 8}, "M1": {
        "limit": 8, "tasks": [other]}, "M2": {"limit": 8}},
                       "compare": {"apart": {"reference": "M0", "runs": ["M1"]},
                                   "alike": {"reference": "M0", "runs": ["M2"]}}})
    rows = load_membership("12p5pct").rows
    answers = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    part = {"M0": slice(0, 8), "M1": slice(8, 16), "M2": slice(0, 8)}  # M1: other items
    records = {cell.cell_id: {"output_path": str(write_run(
        tmp_path / "cells" / cell.condition, cell.task, rows[part[cell.condition]],
        answers[part[cell.condition]], batch_size={"M0": 1, "M1": 2, "M2": 4}[
            cell.condition]).relative_to(tmp_path))} for cell in spec.cells}
    with pytest.raises(ComparisonsFailed) as failed:
        run_comparisons(spec, CampaignFolder(tmp_path), records, n_resamples=100,
                        mc_draws=10, seed=0, progress=False)
    [line] = failed.value.failed
    assert line.startswith(f"{Path('analysis', 'embedded', 'apart')}: the runs share no items")
    assert line.endswith("they are of one benchmark, but their items (each task's membership "
                         "and --limit slice) do not overlap: evaluate them on shared items (one "
                         "task, or a --limit or --samples that reaches the same items)")
    [report] = failed.value.reports  # the comparison after it, analysed
    assert report == tmp_path / "analysis" / "embedded" / "alike" / "report.md"


def test_a_yaml_merge_key_is_read_as_yaml_reads_it(tmp_path):
    """trial 13: `M1: {<<: *b, batch_size: 4}` (valid YAML, read by yaml.safe_load) was "not
    valid YAML ... no constructor for tag:yaml.org,2002:merge" in a campaign or --config file,
    and a traceback in an include-path task file."""
    import yaml

    from lm_eval_ext.campaign.yaml_file import read_yaml
    from lm_eval_ext.errors import ConfigError
    from lm_eval_ext.lm_eval_inputs import task_content_problem

    text = ("models: {smollm2: ''}\ntasks: [bbq_subset_12p5pct_loglik]\nconditions:\n"
            "  M0: &b {batch_size: 1, limit: 8}\n  M1: {<<: *b, batch_size: 4}\n")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert read_yaml(path) == yaml.safe_load(text)
    assert read_yaml(path)["conditions"]["M1"] == {"batch_size": 4, "limit": 8}
    path.write_text(text.replace("batch_size: 4}", "batch_size: 4, batch_size: 2}"))
    with pytest.raises(ConfigError, match=r"key 'batch_size' appears twice in one mapping "
                                          r"\(lines 5 and 5\)"):
        read_yaml(path)  # a key repeated beside the merge is still one
    task = tmp_path / "t.yaml"
    task.write_text("task: t\ndataset_path: json\nmetadata: {<<: {version: 1.0}}\n")
    assert task_content_problem(task, yaml.safe_load(task.read_text())) is None
