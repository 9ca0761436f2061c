"""Campaigns: spec validation, sharding, refusal of changed configs, kill-and-resume, grids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import QUICK_ANALYSIS, SMALL_CAMPAIGN, run_cli

from lm_eval_ext.campaign import build_spec, shard_cells
from lm_eval_ext.campaign.presets import preset
from lm_eval_ext.campaign.store import HOST, CampaignFolder
from lm_eval_ext.cli.main import main
from lm_eval_ext.errors import ConfigError


def test_paper_preset_has_the_papers_19_cells():
    spec = build_spec(preset("paper-stress-test", path="loglik", large_batch=32))
    conditions = {c.condition: c for c in spec.cells}
    assert len(spec.cells) == 19 and len([c for c in conditions if c.startswith("M4_")]) == 13
    assert conditions["M0"].model_args == "precision=bf16" and conditions["M0"].options == {
        "batch_size": 1}
    assert conditions["M2"].model_args == "precision=int8"
    assert conditions["M3"].model_args == "precision=nf4"
    assert conditions["M1"].options["batch_size"] == 32
    assert conditions["M5a"].task == conditions["M5b"].task == "bbq_subset_50pct_loglik"
    assert conditions["M5b"].model_args == "precision=int8"
    assert conditions["M4_12p5pct_r5"].task == "bbq_subset_12p5pct_r5_loglik"
    with pytest.raises(ConfigError, match="only bbq"):
        preset("paper-stress-test", tasks="truthfulqa")


@pytest.mark.parametrize("count", [1, 2, 3, 5, 19])
def test_shards_partition_the_cells(count):
    cells = build_spec(preset("paper-stress-test")).cells
    shards = [shard_cells(cells, i, count) for i in range(1, count + 1)]
    flat = [c.cell_id for shard in shards for c in shard]
    assert sorted(flat) == sorted(c.cell_id for c in cells) and len(flat) == len(set(flat))


def test_a_shard_beyond_the_cells_is_refused_before_anything_is_made(tmp_path):
    """Issue 39: `campaign --shard 5/5` of 3 cells created a folder and exited 0."""
    from lm_eval_ext.campaign import run_campaign

    spec = build_spec({"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct_loglik"],
                       "conditions": {"a": {}, "b": {}, "c": {}}})
    assert len(shard_cells(spec.cells, 3, 5)) == 1
    with pytest.raises(ConfigError, match=r"--shard 5/5: the campaign has 3 cell\(s\), so shard "
                                          "5 would run nothing; use at most 3 shards"):
        run_campaign(spec, tmp_path / "out", "", shard="5/5")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("change", "message"), [
    ({"lm_eval": {"output_path": "x"}}, "set by the campaign itself"),
    ({"lm_eval": {"batchsize": 2}}, "unknown lm_eval option 'batchsize'; valid: batch_size"),
    ({"models": {"bad label": ""}}, "letters, digits"),
    ({"compare": {"x": {"reference": "M9", "runs": ["M1"]}}}, "'M9' is not defined"),
    ({"tasks": []}, "non-empty list"),
])
def test_bad_campaign_files_are_refused_with_the_fix(change, message):
    with pytest.raises(ConfigError, match=message):
        build_spec({**SMALL_CAMPAIGN, **change})


def test_changed_configuration_is_refused_naming_the_keys(tmp_path):
    folder = CampaignFolder(tmp_path / "c")
    folder.bind(build_spec(SMALL_CAMPAIGN), yaml.safe_dump(SMALL_CAMPAIGN))
    changed = {**SMALL_CAMPAIGN, "conditions": {**SMALL_CAMPAIGN["conditions"], "M1": {"batch_size": 8}}}
    with pytest.raises(ConfigError) as error:
        folder.bind(build_spec(changed), "")
    assert "cells.smollm2__M1__bbq_subset_12p5pct_loglik.options.batch_size: 4 -> 8" in str(
        error.value)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("not a campaign")
    with pytest.raises(ConfigError, match="not a campaign folder"):
        CampaignFolder(tmp_path / "other").bind(build_spec(SMALL_CAMPAIGN), "")


def _items(cell_dir: Path) -> pd.DataFrame:
    [samples] = cell_dir.rglob("samples_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    return pd.DataFrame({"doc_id": [r["doc_id"] for r in rows],
                         "resps": [json.dumps(r["resps"]) for r in rows]}).sort_values("doc_id")


@pytest.mark.slow
def test_killed_sharded_campaign_resumes_and_equals_an_uninterrupted_run(tmp_path, capsys,
                                                                          embedded_checkpoint):
    spec_path = tmp_path / "small.yaml"
    spec_path.write_text(yaml.safe_dump(SMALL_CAMPAIGN))
    # the uninterrupted reference of the cell that will be killed: the same cell (same id and
    # configuration) in a campaign of its own
    alone = tmp_path / "alone.yaml"
    alone.write_text(yaml.safe_dump({**{k: v for k, v in SMALL_CAMPAIGN.items()
                                        if k not in ("compare", "subsets")},
                                     "conditions": {"M4_r2": SMALL_CAMPAIGN["conditions"]["M4_r2"]}}))
    whole = run_cli(["lm-eval-ext", "campaign", str(alone), "--out", str(tmp_path / "whole"),
                     "--quiet", "--no-analyze"])
    assert whole.returncode == 0, whole.stdout + whole.stderr

    # shard 1/2 (cells M0 and M4_r2) killed, whole process group, while M4_r2 runs
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "lm_eval_ext.cli.main", "campaign", str(spec_path),
               "--out", str(out), "--shard", "1/2", "--quiet", *QUICK_ANALYSIS]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any((out / ".inflight").glob("smollm2__M4_r2__*")):
        assert process.poll() is None, "the campaign ended before it could be killed"
        time.sleep(0.2)
    time.sleep(2.0)  # lm-eval is starting the cell now
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    first_cell = "smollm2__M0__bbq_subset_12p5pct_loglik"
    assert sorted(p.name for p in (out / "cells").iterdir()) == [first_cell]
    first = json.loads((out / "cells" / first_cell / "cell.json").read_text())
    # (the light commands run in process: the console script's own function)
    assert main(["campaign", str(spec_path), "--out", str(out), "--status"]) == 1
    status = capsys.readouterr().out
    assert "smollm2__M1__bbq_subset_12p5pct_loglik: pending" in status
    assert "1 done, 1 interrupted, 1 pending" in status, status

    other = run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(out), "--shard",
                     "2/2", "--quiet", *QUICK_ANALYSIS])
    assert other.returncode == 0 and "1 cells run" in other.stdout and "incomplete" in other.stdout
    resumed = run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(out), "--shard",
                       "1/2", "--quiet", *QUICK_ANALYSIS])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "1 cells run, 1 already done" in resumed.stdout and "report:" in resumed.stdout
    assert json.loads((out / "cells" / first_cell / "cell.json").read_text()) == first  # kept
    assert not list((out / ".inflight").iterdir()) and not list((out / ".locks").iterdir())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["counts"] == {"done": 3}
    killed_cell = "smollm2__M4_r2__bbq_subset_12p5pct_r2_loglik"  # rerun from scratch
    pd.testing.assert_frame_equal(_items(out / "cells" / killed_cell),
                                  _items(tmp_path / "whole" / "cells" / killed_cell))
    # the analysis of the finished campaign
    assert (out / "analysis" / "smollm2" / "batching" / "report.md").is_file()
    differences = pd.read_csv(out / "analysis" / "smollm2" / "batching" / "card_differences.csv")
    assert differences["differences"].tolist() == ["batch_size: 1 -> 4"]
    [card_path] = (out / "cells" / "smollm2__M1__bbq_subset_12p5pct_loglik").rglob("card.json")
    card = json.loads(card_path.read_text())
    assert (card["model_label"], card["condition"]) == ("smollm2", "M1")
    assert card["tasks"]["bbq_subset_12p5pct_loglik"]["batch_size"] == "4"
    assert card["tasks"]["bbq_subset_12p5pct_loglik"]["n_items"] == 5
    subsets = pd.read_csv(out / "analysis" / "smollm2" / "subsets.csv")
    assert list(subsets["condition"]) == ["M0", "M4_r2"] and (subsets["n_items"] == 5).all()

    capsys.readouterr()
    assert main(["campaign", str(spec_path), "--out", str(out), "--analyze-only", "--quiet",
                 *QUICK_ANALYSIS]) == 0
    again = capsys.readouterr().out
    assert "0 cells run, 3 already done" in again, again

    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump({**SMALL_CAMPAIGN, "lm_eval": {"limit": 4}}))
    assert main(["campaign", str(changed), "--out", str(out)]) == 2
    refused = capsys.readouterr().err
    assert "options.limit: 5 -> 4" in refused and "Nothing was run" in refused


@pytest.mark.slow
def test_dry_run_lists_cells_with_items_and_a_calibrated_estimate(tmp_path, embedded_checkpoint):
    spec_path = tmp_path / "small.yaml"
    spec_path.write_text(yaml.safe_dump({**SMALL_CAMPAIGN, "lm_eval": {"limit": 200}}))
    result = run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(tmp_path / "d"),
                      "--dry-run", "--calibration-limit", "2", "--shard", "1/2"])
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines if line.startswith("smollm2__")}
    # shard 1/2: M0 and M4_r2; the 12.5% memberships have 248 items, cut by limit 200
    assert sorted(rows) == ["smollm2__M0__bbq_subset_12p5pct_loglik",
                            "smollm2__M4_r2__bbq_subset_12p5pct_r2_loglik"]
    assert all(" 200 items" in row and "? s" not in row for row in rows.values())
    assert "2 cells to run (shard 1/2 of 3); estimated device time" in lines[-1]
    assert not (tmp_path / "d").exists()  # nothing run, nothing written


def test_cell_locks_share_work_and_take_over_from_killed_holders(tmp_path):
    spec = build_spec(SMALL_CAMPAIGN)
    folder = CampaignFolder(tmp_path / "c")
    folder.bind(spec, "")
    cell = spec.cells[0]
    lock = folder.acquire(cell)
    assert not isinstance(lock, str)
    busy = folder.acquire(cell)  # a second worker on this machine skips the cell
    assert isinstance(busy, str) and f"running in process {os.getpid()}" in busy
    assert folder.status(spec)[0]["status"] == "running"
    lock.release()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lock.path.write_text(json.dumps({"host": HOST, "pid": int(dead.stdout),
                                     "started": "earlier"}))  # a holder that was killed
    assert folder.status(spec)[0]["status"] == "interrupted"
    taken = folder.acquire(cell)  # the killed holder's claim is taken over
    assert not isinstance(taken, str)
    taken.release()


def test_a_copy_that_kept_only_the_records_resumes(tmp_path):
    """A folder copied without its hidden folders (e.g. only campaign.json and cell.json files)
    is bound again and its cells can be claimed (the layout folders are recreated)."""
    spec = build_spec(SMALL_CAMPAIGN)
    folder = CampaignFolder(tmp_path / "c")
    folder.bind(spec, "")
    for hidden in (".locks", ".inflight"):
        (tmp_path / "c" / hidden).rmdir()
    folder.bind(spec, "")
    lock = folder.acquire(spec.cells[0])
    assert not isinstance(lock, str)
    lock.release()
    assert folder.start(spec.cells[0]).parent == tmp_path / "c" / ".inflight"


def test_the_analysis_plans_from_one_table_of_records_and_names_a_cell_that_is_not_done(tmp_path):
    """Issue 41: records are read once into one table the jobs are planned from; a missing
    cell is a skipped comparison or an error naming it, not an assert (gone under python -O)."""
    from lm_eval_ext.campaign.subsets import subset_summary

    spec = build_spec(SMALL_CAMPAIGN)
    folder = CampaignFolder(tmp_path / "out")
    folder.bind(spec, "")
    assert folder.records(spec) == {}
    m0, m1, _ = spec.cells
    jobs, skipped = spec.analysis_jobs({})
    assert jobs == [] and skipped == [f"analysis smollm2/batching skipped: cells not done: "
                                      f"{m0.cell_id}, {m1.cell_id}"]
    jobs, skipped = spec.analysis_jobs({m0.cell_id: "a.json", m1.cell_id: "b.json"})
    assert skipped == [] and [(j.reference, j.runs, str(j.out), j.intersection) for j in jobs] == [
        ("M0=a.json", ("M1=b.json",), "analysis/smollm2/batching", False)]
    with pytest.raises(ConfigError, match=f"cell {m0.cell_id} is not done; run the campaign"):
        subset_summary(spec, {}, {}, "smollm2", tmp_path / "subsets")
