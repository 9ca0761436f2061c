"""Campaigns on a real scheduler: examples/slurm/ on a single-node SLURM.

CI starts the cluster (``.ci/slurm_localhost.sh``: Debian's slurm-wlm and munge on localhost)
and sets ``LM_EVAL_EXT_SLURM=1``, which makes a missing cluster a failure; elsewhere these tests
are skipped when no SLURM answers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from helpers import REPO, SMALL_CAMPAIGN

pytestmark = pytest.mark.slow

SUBMIT = REPO / "examples" / "slurm" / "submit.sh"


def _slurm_answers() -> bool:
    if not shutil.which("sbatch"):
        return False
    states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return states.returncode == 0 and bool({"idle", "mixed", "allocated"}
                                           & set(states.stdout.split()))


@pytest.fixture()
def slurm(tmp_path, embedded_checkpoint):
    if not _slurm_answers():
        if os.environ.get("LM_EVAL_EXT_SLURM") == "1":
            pytest.fail("LM_EVAL_EXT_SLURM=1 but no SLURM node answers: .ci/slurm_localhost.sh")
        pytest.skip("no SLURM here (CI starts one with .ci/slurm_localhost.sh)")
    spec = tmp_path / "campaign.yaml"
    spec.write_text(yaml.safe_dump(SMALL_CAMPAIGN))  # three real cells
    return spec


def _submit(spec: Path, out: Path, shards: int) -> tuple[str, str]:
    env = {**os.environ, "CAMPAIGN": str(spec), "OUT": str(out), "SHARDS": str(shards),
           "LM_EVAL_EXT_GRES": "", "LM_EVAL_EXT_CPUS": "1", "LM_EVAL_EXT_FINISH_CPUS": "1",
           "LM_EVAL_EXT_TIME": "00:20:00"}
    proc = subprocess.run(["bash", str(SUBMIT)], capture_output=True, text=True, env=env,
                          cwd=spec.parent)
    assert proc.returncode == 0, proc.stderr
    match = re.fullmatch(r"array (\d+) \(\d+ shards\), finishing job (\d+)\n", proc.stdout)
    assert match, proc.stdout
    return match.group(1), match.group(2)


def _wait(*jobs: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%i"],
                                capture_output=True, text=True).stdout.split()
        if not queued:
            return
        time.sleep(2)
    subprocess.run(["scancel", *jobs])
    raise AssertionError(f"SLURM jobs {jobs} still queued after {timeout} s")


def _finish_output(spec: Path, job: str) -> str:
    return (spec.parent / f"lm-eval-ext-campaign-finish-{job}.out").read_text()


def _cells(out: Path) -> dict[str, dict]:
    return {p.name: json.loads((p / "cell.json").read_text())
            for p in (out / "cells").iterdir()}


def test_the_job_array_and_the_finishing_job_run_and_analyse_a_campaign(slurm):
    out = slurm.parent / "out"
    array, finish = _submit(slurm, out, shards=2)
    _wait(array, finish)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and len(_cells(out)) == 3
    shards = {record["shard"] for record in _cells(out).values()}
    assert shards == {"1/2", "2/2"}  # both array tasks ran cells
    assert list((out / "analysis").rglob("report.md"))
    text = _finish_output(slurm, finish)
    assert "complete" in text and "Warning" not in text, text  # --quiet: no warnings


def test_a_cancelled_shard_leaves_the_campaign_incomplete_and_a_resubmission_finishes_it(
        slurm):
    out = slurm.parent / "out"
    array, finish = _submit(slurm, out, shards=3)
    subprocess.run(["scancel", f"{array}_1"], check=True)
    _wait(array, finish)
    assert not json.loads((out / "manifest.json").read_text())["complete"]
    assert "incomplete: resubmit the array" in _finish_output(slurm, finish)
    kept = _cells(out)
    assert 1 <= len(kept) <= 2  # the cancelled shard's cell is missing
    array, finish = _submit(slurm, out, shards=3)
    _wait(array, finish)
    assert json.loads((out / "manifest.json").read_text())["complete"]
    cells = _cells(out)
    assert len(cells) == 3
    for cell, record in kept.items():  # finished cells were skipped, not run again
        assert cells[cell]["started"] == record["started"]
    assert list((out / "analysis").rglob("report.md"))
