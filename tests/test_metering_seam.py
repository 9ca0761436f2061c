"""The metering seam is backend-independent: it meters lm-eval's own ``dummy`` model."""

import subprocess
import sys

import pytest
from helpers import Clock, FakeNvml
from lm_eval.api.instance import Instance
from lm_eval.models.dummy import DummyLM

from lm_eval_ext.backends.metered_lm import MeteredLM
from lm_eval_ext.metering import EnergyMeter, Metering, NvmlSource


class EngineDummy(DummyLM):
    """The backend's engine call, timed through the seam's forward clock (below the windows)."""

    metering: Metering

    def generate_until(self, requests, disable_tqdm: bool = False):
        return self.metering.timed(super().generate_until, requests, disable_tqdm)


class MeteredDummy(MeteredLM, EngineDummy):
    """lm-eval's ``dummy`` model wearing the seam, as a new backend would."""

    def __init__(self, metering: Metering):
        super().__init__()
        self.metering = metering

    def metering_extras(self):
        return {"engine": "dummy"}


def _request(task: str, kind: str, index: int) -> Instance:
    arguments = (f"context {index}", " a") if kind == "loglikelihood" else (
        f"prompt {index}", {"until": ["\n"]})
    return Instance(request_type=kind, doc={}, arguments=arguments, idx=0,
                    metadata=(task, index, 1))


def test_a_non_hf_lm_gets_per_task_windows_forward_time_and_the_extras_hook():
    # counter (mJ) read at: idle start/end, then each window edge and forward edge in order
    nvml = FakeNvml({"idx0": [0, 100_000, 100_000, 400_000, 400_000, 1_000_000,
                              1_000_000, 1_500_000, 1_500_000, 1_700_000]})
    # clock: idle 2 edges; loglik task a (2 edges), task b (2 edges); generate: window open,
    # forward start, forward end (5 s into the window: a slice ends there, 2 edges), close
    clock = Clock(0.0, 1.0, 1.0, 4.0, 4.0, 10.0, 10.0, 11.0, 15.0, 15.0, 15.0, 17.0)
    meter = EnergyMeter(NvmlSource([0], nvml=nvml, uuid_of=lambda i: None),
                        sync=lambda: None, clock=clock)
    meter.measure_idle(1.0, sleep=lambda s: None)
    lm = MeteredDummy(Metering(meter))

    requests = [_request("a", "loglikelihood", 0), _request("b", "loglikelihood", 1),
                _request("a", "loglikelihood", 2)]
    answers = lm.loglikelihood(requests, disable_tqdm=True)
    assert len(answers) == 3 and all(isinstance(a, tuple) for a in answers)
    assert lm.generate_until([_request("b", "generate_until", 3)], disable_tqdm=True) == ["lol"]

    block = lm.get_model_info()["metering"]
    assert block["engine"] == "dummy"  # the one hook
    a, b = block["per_task"]["a"], block["per_task"]["b"]
    assert a["n_requests"] == 2 and a["inference_seconds"] == pytest.approx(3.0)
    assert a["energy_joules"] == pytest.approx(300.0)  # 100 J/s idle: idle share 1.0
    assert set(b["request_types"]) == {"loglikelihood", "generate_until"}
    gen = b["request_types"]["generate_until"]
    assert gen["inference_seconds"] == pytest.approx(7.0)
    assert gen["forward_seconds"] == pytest.approx(4.0)  # 11 -> 15 on the injected clock
    assert gen["slice_record"] == {"seconds": [5.0, 2.0], "joules": [500.0, 200.0],
                                   "forwards": [1, 0], "runs": [2]}
    assert block["energy_joules"] == pytest.approx(1_600.0)
    assert block["idle_power"]["watts"] == pytest.approx(100.0)
    assert block["energy_joules_idle_corrected"] == pytest.approx(1_600.0 - 100.0 * 16.0)


def test_the_metering_package_imports_no_model_backend():
    code = ("import sys, lm_eval_ext.metering\n"
            "bad = [m for m in sys.modules if m.startswith(('transformers', 'lm_eval.models',"
            " 'lm_eval_ext.backends', 'torch'))]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
