"""Multi-GPU metering: data parallel (padding cut out, ranks gathered and summed), model parallel."""

from __future__ import annotations

import json
import math

import pytest
import torch.multiprocessing as mp
from helpers import meter_for
from lm_eval.api.instance import Instance

from lm_eval_ext.metering import InferenceLedger
from lm_eval_ext.metering.ranks import (
    gather_rank_metering,
    merge_rank_metering,
    padding_count,
    run_without_padding,
)
from lm_eval_ext.metering.sources import device_label


def _requests(n_real: int, n_pad: int, repeats: int = 1) -> list[Instance]:
    """A rank's request list built the way lm-eval's evaluator builds it (with padding)."""
    reqs = [Instance("loglikelihood", {"i": i}, (f"ctx{i}", " a"), 0, ("bbq", i, repeats))
            for i in range(n_real)]
    cloned = [r for r in reqs for _ in range(r.repeats)]
    for _ in range(n_pad):
        cloned.extend([reqs[-1]] * reqs[-1].repeats)
    return cloned


@pytest.mark.parametrize(("n_real", "n_pad", "repeats"), [(3, 0, 1), (3, 2, 1), (2, 1, 2),
                                                          (1, 0, 3), (1, 4, 1)])
def test_padding_is_found_and_never_reaches_the_model(n_real, n_pad, repeats):
    requests = _requests(n_real, n_pad, repeats)
    assert padding_count(requests) == n_pad * repeats
    seen = []

    def model(batch):
        seen.extend(batch)
        return [(-float(r.doc["i"]), False) for r in batch]

    answers, padding = run_without_padding(requests, model, world_size=2)
    assert padding == n_pad * repeats and len(seen) == n_real * repeats
    assert len(answers) == len(requests)
    assert answers == [(-float(r.doc["i"]), False) for r in requests]  # in request order
    assert run_without_padding(requests, model, world_size=1)[1] == 0  # one process: no padding


def _block(joules, seconds, idle_joules=None, se=None, flags=(), uuid="GPU-a", padding=0):
    return {"energy_joules": joules, "inference_seconds": seconds, "forward_seconds": seconds / 2,
            "energy_joules_idle_corrected": None if joules is None or idle_joules is None
            else joules - idle_joules,
            "energy_joules_idle_corrected_se": se, "idle_joules": idle_joules,
            "flags": list(flags), "gpus": [{"uuid": uuid}], "padding_requests": padding,
            "per_task": {"bbq": {"energy_joules": joules, "inference_seconds": seconds,
                                 "n_requests": 4, "flags": list(flags)}}}


def test_merged_block_sums_joules_and_takes_the_slowest_rank():
    merged = merge_rank_metering([_block(300.0, 10.0, 200.0, 3.0, uuid="GPU-a"),
                                  _block(500.0, 12.0, 240.0, 4.0, ("short_window",), "GPU-b", 1)])
    assert merged["energy_joules"] == 800.0 and merged["inference_seconds"] == 12.0
    assert merged["energy_joules_idle_corrected"] == pytest.approx(360.0)
    assert merged["energy_joules_idle_corrected_se"] == pytest.approx(5.0)  # sqrt(3^2 + 4^2)
    assert merged["idle_share"] == pytest.approx(440.0 / 800.0)
    assert merged["forward_share"] == pytest.approx(11.0 / 22.0)
    assert merged["flags"] == ["short_window"] and [g["uuid"] for g in merged["gpus"]] == [
        "GPU-a", "GPU-b"]
    assert merged["per_task"]["bbq"]["energy_joules"] == 800.0
    assert merged["per_task"]["bbq"]["n_requests"] == 8
    dp = merged["data_parallel"]
    assert dp["world_size"] == 2 and dp["padding_requests"] == 1
    assert [r["energy_joules"] for r in dp["per_rank"]] == [300.0, 500.0]
    partial = merge_rank_metering([_block(300.0, 10.0), _block(None, 12.0)])
    assert partial["energy_joules"] is None  # a partial sum is not the run's energy


def _rank(rank: int, world: int, init_file: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    joules_mj = 1_000_000 * (rank + 1)  # rank r's GPU uses (r + 1) kJ in its window
    meter, _ = meter_for({"idx0": [0, joules_mj]}, [0.0, 5.0 + rank])
    ledger = InferenceLedger(meter)
    n_real = 3 - rank  # rank 1 has one request fewer: lm-eval pads it with one copy

    def model(batch):
        with ledger.measure("bbq", "loglikelihood", len(batch)):
            return [(-1.0, False)] * len(batch)

    requests = _requests(n_real, 3 - n_real)
    _, padding = run_without_padding(requests, model, world_size=world)
    summary = ledger.summary()
    local = {**summary["total"], "per_task": summary["per_task"], "padding_requests": padding,
             # each rank's process sees its own GPU as cuda:0: only the UUID tells them apart
             "gpus": [{"uuid": f"GPU-rank{rank}"}],
             "synced_devices": [device_label(0, uuid_of=lambda i, r=rank: f"GPU-rank{r}")],
             "idle_power": {"watts": 100.0 + rank, "se_watts": 3.0 + rank, "seconds": 3.0,
                            "intervals": 6}}
    gathered = gather_rank_metering(local)
    if rank == 0:
        with open(out, "w") as handle:
            json.dump({"merged": merge_rank_metering(gathered), "ranks": gathered}, handle)
    dist.destroy_process_group()


def test_two_gloo_ranks_report_the_sum_of_their_windows(tmp_path):
    out = tmp_path / "merged.json"
    mp.spawn(_rank, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    result = json.loads(out.read_text())
    merged, ranks = result["merged"], result["ranks"]
    assert [r["energy_joules"] for r in ranks] == [pytest.approx(1000.0), pytest.approx(2000.0)]
    assert merged["energy_joules"] == pytest.approx(sum(r["energy_joules"] for r in ranks))
    assert merged["inference_seconds"] == pytest.approx(6.0)  # the slower rank
    # task work is the real requests only: 3 on rank 0, 2 on rank 1 (+1 padding, not run)
    assert [r["per_task"]["bbq"]["n_requests"] for r in ranks] == [3, 2]
    assert merged["per_task"]["bbq"]["n_requests"] == 5
    assert merged["data_parallel"]["padding_requests"] == 1
    assert [r["gpu_uuids"] for r in merged["data_parallel"]["per_rank"]] == [
        ["GPU-rank0"], ["GPU-rank1"]]
    assert not math.isnan(merged["energy_joules"])
    # each rank syncs its own GPU; idle power adds up over the GPUs, its SE in quadrature
    # (rank-local labels collided, two GPUs were recorded as ["cuda:0"])
    assert merged["synced_devices"] == ["cuda:0/GPU-rank0", "cuda:0/GPU-rank1"]
    assert [r["synced_devices"] for r in merged["data_parallel"]["per_rank"]] == [
        ["cuda:0/GPU-rank0"], ["cuda:0/GPU-rank1"]]
    assert merged["idle_power"]["watts"] == pytest.approx(201.0)
    assert merged["idle_power"]["se_watts"] == pytest.approx(5.0)  # sqrt(3^2 + 4^2)


def test_model_parallel_meters_and_syncs_every_gpu_holding_parameters(monkeypatch):
    """A model split over two GPUs (devices mocked: no GPU here): both synced, both summed."""
    import torch
    from helpers import Clock, FakeNvml

    from lm_eval_ext.backends.hf.base import parameter_cuda_devices
    from lm_eval_ext.metering import EnergyMeter, NvmlSource
    from lm_eval_ext.metering.seam import synchronize_all

    class Split:  # parameters as accelerate's device_map places them
        def parameters(self):
            for device in ("cuda:1", "cuda:0", "cuda:1", "cpu"):
                yield type("P", (), {"device": torch.device(device)})()

    devices = parameter_cuda_devices(Split())
    assert devices == [0, 1]
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", synced.append)
    nvml = FakeNvml({"GPU-a": [0, 200_000], "GPU-b": [0, 500_000]})
    meter = EnergyMeter(NvmlSource(devices, nvml=nvml, uuid_of={0: "GPU-a", 1: "GPU-b"}.get),
                        sync=synchronize_all(devices), clock=Clock(0.0, 4.0))
    meter.begin_window("w")
    window = meter.end_window("w")
    assert synced == [0, 1, 0, 1]  # every GPU at both edges
    assert window.total_joules == pytest.approx(700.0)
