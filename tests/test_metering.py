"""The metering API on injected counters: fake NVML, fake RAPL sysfs, fake clock."""

import os
import warnings

import pytest
from helpers import Clock, FakeNvml, meter_for

from lm_eval_ext.metering import (
    EnergyMeter,
    InferenceLedger,
    NvmlSource,
    RaplSource,
    UnavailableSource,
    select_source,
)


def test_window_energy_time_and_sync_at_both_edges():
    meter, calls = meter_for({"idx0": [1_000_000, 1_250_000]}, [10.0, 15.0])
    meter.begin_window("bbq")
    window = meter.end_window("bbq")
    assert window.seconds == pytest.approx(5.0)
    assert window.joules_by_device == {0: pytest.approx(250.0)}
    assert window.total_joules == pytest.approx(250.0)
    assert window.source == "nvml" and window.flags == ()
    assert len(calls) == 2


def test_short_window_is_flagged_but_reported():
    meter, _ = meter_for({"idx0": [0, 40_000]}, [0.0, 0.5])
    meter.begin_window("w")
    window = meter.end_window("w")
    assert window.total_joules == pytest.approx(40.0)
    assert "short_window" in window.flags


def test_counter_decrease_is_unavailable_not_zero():
    meter, _ = meter_for({"idx0": [5_000_000, 4_000_000]}, [0.0, 3.0])
    meter.begin_window("w")
    with pytest.warns(UserWarning, match="unavailable"):
        window = meter.end_window("w")
    assert window.total_joules is None and "counter_decreased" in window.flags


def test_counter_that_did_not_advance_is_never_zero_joules():
    meter, _ = meter_for({"idx0": [7_000, 7_000]}, [0.0, 0.05])
    meter.begin_window("w")
    with pytest.warns(UserWarning):
        window = meter.end_window("w")
    assert window.total_joules is None and {"zero_energy", "short_window"} <= set(window.flags)


@pytest.mark.parametrize("processes", [[os.getpid(), 4242], [4242, 4343]])
def test_other_processes_on_the_gpu_are_flagged(processes):
    # second case: container PIDs (ours not listed) -> one of the two is us, one is another
    meter, _ = meter_for({"idx0": [0, 3_000_000]}, [0.0, 3.0], processes={"idx0": processes})
    meter.begin_window("w")
    assert "other_gpu_processes" in meter.end_window("w").flags


def test_only_our_process_is_not_contamination():
    meter, _ = meter_for({"idx0": [0, 3_000_000]}, [0.0, 3.0], processes={"idx0": [4242]})
    meter.begin_window("w")
    assert "other_gpu_processes" not in meter.end_window("w").flags


def test_unsynchronised_edges_are_flagged():
    meter, _ = meter_for({"idx0": [0, 3_000_000]}, [0.0, 3.0], sync=False)
    meter.begin_window("w")
    assert "no_device_sync" in meter.end_window("w").flags


def test_energy_is_summed_over_every_gpu_the_model_occupies_by_uuid():
    nvml = FakeNvml({"GPU-a": [0, 100_000], "GPU-b": [0, 300_000]})
    source = NvmlSource([0, 1], nvml=nvml, uuid_of={0: "GPU-a", 1: "GPU-b"}.get)
    meter = EnergyMeter(source, sync=None, clock=Clock(0.0, 2.0))
    meter.begin_window("w")
    window = meter.end_window("w")
    assert window.joules_by_device == {0: pytest.approx(100.0), 1: pytest.approx(300.0)}
    assert window.total_joules == pytest.approx(400.0)
    assert [d["uuid"] for d in source.describe()] == ["GPU-GPU-a", "GPU-GPU-b"]


def test_idle_power_and_idle_corrected_energy():
    # idle: 70 J over 1 s -> 70 W; window: 1000 J over 5 s -> 1000 - 70 * 5 = 650 J
    meter, _ = meter_for({"idx0": [0, 70_000, 70_000, 1_070_000]}, [0.0, 1.0, 1.0, 6.0])
    assert meter.measure_idle(1.0, sleep=lambda s: None) == {0: pytest.approx(70.0)}
    meter.begin_window("w")
    window = meter.end_window("w")
    assert window.total_joules == pytest.approx(1000.0)
    assert window.idle_corrected_joules == pytest.approx(650.0)


def test_overlapping_windows_and_misuse():
    meter, _ = meter_for({"idx0": [0, 100_000, 300_000, 600_000]}, [0.0, 1.0, 2.0, 3.0, 4.0])
    meter.begin_window("outer")
    meter.begin_window("inner")
    assert meter.end_window("inner").total_joules == pytest.approx(200.0)
    assert meter.end_window("outer").total_joules == pytest.approx(600.0)
    with pytest.raises(ValueError, match="never opened"):
        meter.end_window("outer")
    meter.begin_window("again")
    with pytest.raises(ValueError, match="already open"):
        meter.begin_window("again")


def _rapl_tree(root, energies, max_range=1_000_000):
    for index, energy in energies.items():
        domain = root / f"intel-rapl:{index}"
        domain.mkdir(parents=True)
        (domain / "energy_uj").write_text(f"{energy}\n")
        (domain / "max_energy_range_uj").write_text(f"{max_range}\n")
        (domain / "name").write_text(f"package-{index}\n")
        (root / f"intel-rapl:{index}:0").mkdir()  # a sub-domain: must be ignored
    return root


def test_rapl_reads_packages_and_corrects_a_wrap(tmp_path):
    root = _rapl_tree(tmp_path, {0: 900_000, 1: 10_000})
    source = RaplSource(root)
    meter = EnergyMeter(source, clock=Clock(0.0, 2.0))
    meter.begin_window("w")
    (root / "intel-rapl:0/energy_uj").write_text("100000\n")  # wrapped past 1,000,000 uJ
    (root / "intel-rapl:1/energy_uj").write_text("510000\n")
    window = meter.end_window("w")
    assert window.source == "rapl"
    assert window.joules_by_device == {0: pytest.approx(0.2), 1: pytest.approx(0.5)}
    assert "counter_wrapped" in window.flags
    assert [d["name"] for d in source.describe()] == ["package-0", "package-1"]


class _BrokenNvml:
    """A pynvml stand-in whose library does not load."""

    def nvmlInit(self):  # noqa: N802 (pynvml's name)
        raise RuntimeError("NVML library not found")


def test_unreadable_rapl_degrades_to_unavailable(tmp_path):
    root = _rapl_tree(tmp_path, {0: 1})
    (root / "intel-rapl:0/energy_uj").chmod(0o000)
    if os.access(root / "intel-rapl:0/energy_uj", os.R_OK):  # root ignores permissions
        (root / "intel-rapl:0/energy_uj").unlink()
        (root / "intel-rapl:0/energy_uj").mkdir()  # reading a directory fails for anyone
    with warnings.catch_warnings():  # a CPU run says why on its start-up line only
        warnings.simplefilter("error")
        source = select_source([], rapl_root=root)
    assert isinstance(source, UnavailableSource) and "RAPL not readable" in source.reason
    with pytest.warns(UserWarning, match="runtime only"):  # a GPU run without any counter
        select_source([0], rapl_root=root, nvml=_BrokenNvml())
    meter = EnergyMeter(source, clock=Clock(0.0, 1.0))
    meter.begin_window("w")
    window = meter.end_window("w")
    assert window.total_joules is None and window.flags == ("energy_unavailable",)


def test_source_selection_rules(tmp_path):
    assert select_source([], prefer="off").name == "unavailable"
    with pytest.raises(RuntimeError, match="CUDA device"):
        select_source([], prefer="nvml")
    nvml = FakeNvml({"idx0": [0]})
    assert select_source([0], nvml=nvml, prefer="auto").name in ("nvml",)
    assert select_source([], rapl_root=_rapl_tree(tmp_path, {0: 5})).name == "rapl"


def test_ledger_cuts_out_excluded_work_and_sums_per_task():
    # counter (mJ) and clock readings at each edge, in order:
    # task A: open 0 J @0s, [probe: close 100 J @1s ... reopen 400 J @3s], close 600 J @4s
    # task B: open 600 J @4s, close 1000 J @6s
    meter, _ = meter_for({"idx0": [0, 100_000, 400_000, 600_000, 600_000, 1_000_000]},
                         [0.0, 1.0, 3.0, 4.0, 4.0, 6.0])
    ledger = InferenceLedger(meter)
    with ledger.measure("A", "loglikelihood", 30):
        with ledger.excluded():
            pass
    with ledger.measure("B", "generate_until", 5):
        pass
    summary = ledger.summary()
    a, b = summary["per_task"]["A"], summary["per_task"]["B"]
    assert (a["inference_seconds"], a["energy_joules"], a["windows"]) == (2.0, pytest.approx(300.0), 2)
    assert (b["inference_seconds"], b["energy_joules"], b["n_requests"]) == (2.0, pytest.approx(400.0), 5)
    assert summary["total"]["energy_joules"] == pytest.approx(700.0)
    assert summary["total"]["n_requests"] == 35
    assert a["request_types"]["loglikelihood"]["n_requests"] == 30


def test_ledger_energy_is_none_if_any_window_is_unavailable():
    meter, _ = meter_for({"idx0": [0, 500_000, 400_000, 300_000]}, [0.0, 2.0, 2.0, 4.0])
    ledger = InferenceLedger(meter)
    with ledger.measure("A", "loglikelihood", 1):
        pass
    with ledger.measure("A", "loglikelihood", 1):
        pass
    with pytest.warns(UserWarning, match="task 'A': energy unavailable"):
        task = ledger.summary()["per_task"]["A"]
    assert task["energy_joules"] is None and "counter_decreased" in task["flags"]


@pytest.mark.parametrize(
    ("name", "counters_mj", "times", "joules", "seconds", "windows"),
    [
        # probe first: a 20 ms segment in which the counter did not move (0 J), the probe,
        # then 60 s holding 8,000 J. lm-eval 0.4.13 probes first thing in generate_until.
        ("probe first", [1_000_000, 1_000_000, 1_500_000, 9_500_000], [0.0, 0.02, 1.0, 61.0],
         8000.0, 60.02, 2),
        # probe in the middle: 30 s / 600 J, probe (excluded 400 J), 30 s / 700 J
        ("probe middle", [0, 600_000, 1_000_000, 1_700_000], [0.0, 30.0, 31.0, 61.0],
         1300.0, 60.0, 2),
    ],
)
def test_probe_segments_with_no_counter_change_do_not_void_the_task(
        name, counters_mj, times, joules, seconds, windows):
    meter, _ = meter_for({"idx0": counters_mj}, times)
    ledger = InferenceLedger(meter)
    with ledger.measure("gen", "generate_until", 100):
        with ledger.excluded():
            pass
    task = ledger.summary()["per_task"]["gen"]
    assert task["energy_joules"] == pytest.approx(joules), name
    assert task["inference_seconds"] == pytest.approx(seconds)
    assert task["windows"] == windows
    assert not {"zero_energy", "short_window"} & set(task["flags"])
    assert ledger.summary()["total"]["energy_joules"] == pytest.approx(joules)


def test_probe_only_task_is_null_and_flagged_not_zero():
    # the whole task is a probe between two 1 ms segments: nothing measurable was metered
    meter, _ = meter_for({"idx0": [5_000, 5_000, 9_000, 9_000]}, [0.0, 0.001, 2.0, 2.001])
    ledger = InferenceLedger(meter)
    with ledger.measure("gen", "generate_until", 1):
        with ledger.excluded():
            pass
    with pytest.warns(UserWarning, match="energy unavailable"):
        task = ledger.summary()["per_task"]["gen"]
    assert task["energy_joules"] is None
    assert {"zero_energy", "short_window"} <= set(task["flags"])


def test_zero_on_one_device_voids_the_total_and_is_flagged():
    nvml = FakeNvml({"GPU-a": [0, 100_000], "GPU-b": [7, 7]})
    source = NvmlSource([0, 1], nvml=nvml, uuid_of={0: "GPU-a", 1: "GPU-b"}.get)
    ledger = InferenceLedger(EnergyMeter(source, sync=None, clock=Clock(0.0, 5.0)))
    with ledger.measure("t", "loglikelihood", 1):
        pass
    with pytest.warns(UserWarning):
        task = ledger.summary()["per_task"]["t"]
    assert task["energy_joules"] is None and "zero_energy" in task["flags"]


def test_idle_spread_shares_and_idle_corrected_uncertainty():
    # idle in 4 intervals of 0.5 s: 60, 50, 60, 70 J per 0.5 s -> 120, 100, 120, 140 W
    # (mean 120 W, SD 16.33 W, SE 8.165 W); then a 10 s task holding 2,000 J with 4 s forward
    idle = [0, 60_000, 110_000, 170_000, 240_000]
    meter, _ = meter_for({"idx0": [*idle, 240_000, 2_240_000]}, [0.0, 0.5, 1.0, 1.5, 2.0, 2.0, 12.0])
    meter.measure_idle(2.0, sleep=lambda s: None, intervals=4)
    assert meter.idle_watts == {0: pytest.approx(120.0)}
    assert meter.idle_samples[0].sd_watts_by_device[0] == pytest.approx(16.3299, rel=1e-4)
    ledger = InferenceLedger(meter)
    with ledger.measure("t", "loglikelihood", 10):
        ledger.add_forward_seconds(4.0)
    task = ledger.summary()["per_task"]["t"]
    assert task["energy_joules"] == pytest.approx(2000.0)
    assert task["idle_joules"] == pytest.approx(1200.0)
    assert task["idle_share"] == pytest.approx(0.6)
    assert task["forward_share"] == pytest.approx(0.4)
    assert task["energy_joules_idle_corrected"] == pytest.approx(800.0)
    assert task["energy_joules_idle_corrected_se"] == pytest.approx(10 * 16.3299 / 2, rel=1e-4)


def test_cpu_window_with_other_busy_processes_is_flagged():
    from lm_eval_ext.metering.contention import CpuContention

    # 2 CPUs, 10 s window: the machine was busy 16 CPU-s, we used 8 -> others 8 / 20 = 40%
    busy, own, clock = iter([100.0, 116.0]), iter([50.0, 58.0]), iter([0.0, 10.0])
    probe = CpuContention(lambda: next(busy), lambda: next(own), lambda: next(clock), cpus=2)
    meter = EnergyMeter(UnavailableSource(), clock=Clock(0.0, 10.0), contention=probe)
    meter.begin_window("w")
    assert "other_processes" in meter.end_window("w").flags
    # alone: busy time equals our own CPU time
    busy, own, clock = iter([100.0, 108.0]), iter([50.0, 58.0]), iter([0.0, 10.0])
    probe = CpuContention(lambda: next(busy), lambda: next(own), lambda: next(clock), cpus=2)
    meter = EnergyMeter(UnavailableSource(), clock=Clock(0.0, 10.0), contention=probe)
    meter.begin_window("w")
    assert "other_processes" not in meter.end_window("w").flags


def test_real_proc_stat_probe_sees_a_busy_sibling_process():
    import subprocess
    import sys
    import time

    from lm_eval_ext.metering.contention import CpuContention

    probe = CpuContention()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(probe.cpus)]
    try:
        start = probe.begin()
        time.sleep(1.5)
        busy_share = probe.other_share(start)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    # one spinning process per CPU: at least most of the machine was someone else's
    assert 0.6 < busy_share <= 1.05
