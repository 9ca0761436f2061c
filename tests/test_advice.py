"""Issue 50: advice that works when followed; each message is checked by doing what it says.

A cut samples file was told to "delete the broken line" (then the line count failed); a samples
folder without its results file was told to pass an lm_eval output folder (it was one).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from lm_eval_ext.analysis import AnalysisInputError
from lm_eval_ext.analysis.loader import load_runs
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_membership


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir):
    rows = load_membership("12p5pct").rows
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    return write_run(tmp_path_factory.mktemp("run") / "run", "bbq_subset_12p5pct_loglik", rows,
                     preds)


def test_a_samples_file_cut_while_written_is_told_to_rerun(run, tmp_path):
    folder = tmp_path / "cut"
    shutil.copytree(run.parent, folder)
    samples = next(folder.glob("samples_*.jsonl"))
    data = samples.read_bytes()
    samples.write_bytes(data[:8192])  # what a full disk left (lm-eval writes in 8 KiB blocks)
    with pytest.raises(AnalysisInputError) as error:
        load_runs([folder])
    message = str(error.value)
    assert "was cut while lm-eval wrote it (a full disk or a killed run)" in message
    assert "Rerun the evaluation with --log_samples" in message
    assert "delete" not in message
    # the old advice, followed: the remaining items fail the count check, so it was wrong
    samples.write_bytes(data[:8192].rpartition(b"\n")[0] + b"\n")
    with pytest.raises(AnalysisInputError, match="holds 3 samples but its results file reports 248"):
        load_runs([folder])


def test_a_samples_folder_without_its_results_file_says_so(run, tmp_path):
    folder = tmp_path / "no_results"
    shutil.copytree(run.parent, folder)
    next(folder.glob("results_*.json")).unlink()
    with pytest.raises(AnalysisInputError) as error:
        load_runs([tmp_path])
    assert str(error.value) == (
        f"{folder} holds lm-eval samples files but no results_*.json: lm-eval writes the "
        "results file beside them, so the run stopped before writing it or the file was "
        "moved; pass the folder that holds both, or rerun the evaluation")
