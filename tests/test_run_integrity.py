"""A run's samples must be the lines its results file was written from.

Each case edits a real-format run as a user might (mixing lines of two runs, another task's
lines, a renamed samples file, a duplicated or edited line, a copied folder) and expects one
line naming the file and, where one line is at fault, that line.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from helpers import run_cli

from lm_eval_ext.analysis import analyze
from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.loader import load_runs
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_membership

TASK = "bbq_subset_25pct_loglik"
FAST = {"n_resamples": 200, "mc_draws": 10, "progress": False}


@pytest.fixture()
def runs(tmp_path):
    rows = load_membership("25pct").rows
    rng = np.random.default_rng(0)
    base = simulate_predictions(rows, 0.5, rng)
    ref = write_run(tmp_path / "fp32", TASK, rows, base, precision="fp32")
    bf16 = write_run(tmp_path / "bf16", TASK, rows,
                     simulate_predictions(rows, 0.5, rng, base=base, flip_rate=0.3),
                     precision="bf16")
    other = write_run(tmp_path / "other", "bbq_subset_12p5pct_loglik",
                      load_membership("12p5pct").rows, simulate_predictions(
                          load_membership("12p5pct").rows, 0.5, rng))
    return ref, bf16, other


def _samples(results_path):
    return next(results_path.parent.glob("samples_*.jsonl"))


def _lines(results_path):
    return _samples(results_path).read_text().splitlines()


def _write(results_path, lines):
    _samples(results_path).write_text("\n".join(lines) + "\n")


def test_lines_of_another_run_of_the_same_items_are_refused(runs):
    """6 lines of the fp32 file replaced by the bf16 run's lines of the same items."""
    ref, bf16, _ = runs
    mixed = _lines(ref)
    mixed[:6] = _lines(bf16)[:6]
    assert mixed != _lines(ref)
    _write(ref, mixed)
    with pytest.raises(AnalysisInputError, match=r"its lines give \w+ = .* but the results file "
                                                 r"reports .*mixed from another run"):
        load_runs([ref])


def test_a_whole_samples_file_of_another_run_renamed_is_refused(runs):
    ref, bf16, _ = runs
    shutil.copy(_samples(bf16), _samples(ref))
    with pytest.raises(AnalysisInputError, match="but the results file reports"):
        analyze(ref.parent, [bf16.parent], **FAST)


def test_lines_of_another_task_are_refused_and_named(runs):
    ref, _, other = runs
    lines = _lines(ref)
    foreign = json.loads(_lines(other)[0])
    foreign["doc_id"] = 3  # in the place of the line it replaces
    lines[3] = json.dumps(foreign)
    _write(ref, lines)
    with pytest.raises(AnalysisInputError, match="order differ from those the results file "
                                                 "hashed"):
        load_runs([ref])
    generative = json.loads(lines[3])
    generative["metrics"] = ["acc", "parse_failure_rate"]
    lines[3] = json.dumps(generative)
    _write(ref, lines)
    with pytest.raises(AnalysisInputError, match="line 4 logs the metrics acc, "
                                                 "parse_failure_rate, not"):
        load_runs([ref])


def test_a_duplicated_line_is_named(runs):
    ref, _, _ = runs
    lines = _lines(ref)
    _write(ref, [*lines[:10], lines[4], *lines[10:]])
    with pytest.raises(AnalysisInputError, match="line 11 repeats doc_id 4 of line 5 "
                                                 r"\(a duplicated line\)"):
        load_runs([ref])


def test_lines_without_doc_id_are_named_as_such(runs):
    """doc_id renamed in every line was "line 2 repeats doc_id None of line 1" (trial 7)."""
    ref, _, _ = runs
    lines = [line.replace('"doc_id":', '"docid":', 1) for line in _lines(ref)]
    _write(ref, lines)
    with pytest.raises(AnalysisInputError, match="line 1 has no doc_id "
                                                 r"\(every line lm-eval writes has one\)"):
        load_runs([ref])


def test_an_edited_line_is_named(runs):
    ref, _, _ = runs
    lines = _lines(ref)
    edited = json.loads(lines[7])
    edited["doc"]["category"] = "Age" if edited["doc"]["category"] != "Age" else "Religion"
    lines[7] = json.dumps(edited)
    _write(ref, lines)
    with pytest.raises(AnalysisInputError, match="line 8's hashes do not match its own doc"):
        load_runs([ref])


def test_a_copied_run_is_not_a_comparison_and_runs_csv_fingerprints_every_file(runs, tmp_path):
    ref, bf16, _ = runs
    copy = tmp_path / "copy"
    shutil.copytree(ref.parent, copy)
    with pytest.raises(AnalysisInputError, match="are copies of one run"):
        analyze(ref.parent, [copy], **FAST)
    out = tmp_path / "analysis"
    proc = run_cli(["lm-eval-ext", "analyze", "--reference", str(ref.parent), "--runs",
                    str(bf16.parent), "--out", str(out), "--no-progress", "--bootstrap", "200",
                    "--mc-draws", "10"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_csv(out / "runs.csv").set_index("precision")
    for precision, results in (("fp32", ref), ("bf16", bf16)):
        row = table.loc[precision]
        assert row["results_sha256"] == hashlib.sha256(results.read_bytes()).hexdigest()
        assert row["samples_sha256"] == f"{TASK}:" + hashlib.sha256(
            _samples(results).read_bytes()).hexdigest()


def test_mde_refuses_runs_of_different_designs_and_a_run_against_itself(runs, tmp_path):
    from lm_eval_ext.analysis.empirical_power import paired_inputs_from_runs

    ref, bf16, other = runs
    with pytest.raises(AnalysisInputError, match="differ in tasks bbq_subset_25pct_loglik vs "
                                                 "bbq_subset_12p5pct_loglik"):
        paired_inputs_from_runs(ref.parent, other.parent)
    with pytest.raises(AnalysisInputError, match="are the same folder"):
        paired_inputs_from_runs(ref.parent, ref.parent)
    assert paired_inputs_from_runs(ref.parent, bf16.parent).m == 500


def test_compare_harness_refuses_one_name_or_one_path_twice(runs):
    from lm_eval_ext.cross_harness import compare_harnesses, read_harness_run, read_harness_runs

    ref, bf16, _ = runs
    with pytest.raises(AnalysisInputError, match="the name lm_eval is given twice"):
        compare_harnesses([read_harness_run(f"lm_eval={ref.parent}"),
                           read_harness_run(f"lm_eval={bf16.parent}")])
    with pytest.raises(AnalysisInputError, match="the path .* is given twice"):
        read_harness_runs([f"lm_eval={ref.parent}", f"lm_eval:again={ref.parent}"])
    # two bare folders: "the path <cwd> is given twice" (trial 6); their form is said first
    with pytest.raises(AnalysisInputError) as error:
        read_harness_runs([str(ref.parent), str(bf16.parent)])
    assert str(error.value) == (f"compare-harness: '{ref.parent}': write HARNESS=PATH with "
                                "HARNESS one of lm_eval, inspect, helm (e.g. "
                                f"lm_eval={ref.parent} for an lm-eval output)")
    followed = read_harness_runs([f"lm_eval={ref.parent}", f"lm_eval:b={bf16.parent}"])
    assert [run.name for run in followed] == ["lm_eval", "b"]
