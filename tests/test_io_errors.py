"""Ordinary I/O problems on a user's path are one line naming the path and the cause.

Real file systems stand in for the cases (conftest's ``mounted_filesystem``: a full or a
read-only tmpfs), ``/proc`` for a path that cannot be made, ``/dev/full`` for a full disk under
one file. Usage errors exit 2, a full disk 1; nothing is left half-written: a command that fails
leaves the earlier folder as it was, and the same command reruns once the cause is fixed.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from helpers import run_cli, save_lm_eval_run

from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.cli import main as cli_main
from lm_eval_ext.data.instrument import load_membership

FAST = ["--bootstrap", "100", "--mc-draws", "10", "--no-progress"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
    """A reference and a run of the 12.5% membership (248 items), in lm-eval's layout."""
    rows = load_membership("12p5pct").rows
    rng = np.random.default_rng(0)
    base = simulate_predictions(rows, 0.5, rng)
    folder = tmp_path_factory.mktemp("runs")
    write_run(folder / "ref", "bbq_subset_12p5pct_loglik", rows, base)
    write_run(folder / "run", "bbq_subset_12p5pct_loglik", rows,
              simulate_predictions(rows, 0.5, rng, base=base, flip_rate=0.2))
    return folder / "ref", folder / "run"


def _one_line(argv: list[str], capsys, code: int) -> str:
    """Run a command in process: its exit code, and its one line on stderr (no traceback)."""
    assert cli_main.main(argv) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _analyze(runs, out) -> list[str]:
    return ["analyze", "--reference", str(runs[0]), "--runs", str(runs[1]), "--out", str(out),
            *FAST]


def test_analyze_into_a_path_that_cannot_be_made_is_refused_before_the_work(runs, capsys):
    line = _one_line(_analyze(runs, "/proc/x/analysis"), capsys, 2)
    assert line == ("lm-eval-ext: error: cannot write /proc/x/analysis: No such file or "
                    "directory; a folder on the path does not exist and cannot be made there: "
                    "pass another path")


def test_analyze_into_a_read_only_file_system_is_one_line(runs, capsys, mounted_filesystem):
    out = mounted_filesystem("64k", read_only=True) / "analysis"
    line = _one_line(_analyze(runs, out), capsys, 2)
    assert f"cannot write {out}: Read-only file system" in line


def test_a_full_disk_leaves_no_half_written_analysis_and_the_rerun_works(runs, capsys,
                                                                         mounted_filesystem):
    disk = mounted_filesystem("64k")
    out = disk / "analysis"
    line = _one_line(_analyze(runs, out), capsys, 1)
    assert line == (f"lm-eval-ext: error: cannot write {out}: No space left on device; the "
                    "disk or quota is full: free space and rerun")
    assert list(disk.iterdir()) == []  # no --out, no staging folder
    subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
    assert cli_main.main(_analyze(runs, out)) == 0
    assert (out / "report.md").is_file() and list(disk.iterdir()) == [out]


def test_an_earlier_analysis_is_kept_until_overwrite_is_passed(runs, tmp_path, capsys):
    out = tmp_path / "analysis"
    assert cli_main.main(_analyze(runs, out)) == 0
    capsys.readouterr()
    line = _one_line(_analyze(runs, out), capsys, 2)
    assert line == (f"lm-eval-ext: error: --out {out} holds an earlier analysis; choose a new "
                    "folder or pass --overwrite to replace it")
    assert cli_main.main([*_analyze(runs, out), "--overwrite"]) == 0  # followed
    assert capsys.readouterr().out.startswith("synthetic-model@bf16/bs1/12p5pct#2: accuracy "
                                              "-1.21 pp [-4.84, +2.02]")


def test_an_out_folder_of_other_files_is_told_to_choose_a_new_one(runs, tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mine.txt").write_text("keep")
    assert _one_line([*_analyze(runs, notes), "--overwrite"], capsys, 2) == (
        f"lm-eval-ext: error: --out {notes} is not empty and holds no earlier analysis; choose "
        "a new folder")
    assert cli_main.main(_analyze(runs, tmp_path / "new")) == 0  # followed
    assert (notes / "mine.txt").read_text() == "keep"


def test_a_full_disk_keeps_the_earlier_analysis_whole(runs, capsys, mounted_filesystem):
    disk = mounted_filesystem("16m")
    out = disk / "analysis"
    assert cli_main.main(_analyze(runs, out)) == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    filler = disk / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k", "count=1000"],
                   capture_output=True, check=False)  # the disk is full minus a little
    filler.with_name("room").write_bytes(b"")
    line = _one_line([*_analyze(runs, out), "--overwrite"], capsys, 1)
    assert "No space left on device" in line
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in disk.iterdir()) == ["analysis", "filler", "room"]


@pytest.mark.parametrize("kind", ["samples", "results"])
def test_bytes_that_are_not_utf8_name_the_file(runs, kind, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(runs[1], run)
    damaged = next(run.rglob(f"{kind}_*"))
    damaged.write_bytes(damaged.read_bytes()[:100] + b"\xff\xfe" + damaged.read_bytes()[100:])
    line = _one_line(["analyze", "--reference", str(runs[0]), "--runs", str(run), "--out",
                      str(tmp_path / "out"), *FAST], capsys, 2)
    assert line == (f"lm-eval-ext: error: cannot read {damaged}: it is not UTF-8 text (byte "
                    "0xff at offset 100); pass the file lm-eval wrote, not a damaged or "
                    "converted copy")


def test_a_card_on_a_full_disk_is_one_line(capsys):
    line = _one_line(["mde", "--m", "100", "--rho-d", "0.1", "--card", "/dev/full"], capsys, 1)
    assert line == ("lm-eval-ext: error: cannot write /dev/full: No space left on device; the "
                    "disk or quota is full: free space and rerun")


def test_an_existing_card_is_kept_unless_overwrite_is_passed(tmp_path, capsys):
    """`mde --card` replaced an earlier pre-registration card without a word."""
    card = tmp_path / "card.md"
    card.write_text("- **MDE target**: 9.99 pp (the plan as registered)\n")
    argv = ["mde", "--m", "500", "--rho-d", "0.1", "--card", str(card)]
    line = _one_line(argv, capsys, 2)
    assert line == (f"lm-eval-ext: error: --card {card} exists (an earlier card is a record of "
                    "what was planned); name another file, or pass --overwrite to replace it")
    assert card.read_text() == "- **MDE target**: 9.99 pp (the plan as registered)\n"
    assert cli_main.main([*argv, "--overwrite"]) == 0  # the advice, followed
    assert card.read_text().splitlines()[2].startswith("- **m** (paired items): 500; ")


def test_a_card_onto_a_file_mde_did_not_write_is_refused_even_with_overwrite(tmp_path, capsys):
    """Trial 17 (N17_200): --card onto an analysis's report.md was refused as 'an earlier
    card' and offered --overwrite, which would have replaced the report."""
    report = tmp_path / "report.md"
    report.write_text("# Did the conclusion change?\n")
    for extra in ([], ["--overwrite"]):
        line = _one_line(["mde", "--m", "500", "--rho-d", "0.1", "--card", str(report),
                          *extra], capsys, 2)
        assert line == (f"lm-eval-ext: error: --card {report} exists and is not a card mde "
                        "wrote (it does not begin with '- **MDE target**:'); name another file")
    assert report.read_text() == "# Did the conclusion change?\n"


def test_recommend_out_that_is_a_file_or_on_a_full_disk(tmp_path, capsys, mounted_filesystem):
    from helpers import write_pilot

    pilot = write_pilot(tmp_path / "pilot", {"ref": 4000.0, "int8": 1000.0})
    file = tmp_path / "card.txt"
    file.write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5", "--out", str(file)])
    assert exit_info.value.code == 2 and file.read_text() == "mine"
    assert f"argument --out: {file} is a file" in capsys.readouterr().err
    out = mounted_filesystem("4k") / "card"
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5", "--out",
                          str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"lm-eval-ext: error: cannot write {out}: No space left on device; the disk "
                   "or quota is full: free space and rerun"]
    assert not out.exists() or list(out.iterdir()) == []


def test_export_into_proc_or_a_read_only_file_system(capsys, mounted_filesystem, data_dir):
    line = _one_line(["export-upstream", "bbq_subset_12p5pct", "--out", "/proc/x"], capsys, 2)
    assert "cannot write /proc/x/bbq_ext_12p5pct: No such file or directory" in line
    out = mounted_filesystem("64k", read_only=True)
    line = _one_line(["export-upstream", "bbq_subset_12p5pct", "--out", str(out)], capsys, 2)
    assert f"cannot write {out}/bbq_ext_12p5pct: Read-only file system" in line


def test_two_exports_racing_both_finish_and_leave_one_whole_folder(tmp_path, data_dir):
    """Both write the same task folder at once: each writes its own staging folder, the last
    swapped in wins; before, one emptied the other's staging folder and ended in the catch-all."""
    out = tmp_path / "export"
    argv = ["lm-eval-ext", "export-upstream", "bbq_subset_12p5pct", "xstest_ext", "--out",
            str(out), "--overwrite"]
    for _ in range(3):
        procs = [subprocess.Popen([*argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
        assert all(code == 0 for code, _ in results), results
    assert sorted(p.name for p in out.iterdir()) == ["bbq_ext_12p5pct", "xstest_ext_v2"]
    assert sorted(p.name for p in (out / "bbq_ext_12p5pct").iterdir()) == [
        "README.md", "bbq_ext_12p5pct.yaml", "bbq_ext_12p5pct_items.csv", "utils.py"]
    assert run_cli(["lm-eval-ext", "export-upstream", "bbq_subset_12p5pct", "--out",
                    str(out)]).returncode == 2  # still refused without --overwrite


def test_compare_harness_of_two_benchmarks_is_one_line_and_writes_nothing(runs, embedded_lm,
                                                                         tmp_path, capsys):
    crows = save_lm_eval_run(embedded_lm, "crows_pairs_ext_loglik", 2, tmp_path / "crows")
    capsys.readouterr()  # lm-eval's progress bars
    out = tmp_path / "compare"
    line = _one_line(["compare-harness", f"lm_eval={runs[0]}", f"lm_eval:crows={crows}",
                      "--out", str(out), "--bootstrap", "100"], capsys, 2)
    assert "crows evaluated crows_pairs and lm_eval bbq: no benchmark in common" in line
    assert not out.exists()


def test_a_campaign_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    spec = tmp_path / "c.yaml"
    spec.write_bytes(b"name: caf\xe9\nmodels: {m: ''}\n")
    line = _one_line(["campaign", str(spec), "--out", str(tmp_path / "out"), "--dry-run"],
                     capsys, 2)
    assert line == (f"lm-eval-ext: error: cannot read {spec}: it is not UTF-8 text (byte 0xe9 "
                    "at offset 9); save it as UTF-8")


def test_an_empty_out_folder_is_kept_and_filled(runs, tmp_path, monkeypatch, capsys,
                                                mounted_filesystem):
    """The working folder (`--out .`) and an empty file system's root are filled in place."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert cli_main.main(_analyze(runs, ".")) == 0
    assert (work / "report.md").is_file() and not list(tmp_path.glob(".work*"))
    disk = mounted_filesystem("16m")
    assert cli_main.main(_analyze(runs, disk)) == 0
    assert (disk / "report.md").is_file() and not list(disk.glob(".*"))


def test_a_file_where_a_folder_must_be_is_named(tmp_path):
    """trial 13: a campaign folder whose analysis/ was a file gave "a part of the path is a file,
    not a folder: pass another path" for a path the user never passed."""
    from lm_eval_ext.files import path_error

    (tmp_path / "analysis").write_text("x")
    target = tmp_path / "analysis" / "smollm2" / "precision"
    with pytest.raises(NotADirectoryError) as raised:
        target.mkdir(parents=True)
    line = str(path_error(target, raised.value))
    assert line == (f"cannot write {target}: Not a directory; {tmp_path / 'analysis'} is a file, "
                    "not a folder: move or remove it, or pass another path")
    (tmp_path / "analysis").unlink()
    target.mkdir(parents=True)  # followed


def test_a_card_to_standard_output_is_printed_and_dev_stdout_kept(capfd):
    """Trial 17 (N17_06, N17_08): with the output redirected to a file, `--card /dev/stdout`
    was refused as "an earlier card", and with --overwrite a rename replaced the /dev/stdout
    link with a regular file holding the card. (capfd: fd 1 is a regular file here too.)"""
    import os

    assert os.path.islink("/dev/stdout")
    assert cli_main.main(["mde", "--m", "500", "--rho-d", "0.1", "--card", "/dev/stdout"]) == 0
    out = capfd.readouterr().out
    assert os.path.islink("/dev/stdout")
    first, card = out.split("\n", 1)
    assert first.startswith("paired MDE = 3.96 pp") and "3.96" in card
    assert out.rstrip().endswith("wrote /dev/stdout")


def test_a_card_through_a_link_replaces_the_file_it_names(tmp_path, capsys):
    """A rename onto a link replaced the link itself with a regular file."""
    target = tmp_path / "cards" / "card.md"
    target.parent.mkdir()
    target.write_text("- **MDE target**: 1.00 pp (an earlier card)\n")
    link = tmp_path / "card.md"
    link.symlink_to(target)
    assert cli_main.main(["mde", "--m", "500", "--rho-d", "0.1", "--card", str(link),
                          "--overwrite"]) == 0
    assert link.is_symlink() and "3.96" in target.read_text()
