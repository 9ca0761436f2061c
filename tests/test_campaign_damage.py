"""A campaign folder damaged after its cells finished: each cell found damaged and run again,
every file that cannot be read named in one line (trial 10)."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import yaml

from lm_eval_ext.campaign import status_lines
from lm_eval_ext.campaign.spec import build_spec
from lm_eval_ext.campaign.store import CampaignFolder
from lm_eval_ext.cli import main as cli_main
from lm_eval_ext.errors import ConfigError

CAMPAIGN = {"name": "damage", "models": {"m": "idle_seconds=0"},
            "tasks": ["bbq_subset_12p5pct_loglik"], "lm_eval": {"limit": 2},
            "conditions": {"M0": {"batch_size": 1}, "M1": {"batch_size": 4}}}


@pytest.fixture
def finished(tmp_path):
    """A campaign folder whose two cells finished, each with a results and a samples file."""
    spec = build_spec(CAMPAIGN)
    folder = CampaignFolder(tmp_path / "c")
    folder.bind(spec, yaml.safe_dump(CAMPAIGN))
    for cell in spec.cells:
        inflight = folder.start(cell)
        out = inflight / "output" / "model"
        out.mkdir(parents=True)
        (out / "results_1.json").write_text('{"results": {}}')
        (out / f"samples_{cell.task}_1.jsonl").write_text('{"doc_id": 0}\n')
        where = f"cells/{cell.cell_id}/output/model/"
        files = {where + p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in sorted(out.iterdir())}
        folder.finish(cell, inflight, {"cell_id": cell.cell_id, "status": "done",
                                       "output_path": where + "results_1.json", "files": files})
    return spec, folder


def _cell_file(folder, spec, name):
    return folder.cells_dir / spec.cells[0].cell_id / name


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda path: path.write_text("{"), "cell.json cannot be read (not valid JSON: Expecting"),
    (lambda path: path.write_text(""), "cell.json cannot be read (not valid JSON: Expecting"),
    (lambda path: path.write_text("[]"), "cell.json holds no cell record"),
    (lambda path: shutil.rmtree(path.parent / "output"), "results_1.json is missing"),
    (lambda path: (path.parent / "output" / "model" / "results_1.json").write_text('{"res'),
     "results_1.json changed since the cell finished (its SHA-256)"),
    (lambda path: next((path.parent / "output" / "model").glob("samples_*")).write_text(
        '{"doc_id": 1}\n'), "_1.jsonl changed since the cell finished (its SHA-256)"),
])
def test_a_damaged_cell_is_named_and_no_longer_done(finished, damage, reason):
    """trial 10: a cut cell.json was a bug line; a deleted output folder or a cut results
    file left `--status` saying complete, and a resume skipped the cell as done."""
    spec, folder = finished
    assert [folder.record(c) is not None for c in spec.cells] == [True, True]
    damage(_cell_file(folder, spec, "cell.json"))
    assert folder.record(spec.cells[0]) is None  # the next run runs it again
    assert folder.record(spec.cells[1]) is not None
    lines, complete = status_lines(spec, folder.root)
    assert not complete and lines[-1] == "damage: 2 cells: 1 damaged, 1 done"
    assert lines[0].startswith(f"{spec.cells[0].cell_id}: damaged (") and reason in lines[0]
    assert lines[0].endswith("; the next run of its shard runs it again)")


def test_the_status_command_says_it_in_lines_and_exits_1(finished, capsys, tmp_path):
    spec, folder = finished
    _cell_file(folder, spec, "cell.json").write_text("[]")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CAMPAIGN))
    assert cli_main.main(["campaign", str(path), "--status", "--out", str(folder.root)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "damage: 2 cells: 1 damaged, 1 done"
    # trial 15: without the file, --status asked for it; the folder keeps its own copy
    assert cli_main.main(["campaign", "--status", "--out", str(folder.root)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "damage: 2 cells: 1 damaged, 1 done"


def test_a_damaged_identity_file_is_one_line(finished):
    spec, folder = finished
    folder.identity_path.write_text("{")
    with pytest.raises(ConfigError) as caught:
        folder.check(spec)
    assert str(caught.value).startswith(f"{folder.identity_path} cannot be read (not valid JSON")
    # trial 16 (N16_256): the line named the file, not what to do
    assert str(caught.value).endswith("); it names the campaign the folder holds: restore it "
                                      "from a copy, or use a new --out folder")
    folder.identity_path.write_text("[]")
    with pytest.raises(ConfigError) as caught:
        folder.check(spec)
    assert str(caught.value) == (
        f"{folder.identity_path} is damaged (it holds no campaign configuration); it names the "
        "campaign the folder holds: restore it from a copy, or use a new --out folder")


def test_a_record_without_file_digests_still_needs_a_readable_results_file(finished):
    """Cells finished before records listed their files: the results file must read as JSON."""
    spec, folder = finished
    path = _cell_file(folder, spec, "cell.json")
    record = json.loads(path.read_text())
    del record["files"]
    path.write_text(json.dumps(record))
    assert folder.record(spec.cells[0]) == record
    (folder.root / record["output_path"]).write_text('{"res')
    _, damage = folder.read_record(spec.cells[0])
    assert damage.startswith(f"{folder.root / record['output_path']} cannot be read (not valid")


def test_analyze_only_with_a_damaged_cell_exits_1(finished, capsys, tmp_path):
    """trial 11: --analyze-only skipped the comparison of a damaged cell and exited 0."""
    spec, folder = finished
    _cell_file(folder, spec, "cell.json").write_text("[]")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CAMPAIGN))
    assert cli_main.main(["campaign", str(path), "--analyze-only", "--quiet", "--out",
                          str(folder.root)]) == 1
    captured = capsys.readouterr()
    assert "analysis m/all skipped: cells not done: m__M0__bbq_subset_12p5pct_loglik" in \
        captured.out + captured.err
    assert captured.err.strip().splitlines()[-1] == (
        f"not every cell is done (`lm-eval-ext campaign {path} --out {folder.root} --status` "
        "lists them); the comparisons whose cells are not done were not analysed")
    assert cli_main.main(["campaign", str(path), "--out", str(folder.root), "--status"]) == 1
    assert "m__M0__bbq_subset_12p5pct_loglik: damaged (" in capsys.readouterr().out  # followed
    # trial 16 (N16_232): without the file, --analyze-only asked for it; the folder keeps a copy
    assert cli_main.main(["campaign", "--analyze-only", "--quiet", "--out",
                          str(folder.root)]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"not every cell is done (`lm-eval-ext campaign --out {folder.root} --status` lists "
        "them); the comparisons whose cells are not done were not analysed")


def test_a_dry_run_without_the_file_reads_the_folders_copy(finished, capsys):
    """Trial 16 (N16_233): `campaign --dry-run --out DIR` asked for CAMPAIGN.yaml."""
    spec, folder = finished
    assert cli_main.main(["campaign", "--dry-run", "--calibration-limit", "0", "--out",
                          str(folder.root)]) == 0
    out = capsys.readouterr().out
    assert all(cell.cell_id in out for cell in spec.cells)



def test_judge_on_a_log_likelihood_campaign_is_refused_before_any_cell(tmp_path, capsys):
    """Trial 16 (N16_243): the cells ran, then the judge step found nothing to judge."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CAMPAIGN))
    out = tmp_path / "never"
    assert cli_main.main(["campaign", str(path), "--judge", "--quiet", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        "lm-eval-ext: error: --judge scores generated reasoning, and every task of the campaign "
        "scores by log-likelihood (bbq_subset_12p5pct_loglik): leave --judge out, or use the "
        "generative tasks (without _loglik)")
    assert not out.exists()
    from lm_eval_ext.campaign.preflight import check_judgeable

    check_judgeable(build_spec({**CAMPAIGN, "tasks": ["bbq_subset_12p5pct"]}).cells)  # followed
