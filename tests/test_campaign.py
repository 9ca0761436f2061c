"""Campaigns: spec validation, sharding, refusal of changed configs, kill-and-resume, grids."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
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


def test_a_cuda_device_on_a_machine_without_one_is_refused_before_any_cell(tmp_path):
    """`lm_eval: {device: cuda}` on a CPU machine failed every cell with torch's AssertionError,
    and the closing advice was to rerun the same command."""
    import torch

    from lm_eval_ext.campaign import run_campaign

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    raw = {"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct_loglik"],
           "lm_eval": {"device": "cuda"}, "conditions": {"a": {}, "b": {"batch_size": 2}}}
    spec = build_spec(raw)
    with pytest.raises(ConfigError) as caught:
        run_campaign(spec, tmp_path / "out", "")
    assert str(caught.value) == (f"cell {spec.cells[0].cell_id}: device: cuda cannot run here: "
                                 "set device: cpu, or run the campaign on a machine with a GPU")
    assert not (tmp_path / "out").exists()
    from lm_eval_ext.campaign.preflight import check_cells

    check_cells(build_spec({**raw, "lm_eval": {"device": "cpu"}}).cells, devices=True)  # followed


def test_a_shard_beyond_the_cells_is_refused_before_anything_is_made(tmp_path):
    """`campaign --shard 5/5` of 3 cells created a folder and exited 0."""
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
    ({"models": {}}, "models: names no model; give label: model_args"),
    ({"conditions": {"a": {"precision": "bf16"}}},
     'conditions.a: precision is a model arg, not an lm_eval option; write model_args: '
     '"precision=bf16"'),  # was the embedded one
    ({"models": None}, "or leave models out for the embedded model alone"),
])
def test_bad_campaign_files_are_refused_with_the_fix(change, message):
    with pytest.raises(ConfigError, match=message):
        build_spec({**SMALL_CAMPAIGN, **change})


@pytest.mark.parametrize(("change", "message", "fixed", "built"), [
    ({"conditions": {"M 0": {}}}, "condition label 'M 0': use letters, digits and _.+- only (it "
     "names folders)", {"conditions": {"M_0": {}}}, ["M_0"]),
    ({"execution": "slow"}, "execution: 'slow' is not a mode; use fast (the default: replayed "
     "scoring, the fast generation path) or lm-eval (lm-eval's own forward and generation loop, "
     "as the paper ran)", {"execution": "lm-eval"}, ["M0", "M1", "M4_r2"]),
])
def test_a_bad_label_or_mode_is_told_the_fix_and_the_fix_builds(change, message, fixed, built):
    base = {k: v for k, v in SMALL_CAMPAIGN.items() if k not in ("compare", "subsets")}
    with pytest.raises(ConfigError) as error:
        build_spec({**base, **change})
    assert str(error.value) == message
    assert [c.condition for c in build_spec({**base, **fixed}).cells] == built  # followed


def test_a_comparison_of_two_benchmarks_is_refused_before_any_cell_runs():
    """Trial 19 (N19_155): a compare block pairing a BBQ cell with a CrowS-Pairs cell passed
    --dry-run, ran both cells, then stopped at the analysis ('the runs share no items')."""
    crows = {**SMALL_CAMPAIGN, "conditions": {
        **SMALL_CAMPAIGN["conditions"], "M1": {"tasks": ["crows_pairs_ext_loglik"]}}}
    with pytest.raises(ConfigError) as error:
        build_spec(crows)
    assert str(error.value) == (
        "compare.batching: M0 (bbq_subset_12p5pct_loglik) and M1 (crows_pairs_ext_loglik) are "
        "of two benchmarks (bbq, crows_pairs), which share no items to compare: compare "
        "conditions of one benchmark (a compare block names them)")
    fixed = {**crows, "compare": {"batching": {"reference": "M0", "runs": ["M4_r2"]}}}
    assert len(build_spec(fixed).cells) == 3  # followed
    with pytest.raises(ConfigError, match=r"^subsets: M0 \(bbq_subset_12p5pct_loglik\) and M1 "):
        build_spec({**fixed, "subsets": {"reference": "M0", "runs": ["M1"]}})


def test_a_scoring_path_that_is_not_one_is_told_the_two(tmp_path):
    from lm_eval_ext.campaign.grid import grid_campaign

    grid = {"models": {"a": "idle_seconds=0", "b": "idle_seconds=0,precision=int8"},
            "benchmarks": ["bbq_subset_12p5pct"]}
    with pytest.raises(ConfigError) as error:
        grid_campaign({**grid, "scoring_path": ["logprob"]})
    assert str(error.value) == "grid scoring_path 'logprob': use generative or loglik"
    with pytest.raises(ConfigError) as error:
        preset("paper-stress-test", path="logprob")
    assert str(error.value) == "--path 'logprob': use generative or loglik"
    assert build_spec(grid_campaign({**grid, "scoring_path": ["loglik"]})).cells  # followed
    assert {c["tasks"][0][-7:] for c in preset("paper-stress-test", path="loglik")[
        "conditions"].values() if "tasks" in c} == {"_loglik"}


def test_a_model_arg_written_as_an_option_is_told_its_place_and_that_works():
    spec = build_spec({"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct_loglik"],
                       "conditions": {"a": {"model_args": "precision=bf16"}}})
    assert [c.model_args for c in spec.cells] == ["precision=bf16"]


def test_a_campaign_without_models_runs_the_embedded_model_alone():
    spec = build_spec({k: v for k, v in SMALL_CAMPAIGN.items() if k != "models"})
    assert {cell.model_label for cell in spec.cells} == {"embedded"}


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
    # the record lists the cell's results, samples and card with their SHA-256 (damage found)
    listed = {Path(name).name.split("_")[0]: digest for name, digest in first["files"].items()}
    assert sorted(listed) == ["card.json", "results", "samples"]
    assert all(hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
               for name, digest in first["files"].items())
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
    # the cell's card is the card analyze derives for the same run (judge_rubrics once took
    # the model's identity)
    from lm_eval_ext.analysis.loader import load_runs

    [run] = load_runs([card_path.parent])
    assert json.loads(json.dumps(run.cards, default=str)) == card["tasks"]
    assert card["tasks"]["bbq_subset_12p5pct_loglik"]["judge_rubrics"] == {}
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
    """Records are read once into one table the jobs are planned from; a missing
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
    # a condition with its own limit is compared on the items both evaluated
    own_limit = build_spec({**SMALL_CAMPAIGN, "conditions": {
        **SMALL_CAMPAIGN["conditions"], "M1": {"batch_size": 4, "limit": 3}}})
    [job], _ = own_limit.analysis_jobs({c.cell_id: "x.json" for c in own_limit.cells})
    assert job.intersection
    with pytest.raises(ConfigError, match=f"cell {m0.cell_id} is not done; run the campaign"):
        subset_summary(spec, {}, {}, "smollm2", tmp_path / "subsets")


# -- no item scored twice (derived cells) -----------------------------------

#: a parent on the instrument's first 32 items and a subset cell whose first 24 lie inside them
DERIVING_CAMPAIGN = {
    "name": "deriving",
    "models": {"smollm2": "idle_seconds=0"},
    "conditions": {"M0": {"batch_size": 1, "limit": 32, "tasks": ["bbq_instrument_loglik"]},
                   "M4": {"batch_size": 1, "limit": 24, "tasks": ["bbq_subset_75pct_loglik"]}},
    "subsets": {"reference": "M0", "runs": ["M4"]},
}


def test_the_preset_derives_the_13_subset_cells_from_m0_and_m5b_from_m2():
    from lm_eval_ext.campaign.derivation import plan_derivations

    cells = build_spec(preset("paper-stress-test", path="loglik")).cells
    plan = {c.split("__")[1]: p.split("__")[1] for c, p in plan_derivations(cells).items()}
    m4 = [c.condition for c in cells if c.condition.startswith("M4_")]
    assert len(m4) == 13 and plan == {**{c: "M0" for c in m4}, "M5b": "M2"}
    assert not {"M0", "M1", "M2", "M3", "M5a"} & set(plan)  # measured
    assert plan_derivations(cells, measure_all=True) == {}
    # the generative path derives the same cells (greedy generation at batch 1)
    generative = build_spec(preset("paper-stress-test", path="generative")).cells
    assert {c.split("__")[1]: p.split("__")[1]
            for c, p in plan_derivations(generative).items()} == plan
    sampled = build_spec({**preset("paper-stress-test", path="generative"),
                          "lm_eval": {"gen_kwargs": "do_sample=True,temperature=0.7"}}).cells
    assert plan_derivations(sampled) == {}  # sampled texts depend on the random state
    # a limit of 40 on every cell: no subset's first 40 items lie inside the instrument's first 40
    assert plan_derivations(build_spec(preset("paper-stress-test", limit=40)).cells) == {}


def test_the_estimate_counts_a_derived_cell_at_its_recheck_and_each_load_once():
    """The dry run's estimate from measured rates (here: given ones)."""
    from lm_eval_ext.campaign.derivation import plan_derivations
    from lm_eval_ext.campaign.sizes import estimate_cells, rate_key

    cells = build_spec(preset("paper-stress-test", path="generative")).cells
    rates = {"precision=bf16": 0.1, "precision=int8": 10.0, "precision=nf4": 1.0}
    calibration = {rate_key(c): {"overhead_s": 25.0, "load_s": 5.0,
                                   "seconds_per_item": rates[c.model_args]} for c in cells}
    sizes = {c.task: 2000 if c.task == "bbq_instrument" else 1000 for c in cells}
    found = {e.cell_id.split("__")[1]: e for e in estimate_cells(
        cells, sizes, calibration, plan_derivations(cells))}
    # M0 loads bf16 (first of its group); M1 and the M4 cells share the loaded model
    assert found["M0"].seconds == pytest.approx(20 + 5 + 0.1 * 2000) and found["M0"].load_s == 5
    assert found["M1"].load_s == 0 and found["M1"].seconds == pytest.approx(20 + 0.1 * 2000)
    m5b = found["M5b"]  # derived from M2: 50 of its 1,000 items re-checked, int8 loaded by M2
    assert (m5b.parent.split("__")[1], m5b.items, m5b.run_items, m5b.load_s) == ("M2", 1000, 50, 0)
    assert m5b.seconds == pytest.approx(20 + 10.0 * 50)
    assert found["M2"].seconds == pytest.approx(25 + 10.0 * 2000)
    assert found["M4_75pct"].run_items == 50 and found["M5a"].run_items == 1000


def test_the_item_order_from_the_manifest_is_the_order_of_the_tasks_rows():
    from lm_eval_ext.campaign.derivation import bbq_item_order, items_within
    from lm_eval_ext.data.instrument import load_membership

    for membership in ("instrument", "75pct", "12p5pct_r3"):
        rows = load_membership(membership).rows  # the data, as the tasks load it
        task = "bbq_instrument_loglik" if membership == "instrument" else \
            f"bbq_subset_{membership}_loglik"
        assert bbq_item_order(task) == tuple((r["unit_id"], r["example_id"] % 4) for r in rows)
    spec = build_spec(DERIVING_CAMPAIGN)
    parent, child = spec.cells
    assert items_within(child, parent, bbq_item_order)
    longer = build_spec({**DERIVING_CAMPAIGN, "conditions": {
        **DERIVING_CAMPAIGN["conditions"], "M4": {**DERIVING_CAMPAIGN["conditions"]["M4"],
                                                  "limit": 25}}}).cells[1]
    assert not items_within(longer, parent, bbq_item_order)  # its 25th item is the instrument's 33rd


def test_a_derived_cell_changes_its_command_not_its_configuration(tmp_path):
    from lm_eval_ext.campaign.derivation import parent_answers, plan_derivations

    spec = build_spec(DERIVING_CAMPAIGN)
    parent, child = spec.cells
    plan = plan_derivations(spec.cells)
    assert plan == {child.cell_id: parent.cell_id}
    before = (child.config(), child.config_sha256())
    argv = child.lm_eval_argv("out", answers_from="/p/results_x.json")
    assert argv[argv.index("--model_args") + 1] == "idle_seconds=0,answers_from=/p/results_x.json"
    assert (child.config(), child.config_sha256()) == before
    assert "answers_from" not in json.dumps(spec.resolved())

    folder = CampaignFolder(tmp_path / "c")
    folder.bind(spec, "")
    versions = {"lm_eval": "0.4.13"}
    assert parent_answers(folder, plan, parent, versions) is None  # not a child
    assert parent_answers(folder, plan, child, versions).not_derived == (
        "the parent cell was not done when this cell started (another shard or worker has it, "
        "or it failed): measured in full")
    (folder.cells_dir / parent.cell_id / "output" / "m").mkdir(parents=True)
    record = {"output_path": f"cells/{parent.cell_id}/output/m/results_1.json",
              "packages": {"lm_eval": "0.4.12"}}
    (folder.cells_dir / parent.cell_id / "cell.json").write_text(json.dumps(record))
    assert parent_answers(folder, plan, child, versions).not_derived.startswith(
        "the parent cell is damaged (")  # its results file is missing
    (tmp_path / "c" / record["output_path"]).write_text("{}")
    assert "other package versions" in parent_answers(folder, plan, child, versions).not_derived
    record["packages"] = versions
    (folder.cells_dir / parent.cell_id / "cell.json").write_text(json.dumps(record))
    found = parent_answers(folder, plan, child, versions)
    assert (found.results, found.not_derived) == (
        (tmp_path / "c" / record["output_path"]).resolve(), None)


def test_a_failed_runs_cause_is_its_error_line_not_a_progress_bar():
    """A dry run's failed calibration showed the log's last line, a progress bar (trial 11)."""
    from lm_eval_ext.campaign.sizes import failure_line

    bar = "Running loglikelihood requests:  50%|#####     | 1/2 [00:01<00:01,  1.2it/s]"
    log = (f"INFO  Selected Tasks\nlm_eval: error: --limit 0: give a positive number\n{bar}\r"
           f"{bar}\n")
    assert failure_line(log) == "lm_eval: error: --limit 0: give a positive number"
    log = f"Traceback (most recent call last):\n  File x\nFileNotFoundError: no d.jsonl\n{bar}\n"
    assert failure_line(log) == "FileNotFoundError: no d.jsonl"
    assert failure_line("") == "(no output)"


@pytest.mark.slow
def test_a_dry_run_whose_calibration_fails_exits_1_with_the_cause(tmp_path, embedded_checkpoint):
    """Its calibration's failure was the log's last line, and the dry run exited 0 (trial 11)."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    _task_failing_on_its_second_item(tmp_path, tasks)
    spec_path = tmp_path / "c.yaml"
    spec_path.write_text(yaml.safe_dump({
        "models": {"smollm2": "idle_seconds=0"}, "tasks": ["gone_t"],
        "lm_eval": {"include_path": str(tasks)}, "conditions": {"M0": {}}}))
    result = run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(tmp_path / "d"),
                      "--dry-run", "--calibration-limit", "2"])
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = [x for x in result.stdout.splitlines() if x.startswith("calibration of")]
    assert line.startswith("calibration of smollm2__M0__gone_t failed: exit 1: ")
    assert "'str object' has no attribute 'x'" in line and "%|" not in line, line
    assert result.stderr.strip().splitlines()[-1] == (
        "a calibration run failed (its line above gives the cause): the cells of its "
        "configuration would fail the same way; fix what it names and dry-run again")


def _task_failing_on_its_second_item(tmp_path, tasks, target: int = 0) -> None:
    """A task whose prompt lm-eval renders for its first item as it builds the task, and for the
    second only once the model has loaded (a Jinja error there)."""
    (tmp_path / "d.jsonl").write_text('{"q": {"x": {"y": "a"}}}\n{"q": "hi"}\n')
    (tasks / "gone.yaml").write_text(
        "task: gone_t\ndataset_path: json\ndataset_kwargs: {data_files: {test: "
        f"{tmp_path / 'd.jsonl'}}}}}\ntest_split: test\noutput_type: multiple_choice\n"
        f"doc_to_text: '{{{{q.x.y}}}}'\ndoc_to_choice: [a, b]\ndoc_to_target: {target}\n")


def test_a_task_lm_eval_cannot_build_is_one_line(tmp_path, capsys):
    """A campaign's include-path task whose target is out of range was a bug line
    (IndexError) in the dry run's item count."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    _task_failing_on_its_second_item(tmp_path, tasks, target=5)
    spec_path = tmp_path / "c.yaml"
    spec_path.write_text(yaml.safe_dump({
        "models": {"smollm2": "idle_seconds=0"}, "tasks": ["gone_t"],
        "lm_eval": {"include_path": str(tasks)}, "conditions": {"M0": {}}}))
    argv = ["campaign", str(spec_path), "--out", str(tmp_path / "d"), "--dry-run",
            "--calibration-limit", "0"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (  # after datasets' bar
        "lm-eval-ext: error: lm-eval cannot build the task(s) gone_t (IndexError: list index out "
        f"of range); fix the task YAML in {tasks} (its keys, data files, prompt, choices or "
        "target), and run again")
    _task_failing_on_its_second_item(tmp_path, tasks)  # followed: it builds (and counts 2 items)
    assert main(argv) == 0
    assert "gone_t" in capsys.readouterr().out


@pytest.mark.slow
def test_a_campaign_derives_a_subset_cell_and_measure_all_measures_it(tmp_path, embedded_checkpoint):
    spec_path = tmp_path / "deriving.yaml"
    spec_path.write_text(yaml.safe_dump(DERIVING_CAMPAIGN))
    parent_id, child_id = (c.cell_id for c in build_spec(DERIVING_CAMPAIGN).cells)
    plans = [run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(tmp_path / d),
                      "--dry-run", "--calibration-limit", "0", *flag])
             for d, flag in (("plan", []), ("plan_all", ["--measure-all"]))]
    assert [f"answers_from=<{parent_id}>" in p.stdout for p in plans] == [True, False], plans

    derived = tmp_path / "derived"
    done = run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(derived), "--quiet",
                    *QUICK_ANALYSIS])
    assert done.returncode == 0, done.stdout + done.stderr
    # the same campaign measured in full, its parent cell copied over (done: not run again)
    measured = tmp_path / "measured"
    shutil.copytree(derived / "cells" / parent_id, measured / "cells" / parent_id)
    shutil.copy(derived / "campaign.json", measured / "campaign.json")
    done = run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(measured), "--quiet",
                    "--measure-all", *QUICK_ANALYSIS])
    assert done.returncode == 0 and "1 cells run, 1 already done" in done.stdout, done.stdout

    ours, theirs = (json.loads((f / "cells" / child_id / "cell.json").read_text())
                    for f in (derived, measured))
    assert ours["derived_from"] == parent_id and theirs["derived_from"] is None
    assert ours["config_sha256"] == theirs["config_sha256"] and ours["config"] == theirs["config"]
    derivation = ours["derivation"]
    assert (derivation["parent"], derivation["derived"], derivation["items"],
            derivation["rechecked_items"], derivation["matched_items"]) == (
        parent_id, True, 24, 10, 10)
    assert "derived_energy" in ours["energy_flags"]
    assert "derived_energy" not in theirs["energy_flags"] and "derivation" not in theirs
    pd.testing.assert_frame_equal(_items(derived / "cells" / child_id),
                                  _items(measured / "cells" / child_id))
    assert ours["metrics"] == theirs["metrics"]
    # the subset summary: one measured cell, so no fit (never an R^2 of 1 by construction)
    summary = json.loads((derived / "analysis" / "smollm2" / "subsets.json").read_text())
    fit = summary["energy_vs_items"]
    reference = json.loads((derived / "cells" / parent_id / "cell.json").read_text())
    measured_energies = 0 if reference["energy_joules"] is None else 1  # none on a CPU here
    assert fit["r_squared"] is None and fit["n"] == measured_energies
    assert fit["note"].startswith(f"not measured: {measured_energies} cell(s) with measured energy")
    assert summary["derived_energy_conditions"] == ["M4"]
    table = pd.read_csv(derived / "analysis" / "smollm2" / "subsets.csv")
    assert table["energy_derived"].tolist() == [False, True]


@pytest.mark.slow
def test_a_subset_run_that_also_differs_in_precision_is_named(tmp_path, embedded_checkpoint):
    """docs/campaigns.md's example gave M0 precision=bf16 and M4 no model args: on a CPU M4 ran
    in fp32, and subsets.csv reported the difference as the subset's alone (trial 8)."""
    campaign = {**DERIVING_CAMPAIGN, "name": "confounded", "conditions": {
        "M0": {"model_args": "precision=bf16", "batch_size": 1, "limit": 32,
               "tasks": ["bbq_instrument_loglik"]},
        "M4": {"batch_size": 1, "limit": 24, "tasks": ["bbq_subset_75pct_loglik"]},
        "M4_same": {"model_args": "precision=bf16", "batch_size": 1, "limit": 24,
                    "tasks": ["bbq_subset_75pct_loglik"]}},
        "subsets": {"reference": "M0", "runs": ["M4", "M4_same"]}}
    spec_path = tmp_path / "confounded.yaml"
    spec_path.write_text(yaml.safe_dump(campaign))
    done = run_cli(["lm-eval-ext", "campaign", str(spec_path), "--out", str(tmp_path / "out"),
                    "--quiet", "--measure-all", *QUICK_ANALYSIS])
    assert done.returncode == 0, done.stdout + done.stderr
    analysis = tmp_path / "out" / "analysis" / "smollm2"
    table = pd.read_csv(analysis / "subsets.csv", keep_default_na=False)
    assert dict(zip(table["condition"], table["also_differs"], strict=True)) == {
        "M0": "", "M4": "precision", "M4_same": ""}
    summary = json.loads((analysis / "subsets.json").read_text())
    assert summary["confounded_conditions"] == {"M4": "precision"}


def test_a_cells_end_line_says_whether_it_was_derived():
    from lm_eval_ext.campaign.derivation import outcome_note

    derived = {"derived_from": "m__M0__t", "derivation": {"parent": "m__M0__t",
                                                          "rechecked_items": 13,
                                                          "matched_items": 13}}
    assert outcome_note(derived) == "; derived from m__M0__t, 13/13 re-checked items matched"
    waited = {"derived_from": None, "derivation": {"parent": "m__M0__t",
                                                   "not_attempted": "the parent was not done"}}
    assert outcome_note(waited) == "; measured in full, not derived: the parent was not done"
    refused = {"derived_from": None, "derivation": {"parent": "m__M0__t", "not_attempted": None,
                                                    "derivation_refused": "1 of 13 differ"}}
    assert outcome_note(refused) == "; measured in full, not derived: 1 of 13 differ"
    assert outcome_note({"derived_from": None}) == ""


def test_a_campaigns_recheck_reaches_the_cells_it_derives_only(tmp_path):
    """trial 12: hf-metered took `recheck` without `answers_from` and re-checked nothing; it now
    refuses it, so a campaign passes its re-check args only with the parent's answers."""
    from lm_eval_ext.campaign.preflight import check_cells

    raw = {**DERIVING_CAMPAIGN, "models": {"embedded": "idle_seconds=0,recheck=0.2"}}
    parent, child = build_spec(raw).cells
    for cell in (parent, child):
        argv = cell.lm_eval_argv("out")
        assert argv[argv.index("--model_args") + 1] == "idle_seconds=0"
    argv = child.lm_eval_argv("out", answers_from="/p/results_x.json")
    assert argv[argv.index("--model_args") + 1] == (
        "idle_seconds=0,recheck=0.2,answers_from=/p/results_x.json")
    check_cells(build_spec(raw).cells)
    with pytest.raises(ConfigError) as error:
        check_cells(build_spec({**raw, "models": {"embedded": "recheck=2"}}).cells)
    assert str(error.value) == (
        "cell embedded__M0__bbq_instrument_loglik: hf-metered: model arg recheck='2' must be in "
        "(0, 1] (e.g. recheck=0.05); to measure every item, run without answers_from")


def test_a_conditions_gen_kwargs_and_metadata_add_to_the_campaigns():
    """trial 13: `lm_eval: {gen_kwargs: {max_gen_toks: 8}}` with a condition's
    `gen_kwargs: {do_sample: false}` dropped max_gen_toks for that condition only (its cells ran
    the task's default), and a grid's tier metadata replaced the campaign's metadata."""
    raw = {"models": {"smollm2": ""}, "tasks": ["bbq_subset_12p5pct"],
           "lm_eval": {"gen_kwargs": {"max_gen_toks": 8}, "metadata": {"seed_note": "a"}},
           "conditions": {"M0": {}, "M1": {"gen_kwargs": "do_sample=false,max_gen_toks=16",
                                           "metadata": {"template_tier": "cot"}}}}
    m0, m1 = build_spec(raw).cells
    assert m0.options["gen_kwargs"] == {"max_gen_toks": 8}
    assert m1.options["gen_kwargs"] == {"max_gen_toks": 16, "do_sample": False}
    assert m1.options["metadata"] == {"seed_note": "a", "template_tier": "cot"}
    argv = m1.lm_eval_argv("out")
    assert json.loads(argv[argv.index("--gen_kwargs") + 1]) == {"do_sample": False,
                                                                 "max_gen_toks": 16}
    with pytest.raises(ConfigError) as error:  # the merged settings are checked as one
        build_spec({**raw, "lm_eval": {"gen_kwargs": {"temperature": 0.0}},
                    "conditions": {"M0": {"gen_kwargs": {"do_sample": True}}}})
    assert str(error.value).startswith("conditions.M0 with lm_eval: gen_kwargs: do_sample=True,"
                                       "temperature=0.0: sampling needs a temperature above 0")


def test_sampling_set_in_one_part_and_its_temperature_in_the_other_is_one_setting():
    """The merged gen_kwargs are what a cell runs: the campaign's temperature serves the
    condition's do_sample, and sampling without any temperature is refused."""
    raw = {"models": {"smollm2": ""}, "tasks": ["bbq_subset_12p5pct"],
           "lm_eval": {"gen_kwargs": {"temperature": 0.7}},
           "conditions": {"M0": {"gen_kwargs": {"do_sample": True}}}}
    assert build_spec(raw).cells[0].options["gen_kwargs"] == {"temperature": 0.7,
                                                             "do_sample": True}
    with pytest.raises(ConfigError) as error:
        build_spec({**raw, "lm_eval": {}})
    assert str(error.value).startswith("conditions.M0: gen_kwargs: do_sample=True without a "
                                       "temperature samples at lm-eval's default temperature")


def test_the_advice_for_failed_cells_does_not_say_rerun_where_the_cell_was_refused():
    """trial 14: a cell refused for a setting of the campaign file (exit 2, the same every time)
    was told 'otherwise rerun the same command'."""
    from lm_eval_ext.campaign import CampaignOutcome
    from lm_eval_ext.cli.campaign import failed_cells_advice

    outcome = CampaignOutcome([], [], ["m__M0__t", "m__M1__t"], [], False, [],
                              refused=["m__M1__t"])
    assert failed_cells_advice(outcome, "out") == (
        "failed cells (logs under out/failed/): m__M0__t, m__M1__t; each one's error is on its "
        "line above; m__M1__t refused (exit 2) and would fail the same way again: do what the "
        "error says first (where it names a setting of the campaign file, fix the file and run "
        "it with a new --out folder: a changed file is another campaign); m__M0__t: once what "
        "the error names is fixed (memory, disk, a file), rerun the same command (finished "
        "cells are kept)")
    only_refused = CampaignOutcome([], [], ["m__M1__t"], [], False, [], refused=["m__M1__t"])
    assert "rerun the same command" not in failed_cells_advice(only_refused, "out")


def test_a_cells_lm_eval_options_are_checked_as_the_command_line_checks_them(tmp_path):
    """trial 15: `fewshot_as_multiturn: true` without apply_chat_template passed the campaign's
    checks and its dry run; the cell failed with lm-eval's ValueError on every rerun."""
    from lm_eval_ext.campaign.preflight import check_cells

    raw = {"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct_loglik"], "lm_eval": {"limit": 2},
           "conditions": {"M0": {}, "M1": {"fewshot_as_multiturn": True}}}
    with pytest.raises(ConfigError) as caught:
        check_cells(build_spec(raw).cells)
    assert str(caught.value) == (
        "cell m__M1__bbq_subset_12p5pct_loglik: --fewshot_as_multiturn needs "
        "--apply_chat_template (lm-eval's rule): add it, or leave --fewshot_as_multiturn out (in "
        "the campaign file, each lm_eval option is its flag's name without --)")
    raw["conditions"]["M1"]["apply_chat_template"] = True  # the fix, followed
    check_cells(build_spec(raw).cells)


def test_a_cells_samples_out_of_order_are_refused_before_any_cell():
    """lm-eval logs `samples: [7, 5]` answers under each other's index (trial 15's --samples
    case); a campaign cell is held to the command line's rule."""
    from lm_eval_ext.campaign.preflight import check_cells

    task = "bbq_subset_12p5pct_loglik"
    raw = {"models": {"m": ""}, "tasks": [task],
           "conditions": {"M0": {"samples": {task: [7, 5]}}}}
    with pytest.raises(ConfigError, match=r"cell m__M0__bbq_subset_12p5pct_loglik: --samples .*"
                                          r"is not in ascending order without repeats"):
        check_cells(build_spec(raw).cells)
    raw["conditions"]["M0"]["samples"] = {task: [5, 7]}  # the fix
    check_cells(build_spec(raw).cells)


def test_gen_kwargs_that_reach_no_generative_cell_are_refused():
    """trial 15: `lm_eval: {gen_kwargs: ...}` in a campaign of log-likelihood cells only was
    passed to every cell and used by none."""
    from lm_eval_ext.campaign.preflight import check_cells

    raw = {"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct_loglik"],
           "lm_eval": {"gen_kwargs": "max_gen_toks=24"}, "conditions": {"M0": {}}}
    with pytest.raises(ConfigError) as caught:
        check_cells(build_spec(raw).cells)
    assert str(caught.value) == (
        "gen_kwargs (the lm_eval block's or a condition's) applies to generation, and "
        "bbq_subset_12p5pct_loglik scores by log-likelihood (lm-eval would record the setting and "
        "use it nowhere): leave gen_kwargs (the lm_eval block's or a condition's) out, or run the "
        "generative form (bbq_subset_12p5pct)")
    check_cells(build_spec({**raw, "tasks": ["bbq_subset_12p5pct_loglik",
                                             "bbq_subset_12p5pct"]}).cells)  # one generates


def test_the_subsets_block_is_named_as_itself():
    """trial 16: an undefined condition in `subsets:` was called 'compare.subsets'."""
    with pytest.raises(ConfigError, match=r"^subsets: condition 'M5' is not defined"):
        build_spec({"models": {"m": ""}, "tasks": ["bbq_subset_12p5pct_loglik"],
                    "conditions": {"M0": {}}, "subsets": {"reference": "M5", "runs": ["M0"]}})


def test_the_subset_fit_says_why_it_has_too_few_measured_cells():
    """Trial 19 (N19_121): with no energy counter (a CPU) the note said derived energies are
    proportional by construction and to rerun with --measure-all, though no cell was derived
    and --measure-all reads no counter either."""
    from lm_eval_ext.campaign.subsets import _fit

    sizes = np.array([16.0, 8.0, 4.0])
    unread = _fit(sizes, np.full(3, np.nan), np.array([True, True, True]))
    assert unread["note"] == (
        "not measured: 0 cell(s) with measured energy, a fit needs 3 with different sizes (3 "
        "with no energy reading (this machine has no counter the run could read: "
        "docs/energy.md))")
    derived = _fit(sizes, np.array([160.0, 80.0, 40.0]), np.array([True, False, False]))
    assert derived["note"].endswith("(2 derived: proportional by construction (run the "
                                    "campaign with --measure-all to measure every cell))")
    same = _fit(np.full(3, 8.0), np.array([80.0, 81.0, 79.0]), np.ones(3, bool))
    assert same["note"].endswith("different sizes (they are all of one size)")
    fitted = _fit(sizes, np.array([160.0, 80.0, 40.0]), np.ones(3, bool))
    assert fitted["slope"] == pytest.approx(10.0) and fitted["r_squared"] == pytest.approx(1.0)
    assert fitted["note"] is None
