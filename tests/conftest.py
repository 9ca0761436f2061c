"""Shared fixtures: offline settings, the benchmark data folder, the embedded model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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

#: the files with the longest runs (pytest --durations), scheduled first: with
#: ``-n 2 --dist loadfile --no-loadscope-reorder`` a worker that takes one late would be left
#: running it alone at the end
LONGEST_FIRST = ("test_campaign.py", "test_harness_compare.py", "test_sequential.py",
                 "test_request_integrity.py", "test_grid.py", "test_hf_metered.py",
                 "test_harness_xstest.py", "test_console_autoload.py", "test_export_upstream.py",
                 "test_analysis_end_to_end.py", "test_shared_prefix.py",
                 "test_packaged_models.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first (a stable sort: tests keep their order within a file)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data folder (``LM_EVAL_EXT_DATA``; ../shared/data by default)."""
    if not (DATA / "bbq" / "data" / "Age.jsonl").is_file():
        pytest.fail(f"benchmark data not found under {DATA}: set LM_EVAL_EXT_DATA")
    return DATA


@pytest.fixture(scope="session")
def embedded_checkpoint() -> Path:
    """The converted embedded model (downloads + converts once per cache)."""
    from lm_eval_ext.backends.embedded_model import ensure_checkpoint

    return ensure_checkpoint()


@pytest.fixture(scope="session")
def embedded_lm(embedded_checkpoint):
    """One HFMeteredLM on the CPU, shared by the in-process lm-eval tests."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    return HFMeteredLM(device="cpu", batch_size=4)


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
                membership: str = "instrument") -> Path:
    """A pilot analysis (``analyze --out``) of runs with one set of simulated answers.

    ``joules`` maps each run's name to its energy, the reference first; the runs are the
    first 500 items of ``membership`` under ``task``. Returns the analysis folder.
    """
    import numpy as np

    from lm_eval_ext.analysis import analyze
    from lm_eval_ext.analysis.report import write_outputs
    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership(membership).rows[:500]
    answers = simulate_predictions(rows, 0.6, np.random.default_rng(3))
    for name, energy in joules.items():
        write_run(folder / name, task, rows, answers, model="m", precision=name,
                  energy_joules=energy, inference_seconds=energy / 100)
    names = list(joules)
    result = analyze(folder / names[0], [folder / n for n in names[1:]], n_resamples=100,
                     mc_draws=10, seed=0, progress=False, labels=names)
    write_outputs(result, folder / "analysis")
    return folder / "analysis"


@pytest.fixture()
def mounted_filesystem(tmp_path):
    """A factory of real small or read-only file systems (tmpfs; root only, else the test skips).

    ``mounted_filesystem("64k")`` is a folder on a 64 KiB file system (a full disk after 64
    KiB); ``mounted_filesystem("64k", read_only=True)`` a read-only one. Unmounted afterwards.
    """
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small file system needs root")
    mounted = []

    def mount(size: str, read_only: bool = False) -> Path:
        folder = tmp_path / f"fs{len(mounted)}"
        folder.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                       check=True)
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=False)
