"""What several test files share: the test environment, commands, runs and fakes.

Importing it sets the test environment (offline, the benchmark data folder); ``conftest.py``
imports it first. Test files import their helpers from here, never from another test file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
#: the measured results behind the docs' figures: in the repository, not in the sdist
RESULTS = REPO / "benchmarks" / "results"
needs_results = pytest.mark.skipif(not RESULTS.is_dir(), reason="benchmarks/results/ is not "
                                   "in the sdist; run these tests from a clone")
os.environ.setdefault("LM_EVAL_EXT_DATA", str(REPO.parent / "shared" / "data"))
# absolute, so that symlinks and subprocesses in other folders see the same data
os.environ["LM_EVAL_EXT_DATA"] = str(Path(os.environ["LM_EVAL_EXT_DATA"]).resolve())
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # pytest -n N: share the cores, no oversubscription
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads))
    os.environ.setdefault("MKL_NUM_THREADS", str(_threads))

DATA = Path(os.environ["LM_EVAL_EXT_DATA"])
BIN = Path(sys.executable).parent

#: the SHA-256 fingerprint of the paper's BBQ sample manifest
PAPER_SAMPLE_SHA256 = "69633d39a5318756acb55745bbd606395cbccc1371402f8adc2855a8a34499df"

#: three real campaign cells: two batch sizes and a second subset membership (idle_seconds=0: no
#: idle power to measure on the CPU; limit 5: small)
SMALL_CAMPAIGN = {
    "name": "small",
    "models": {"smollm2": "idle_seconds=0"},
    "tasks": ["bbq_subset_12p5pct_loglik"],
    "lm_eval": {"limit": 5},
    "conditions": {"M0": {"batch_size": 1}, "M1": {"batch_size": 4},
                   "M4_r2": {"batch_size": 1, "tasks": ["bbq_subset_12p5pct_r2_loglik"]}},
    "compare": {"batching": {"reference": "M0", "runs": ["M1"]}},
    "subsets": {"reference": "M0", "runs": ["M4_r2"]},
}
#: a quick analysis of a campaign's runs (few resamples)
QUICK_ANALYSIS = ["--bootstrap", "200", "--mc-draws", "20"]

#: the same generation cap in lm-eval and Inspect AI (the tasks' own is 128 tokens): shorter
#: runs, the same greedy prefixes
LM_CAP = ["--gen_kwargs", "max_gen_toks=48"]
INSPECT_CAP = ["--max-tokens", "48"]

#: four short prompts for generation tests
PROMPTS = ["Name three colours of the rainbow.", "What is 12 times 12? Explain briefly.",
           "Write one sentence about the sea.", "List two prime numbers."]


def console_script(name: str) -> str:
    """Absolute path of an installed console script of this interpreter's environment."""
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            pytest.fail(f"console script {name!r} not installed; run `pip install .`")
        return found
    return str(path)


def run_cli(args: list[str], *, env: dict | None = None, cwd: Path | None = None,
            timeout: int = 600) -> subprocess.CompletedProcess:
    """Run a console script with the test environment (plus ``env``) and capture output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([console_script(args[0]), *args[1:]], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


def package_task_manager(**metadata):
    """A TaskManager over the package's task folders only (no built-in index), with metadata."""
    from lm_eval.tasks import TaskManager

    from lm_eval_ext.paths import package_tasks_dir

    return TaskManager(include_path=str(package_tasks_dir()), include_defaults=False,
                       metadata=metadata or None)


def save_lm_eval_run(lm, task: str, limit: int, out_dir: Path, *, model_args: str = "",
                     log_samples: bool = True, **kwargs) -> Path:
    """Run lm-eval in process on our tasks and write its outputs in lm-eval's layout."""
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker

    tracker = EvaluationTracker(output_path=str(out_dir))
    results = simple_evaluate(
        model=lm, model_args=model_args, tasks=[task], limit=limit, log_samples=log_samples,
        evaluation_tracker=tracker, bootstrap_iters=0,
        task_manager=package_task_manager(),
        **kwargs)
    samples = results.pop("samples", None)
    tracker.save_results_aggregated(results=results, samples=samples)
    if log_samples:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    return out_dir


def write_pilot(folder: Path, joules: dict[str, float], *, task: str = "bbq_instrument_loglik",
                membership: str = "instrument", context: str | None = None) -> Path:
    """A pilot analysis (``analyze --out``) of runs with one set of simulated answers.

    ``joules`` maps each run's name to its energy, the reference first; the runs are the
    first 500 items of ``membership`` under ``task`` (``context``: of that context condition
    only, ``ambig`` or ``disambig``). Returns the analysis folder.
    """
    import numpy as np

    from lm_eval_ext.analysis import analyze
    from lm_eval_ext.analysis.report import write_outputs
    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = [row for row in load_membership(membership).rows
            if context in (None, row["context_condition"])][:500]
    answers = simulate_predictions(rows, 0.6, np.random.default_rng(3))
    for name, energy in joules.items():
        write_run(folder / name, task, rows, answers, model="m", precision=name,
                  energy_joules=energy, inference_seconds=energy / 100)
    names = list(joules)
    result = analyze(folder / names[0], [folder / n for n in names[1:]], n_resamples=100,
                     mc_draws=10, seed=0, progress=False, labels=names)
    write_outputs(result, folder / "analysis")
    return folder / "analysis"


def inspect_eval(args: list[str], env: dict[str, str]) -> Path:
    """``inspect eval ARGS`` into ``env["LOG_DIR"]``; its one log file."""
    log_dir = Path(env["LOG_DIR"])
    proc = subprocess.run([str(BIN / "inspect"), "eval", *args, "--log-dir", str(log_dir),
                           "--display", "plain"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [log] = log_dir.glob("*.eval")
    return log


def generation_requests(prompts: list[str], gen_kwargs: dict) -> list:
    """lm-eval ``generate_until`` instances of ``prompts`` with ``gen_kwargs``."""
    from lm_eval.api.instance import Instance

    return [Instance("generate_until", {}, (p, dict(gen_kwargs)), i, ("t", i, 1))
            for i, p in enumerate(prompts)]


class FakeNvml:
    """Stand-in for pynvml: scripted cumulative counters (mJ) per handle."""

    def __init__(self, counters, processes=None):
        self.counters = {h: list(values) for h, values in counters.items()}
        self.processes = processes or {}
        self.reads = 0

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"idx{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return uuid

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.reads += 1
        values = self.counters[handle]
        return values.pop(0) if len(values) > 1 else values[0]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p) for p in self.processes.get(handle, [os.getpid()])]

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle}"


class Clock:
    """A clock that returns the scripted ``times`` in turn."""

    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def meter_for(counters, times, processes=None, sync=True):
    """An NVML energy meter on fake counters and a fake clock, and its list of syncs."""
    from lm_eval_ext.metering import EnergyMeter, NvmlSource

    nvml = FakeNvml(counters, processes)
    source = NvmlSource([0], nvml=nvml, uuid_of=lambda i: None)
    calls = []
    meter = EnergyMeter(source, sync=(lambda: calls.append(1)) if sync else None,
                        clock=Clock(*times))
    return meter, calls


def tiny_llama(attention: str, seed: int, device: str = "cpu", model_class: type | None = None):
    """A 2-layer grouped-query Llama whose weights are large enough for attention to count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         attn_implementation=attention, initializer_range=0.5)
    return (model_class or LlamaForCausalLM)(config).eval().to(device)


def random_prompts(rows: int, width: int, padding: list[int], seed: int, device: str = "cpu"):
    """Left-padded random prompts for :func:`tiny_llama`: row ``i`` has ``padding[i]`` pad tokens."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 97, (rows, width), generator=generator)
    mask = (torch.arange(width) >= torch.tensor(padding)[:, None]).long()
    return ids.masked_fill(mask == 0, 0).to(device), mask.to(device)


def until_end(rows: list[list[int]], eos: set[int], most: int) -> list[list[int]]:
    """generate's rows cut after their first end token (as the decode returns them)."""
    cut = []
    for row in rows:
        ends = [i for i, t in enumerate(row[:most]) if t in eos]
        cut.append(row[:ends[0] + 1] if ends else row[:most])
    return cut
