"""A results file whose metering block was damaged after the run: impossible seconds and
joules are no measurement (flagged), and a block of the wrong shape is one line (trial 12)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.cli import main as cli_main
from lm_eval_ext.data.instrument import load_membership

TASK = "bbq_instrument_loglik"


def _runs(tmp_path, seconds, joules):
    rows = load_membership("instrument").rows[:40]
    answers = simulate_predictions(rows, 0.6, np.random.default_rng(0))
    write_run(tmp_path / "ref", TASK, rows, answers, energy_joules=400.0, inference_seconds=4.0)
    return write_run(tmp_path / "run", TASK, rows, answers, precision="int8",
                     energy_joules=joules, inference_seconds=seconds)


@pytest.mark.parametrize(("seconds", "joules", "flags"), [
    (-5.0, 100.0, ["inference_seconds_impossible"]),
    (0.0, 100.0, ["inference_seconds_impossible"]),
    (5e-324, 100.0, ["inference_seconds_impossible"]),
    (2.0, -100.0, ["energy_joules_impossible"]),
    (2.0, 1e-12, ["energy_joules_impossible"]),
])
def test_impossible_seconds_or_joules_are_flagged_and_not_reported(seconds, joules, flags,
                                                                   tmp_path, capsys):
    """inference_seconds -5 gave a runtime saving of 104.8%, 0 and 5e-324 a saving of 100%,
    energy -100 J a joules per item of -12.5, each without a word."""
    _runs(tmp_path, seconds, joules)
    assert cli_main.main(["analyze", "--reference", f"ref={tmp_path / 'ref'}", "--runs",
                          f"run={tmp_path / 'run'}", "--out", str(tmp_path / "an"),
                          "--bootstrap", "100", "--mc-draws", "10", "--no-progress"]) == 0
    runs = pd.read_csv(tmp_path / "an" / "runs.csv").set_index("run")
    column = "inference_seconds" if "seconds" in flags[0] else "energy_joules"
    assert pd.isna(runs.loc["run", column]) and runs.loc["ref", column] > 0
    assert set(flags) <= set(str(runs.loc["run", "energy_flags"]).split(","))
    kind = "runtime" if column == "inference_seconds" else "energy"
    assert pd.isna(runs.loc["run", f"{kind}_ratio"])  # no ratio of an impossible value
    assert pd.isna(runs.loc["run", f"{kind}_saving_pct"])


@pytest.mark.parametrize("block", ['"fast"', "[1, 2]"])
def test_a_metering_block_of_the_wrong_shape_is_one_line(block, tmp_path, capsys):
    """config.metering a string was an AttributeError bug line in analyze, mde and
    compare-harness."""
    results = _runs(tmp_path, 2.0, 100.0)
    data = json.loads(results.read_text())
    data["config"]["metering"] = json.loads(block)
    results.write_text(json.dumps(data))
    code = cli_main.main(["mde", "--runs", str(tmp_path / "ref"), str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        f"lm-eval-ext: error: {results}: config.metering is a {type(json.loads(block)).__name__}"
        ", not the block hf-metered writes: the file was damaged after the run; pass the run's "
        "own file, or rerun the evaluation"]
