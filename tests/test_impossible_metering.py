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


@pytest.mark.parametrize("key", ["metering", "hf_metered"])
@pytest.mark.parametrize("block", ['"fast"', "[1, 2]"])
def test_a_metering_block_of_the_wrong_shape_is_one_line(key, block, tmp_path, capsys):
    """config.metering a string was an AttributeError bug line in analyze, mde and
    compare-harness; config.hf_metered a string (trial 15) made the run's card another
    model ('hf-metered', revision main), rc 0."""
    results = _runs(tmp_path, 2.0, 100.0)
    data = json.loads(results.read_text())
    data["config"][key] = json.loads(block)
    results.write_text(json.dumps(data))
    code = cli_main.main(["mde", "--runs", str(tmp_path / "ref"), str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        f"lm-eval-ext: error: {results}: config.{key} is a {type(json.loads(block)).__name__}"
        ", not the block hf-metered writes: the file was damaged after the run; pass the run's "
        "own file, or rerun the evaluation"]


def _edit(results, wall=None, **metering):
    data = json.loads(results.read_text())
    data["config"]["metering"].update(metering)
    if wall is not None:
        data["total_evaluation_time_seconds"] = str(wall)
    results.write_text(json.dumps(data))


@pytest.mark.parametrize(("seconds", "joules", "edit", "flag", "column"), [
    (1e300, 100.0, {"wall": 12.0}, "inference_seconds_impossible", "inference_seconds"),
    (11.7, 1e300, {}, "energy_joules_impossible", "energy_joules"),
    (11.7, 2e-9, {}, "energy_joules_impossible", "energy_joules"),  # 0.17 nW
    (11.7, 100.0, {"forward_share": 5.0}, "forward_share_impossible", "forward_share"),
    # trial 15: with the seconds damaged too, 1e12 J had no window to be held to
    (1e6, 1e12, {"wall": 12.0}, "energy_joules_impossible", "energy_joules"),
    (11.7, 100.0, {"inference_seconds_se": -1.0}, "inference_seconds_se_impossible",
     "inference_seconds_se"),
])
def test_values_no_run_can_measure_are_flagged_not_reported(seconds, joules, edit, flag, column,
                                                             tmp_path):
    """trial 13: inference seconds 1e300 in a 12 s evaluation, 1e300 J or 2e-9 J over 11.7 s,
    a forward share of 5 and a standard error of -1 were all used as measured, rc 0."""
    results = _runs(tmp_path, seconds, joules)
    _edit(results, **edit)
    assert cli_main.main(["analyze", "--reference", f"ref={tmp_path / 'ref'}", "--runs",
                          f"run={tmp_path / 'run'}", "--out", str(tmp_path / "an"),
                          "--bootstrap", "100", "--mc-draws", "10", "--no-progress"]) == 0
    runs = pd.read_csv(tmp_path / "an" / "runs.csv").set_index("run")
    assert pd.isna(runs.loc["run", column])
    assert flag in str(runs.loc["run", "energy_flags"]).split(",")
    if column in ("inference_seconds", "energy_joules"):
        kind = "runtime" if column == "inference_seconds" else "energy"
        assert pd.isna(runs.loc["run", f"{kind}_ratio"])


def test_the_bounds_keep_every_power_a_meter_can_read():
    """A milliwatt to 100 kW over the window, and inference within the evaluation's wall time
    (1% and a second of slack), are kept; a derived run's seconds are exempt from the wall."""
    from lm_eval_ext.metering.plausibility import POWER_RANGE_W, run_cost

    low, high = POWER_RANGE_W
    for watts, kept in ((low, True), (low * 0.99, False), (high, True), (high * 1.01, False)):
        cost = run_cost({"inference_seconds": 10.0, "energy_joules": 10.0 * watts}, 20.0)
        assert (cost.energy_joules is not None) is kept, watts
    assert run_cost({"inference_seconds": 20.0 * 1.01 + 1.0}, 20.0).inference_seconds is not None
    assert run_cost({"inference_seconds": 20.0 * 1.01 + 1.1}, 20.0).impossible == (
        "inference_seconds",)
    assert run_cost({"inference_seconds": 500.0}, 20.0, derived=True).inference_seconds == 500.0
    assert run_cost({"inference_seconds": 500.0}, None).inference_seconds == 500.0
    wall_top = high * (20.0 * 1.01 + 1.0)  # seconds impossible: joules held to the wall time
    for joules, kept in ((wall_top, True), (wall_top * 1.01, False)):
        cost = run_cost({"inference_seconds": 1e6, "energy_joules": joules}, 20.0)
        assert (cost.energy_joules is not None) is kept, joules
    assert run_cost({"energy_joules": 1e12}, 20.0, derived=True).energy_joules == 1e12
