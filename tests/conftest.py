"""Shared fixtures: the benchmark data folder, the embedded model, small file systems.

The test environment (offline, the data folder) and the helpers are in ``helpers.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import DATA  # first: importing helpers sets the test environment

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
