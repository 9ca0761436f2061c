"""Joules you can publish: an idle baseline that brackets the work, no impossible value printed,
an interval on every energy ratio, and the execution mode of each side named."""

import json
import math
import random
import statistics

import pytest
from helpers import Clock, FakeNvml
from scipy import stats

from lm_eval_ext.metering import EnergyMeter, InferenceLedger, Metering, NvmlSource
from lm_eval_ext.metering.idle import IdleBaseline, IdlePower, idle_correction
from lm_eval_ext.metering.power_samples import PowerSampler
from lm_eval_ext.metering.uncertainty import (
    RUN_TO_RUN_CV_JOULES,
    RUN_TO_RUN_CV_SECONDS,
    Slice,
    WithinRunError,
    joined,
    ratio_interval,
)


def _meter(counters_mj, times):
    nvml = FakeNvml({"idx0": counters_mj})
    return EnergyMeter(NvmlSource([0], nvml=nvml, uuid_of=lambda i: None), sync=lambda: None,
                       clock=Clock(*times))


def _idle_edges(start_j, watts, start_s, seconds=1.0, intervals=2):
    """Counter (mJ) and clock values of one idle sample at ``watts`` in ``intervals`` steps."""
    step = seconds / intervals
    counters = [round(1000 * (start_j + watts * step * k)) for k in range(intervals + 1)]
    return counters, [start_s + step * k for k in range(intervals + 1)]


def _run_with_idle(before_w, after_w, window_j, window_s):
    """Idle sample, one 1-task window, idle sample after; the ``config.metering`` block."""
    c1, t1 = _idle_edges(0.0, before_w, 0.0)
    start = c1[-1] / 1000
    c2, t2 = _idle_edges(start + window_j, after_w, 1.0 + window_s)
    meter = _meter([*c1, c1[-1], round(1000 * (start + window_j)), *c2],
                   [*t1, 1.0, 1.0 + window_s, *t2])
    meter.measure_idle(1.0, sleep=lambda s: None, intervals=2)
    metering = Metering(meter, idle_after_seconds=1.0)
    metering.meter.measure_idle = _patched_sleep(meter.measure_idle)
    with metering.ledger.measure("t", "loglikelihood", 10):
        pass
    return metering.report({})


def _patched_sleep(measure):
    def call(seconds, **kwargs):
        return measure(seconds, sleep=lambda s: None, **kwargs)
    return call


def test_a_window_below_its_idle_baseline_is_not_a_number():
    # the M2: idle 130 W before and after, the window drew 128.2 W for 964.6 s
    block = _run_with_idle(130.0, 130.0, 128.2 * 964.6, 964.6)
    assert block["energy_joules"] == pytest.approx(128.2 * 964.6)
    assert block["energy_joules_idle_corrected"] is None
    assert block["idle_share"] is None
    assert "idle_corrected_below_zero" in block["flags"]
    assert "128.2 W" in block["energy_joules_idle_corrected_reason"]
    assert "beyond the baseline's uncertainty" in block["energy_joules_idle_corrected_reason"]
    task = block["per_task"]["t"]
    assert task["energy_joules_idle_corrected"] is None and task["idle_share"] is None
    text = json.dumps(block)
    assert "-1" not in text.split('"energy_joules_idle_corrected":')[1][:3]


def test_a_drifting_idle_baseline_widens_its_uncertainty_and_is_flagged():
    # idle 100 W before the work and 130 W after it: the baseline is 115 W, and one more
    # reading could be anywhere between: SD between samples 21.2 W (30 / sqrt 2)
    block = _run_with_idle(100.0, 130.0, 300.0 * 100.0, 100.0)
    idle = block["idle_power"]
    assert idle["watts"] == pytest.approx(115.0)
    assert idle["between_sd_watts"] == pytest.approx(30 / math.sqrt(2))
    assert [s["when"] for s in idle["samples"]] == ["before", "after"]
    assert "idle_drift" in block["flags"]
    assert block["energy_joules_idle_corrected"] == pytest.approx(300.0 * 100 - 115.0 * 100)
    # the sample before alone would have claimed an SE of 0 W (constant sub-intervals)
    assert block["energy_joules_idle_corrected_se"] == pytest.approx(100 * 30 / math.sqrt(2))


def test_one_idle_sample_is_flagged_as_such():
    baseline = IdleBaseline((IdlePower({0: 120.0}, {0: 2.0}, 3.0, 6),))
    assert baseline.flags() == ["idle_sampled_once"]
    assert baseline.se_watts == pytest.approx(2.0 / math.sqrt(6))


@pytest.mark.parametrize(("joules", "expect_number", "flags"), [
    (1000.0 + 5.0, True, ("idle_corrected_within_noise",)),  # 5 J above, SE 10 J
    (1000.0 + 50.0, True, ()),
    (1000.0 - 5.0, False, ("idle_corrected_below_zero", "idle_corrected_within_noise")),
    (1000.0 - 50.0, False, ("idle_corrected_below_zero",)),
])
def test_idle_correction_reports_no_negative_and_flags_what_it_cannot_resolve(
        joules, expect_number, flags):
    corrected = idle_correction(joules, 10.0, 100.0, 1.0)  # idle 1000 J, SE 10 J
    assert (corrected.joules is not None) == expect_number
    assert corrected.flags == flags
    assert corrected.idle_share is None or corrected.idle_share <= 1
    assert (corrected.reason is None) == expect_number


def test_results_written_before_the_check_are_read_without_the_impossible_values(tmp_path):
    from lm_eval_ext.analysis.loader import run_info

    results = {"config": {"metering": {"energy_joules": 123684.0,
                                       "energy_joules_idle_corrected": -1754.0,
                                       "idle_share": 1.014, "flags": []}},
               "configs": {}}
    info = run_info(results, tmp_path / "results.json", "M2")
    assert info["energy_joules_idle_corrected"] is None and info["idle_share"] is None
    assert "idle_corrected_below_zero" in info["energy_flags"]
    assert info["energy_joules"] == 123684.0


# --- the within-run error -----------------------------------------------------------------

def test_within_run_error_by_hand():
    # 4 one-second slices of 2 forwards each: 10, 12, 11, 15 J -> rates 5, 6, 5.5, 7.5 J/forward
    # second differences: 5.5 - 12 + 5 = -1.5, 7.5 - 11 + 6 = 2.5; the counter's step at a read
    # (0.1 s at 12 W): v = 1.2^2 / 12 = 0.12, in a second difference of rates with 2 forwards
    # per slice with weight 1/4 + 9/4 + 9/4 + 1/4 = 5 -> (2.25 - 0.6 + 6.25 - 0.6) / 2 = 3.65,
    # sigma^2 = 3.65 / 6; Var = sum f^2 (16) x sigma^2 + the two window edges 2v
    # (a first slice, 40 J, pays the window's one-time costs: it is left out of the estimate)
    slices = [Slice(1.0, j, 2) for j in (40.0, 10.0, 12.0, 11.0, 15.0)]
    error = WithinRunError.of([slices], 0.1)
    # with 4 slices the estimate is scaled by t(0.975, 2) / z(0.975) (scipy: the reference)
    factor = stats.t.ppf(0.975, 2) / stats.norm.ppf(0.975)
    assert error.se_joules == pytest.approx(factor * math.sqrt(16 * 3.65 / 6 + 0.24))
    # what a results file states adds the run-to-run term measured by repeats
    se_t, se_e = error.stated(5.0, 88.0)
    assert se_e == pytest.approx(math.hypot(error.se_joules, RUN_TO_RUN_CV_JOULES * 88.0))
    assert se_t == pytest.approx(RUN_TO_RUN_CV_SECONDS * 5.0)
    assert error.se_seconds == pytest.approx(0.0)
    assert WithinRunError.of([slices[:4]], 0.1).se_joules is None  # under 4 after the first


def test_joined_slices_reach_the_length_and_keep_the_totals():
    recorded = [Slice(0.3, 3.0, 1)] * 7  # 2.1 s
    out = joined(recorded, 1.0)
    assert [round(s.seconds, 6) for s in out] == [1.2, 0.9]  # a tail over half stays
    assert [round(s.seconds, 6) for s in joined(recorded[:5], 1.0)] == [1.5]
    assert sum(s.joules for s in out) == pytest.approx(21.0)
    assert sum(s.forwards for s in out) == 7


@pytest.mark.parametrize("noise", ["per_forward", "per_slice"])
def test_within_run_error_matches_the_spread_of_simulated_repeats(noise):
    # Known truth: a length-sorted workload (J per forward falling from 9 to 3 over the run)
    # with independent noise per forward call or per one-second slice. The stated SE of one
    # run against the SD of the totals over 2,000 repeats (the reference).
    rng = random.Random(3)
    forwards = 400
    per_slice = 8

    def one_run():
        slices = []
        for start in range(0, forwards, per_slice):
            mean = sum(9 - 6 * k / forwards for k in range(start, start + per_slice))
            jitter = (sum(rng.gauss(0, 0.5) for _ in range(per_slice)) if noise == "per_forward"
                      else rng.gauss(0, 1.5))
            slices.append(Slice(1.0, mean + jitter, per_slice))
        return slices

    runs = [one_run() for _ in range(2000)]
    truth = statistics.stdev(sum(s.joules for s in r) for r in runs)
    stated = statistics.fmean(WithinRunError.of([r], 0.0).se_joules for r in runs[:200])
    assert stated == pytest.approx(truth, rel=0.1)


def test_counter_steps_count_at_the_window_edges_only():
    # constant 130 W, a counter that moves every 0.1 s, read at a random phase: the total's
    # error is the two edges' steps only (sqrt(2 v) = 5.3 J), whatever the number of slices
    rng = random.Random(11)

    def reading(t, phase):
        return 13.0 * math.floor(t / 0.1 + phase)

    stated, totals = [], []
    for _ in range(400):
        phase, start = rng.random(), rng.random()
        edges = [start] + [start + k + rng.uniform(0, 0.1) for k in range(1, 61)]
        values = [reading(t, phase) for t in edges]
        slices = [Slice(b - a, vb - va, 0) for a, b, va, vb in zip(
            edges, edges[1:], values, values[1:], strict=False)]
        stated.append(WithinRunError.of([slices], 0.1).se_joules)
        totals.append(values[-1] - values[0] - 130.0 * (edges[-1] - edges[0]))
    truth = statistics.stdev(totals)
    assert truth == pytest.approx(math.sqrt(2 * 13.0**2 / 12), rel=0.15)
    # before the correction about 14 times the truth; now the typical run states the truth
    assert statistics.median(stated) == pytest.approx(truth, rel=0.1)
    assert statistics.fmean(stated) < 3 * truth


def test_ratio_interval_is_the_log_scale_delta_method_and_covers_in_simulation():
    low, high = ratio_interval(200.0, 4.0, 100.0, 3.0)
    half = 1.959964 * math.hypot(4 / 200, 3 / 100)
    assert (low, high) == pytest.approx((2 * math.exp(-half), 2 * math.exp(half)))
    rng = random.Random(5)
    covered = 0
    for _ in range(4000):
        a, b = rng.gauss(200, 4), rng.gauss(100, 3)
        lo, hi = ratio_interval(a, 4.0, b, 3.0)
        covered += lo <= 2.0 <= hi
    assert 0.94 <= covered / 4000 <= 0.96
    assert ratio_interval(200.0, None, 100.0, 3.0) == (None, None)


# --- the ledger's slices ---------------------------------------------------------------

def test_the_ledger_cuts_a_slice_at_a_forward_end_and_keeps_the_totals():
    # window 0-2.0 s; forwards end at 0.1 s (no cut) and 0.3 s (cut), then 2.0 s close
    meter = _meter([0, 30_000, 30_000, 200_000], [0.0, 0.3, 0.3, 2.0])
    ledger = InferenceLedger(meter)
    with ledger.measure("t", "loglikelihood", 3):
        ledger.add_forward_seconds(0.1, 0.1)
        ledger.add_forward_seconds(0.2, 0.3)
    entry = ledger.summary()["per_task"]["t"]["request_types"]["loglikelihood"]
    assert entry["slice_record"] == {"seconds": [0.3, 1.7], "joules": [30.0, 170.0],
                                     "forwards": [2, 0], "runs": [2]}
    assert entry["energy_joules"] == pytest.approx(200.0)
    assert entry["inference_seconds"] == pytest.approx(2.0)
    assert "interval_not_estimable" in entry["flags"]


# --- the second reading -----------------------------------------------------------------

def test_power_samples_integrate_to_the_trapezoid_over_a_window():
    sampler = PowerSampler(lambda: 0.0)
    sampler.times = [0.0, 1.0, 2.0, 3.0]
    sampler.watts = [100.0, 200.0, 200.0, 100.0]
    # [0.5, 2.5]: 150..200 over 0.5 s (87.5 J), 200 for 1 s (200 J), 200..150 over 0.5 s (87.5 J)
    assert sampler.joules(0.5, 2.5) == pytest.approx(375.0)
    assert sampler.joules(-1.0, 2.0) is None  # not covered
    assert sampler.over([(0.0, 1.0), (2.0, 3.0)]) == pytest.approx(300.0)


def test_power_sampler_thread_reads_until_stopped():
    calls = []
    sampler = PowerSampler(lambda: calls.append(1) or 150.0, hz=200).start()
    while len(calls) < 5:
        pass
    sampler.stop()
    summary = sampler.summary()
    assert summary["samples"] == len(sampler.times) >= 5 and summary["error"] is None
    assert sampler.joules(sampler.times[0], sampler.times[-1]) == pytest.approx(
        150.0 * (sampler.times[-1] - sampler.times[0]))


def test_power_check_without_nvml_says_why_and_idle_samples_always_have_a_spread():
    from lm_eval_ext.metering.seam import idle_intervals

    metering = Metering.start([], energy="off", idle_seconds=0, power_check=True)
    block = metering.report({})
    assert block["power_check"] == {"error": "power_check needs NVML (a CUDA GPU); this run's "
                                              "energy source is unavailable: not sampled"}
    assert idle_intervals(0.5) == 2 and idle_intervals(3.0) == 6


def test_a_derived_run_is_compared_in_its_parents_mode():
    from lm_eval_ext.metering.modes import mode_difference

    assert mode_difference("lm_eval_forward", "derived(lm_eval_forward)") is None
    assert mode_difference("graph_replay", "derived(lm_eval_forward)") == (
        "execution modes differ (derived(lm_eval_forward) vs graph_replay)")
    assert mode_difference("graph_replay", "derived") is None  # the parent's mode unknown


def test_seconds_whose_se_is_over_half_of_them_are_flagged_and_give_no_runtime_interval():
    """trial 16: a run recorded 18.06 s with an SE of 61.67 s (5 slices) and no flag."""
    import pandas as pd

    from lm_eval_ext.analysis.run_table import cost_ratios
    from lm_eval_ext.metering.ledger import SECONDS_NOT_RESOLVED, _Tally
    from lm_eval_ext.metering.uncertainty import Slice

    def entry(seconds):
        tally = _Tally(seconds=float(sum(seconds)), windows=1,
                       joules_by_device={0: 100.0 * sum(seconds)},
                       runs=[[Slice(float(s), 100.0 * s, 1) for s in seconds]])
        return tally.as_dict(_meter([0], [0.0]))

    steady, erratic = entry([1.0] * 8), entry([1, 9] * 4)  # 1 forward per slice each
    NOT_METERED = {k: None for k in ("energy_joules", "energy_joules_se",  # noqa: N806
                                     "energy_joules_idle_corrected",
                                     "energy_joules_idle_corrected_se", "execution_mode",
                                     "energy_derived")}
    assert erratic["inference_seconds_se"] > 0.5 * erratic["inference_seconds"]
    assert SECONDS_NOT_RESOLVED in erratic["flags"]
    assert SECONDS_NOT_RESOLVED not in steady["flags"]
    table = cost_ratios(pd.DataFrame([
        {"run": "a", "n_items": 8, **{k: steady[k] for k in ("inference_seconds",
                                                                "inference_seconds_se")},
         **NOT_METERED, "is_reference": True},
        {"run": "b", "n_items": 8, **{k: erratic[k] for k in ("inference_seconds",
                                                                 "inference_seconds_se")},
         **NOT_METERED, "is_reference": False}]))
    assert math.isnan(table.loc[1, "runtime_ratio_ci_low"])
    assert "no runtime interval: a side's seconds SE is missing or over half its seconds" in \
        table.loc[1, "ratio_note"]
