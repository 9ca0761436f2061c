"""`recommend` refuses input that would make its card's guarantee meaningless.

Each case is one line and exit code 2, and no card is written: a margin no protocol can
exceed, one pilot given twice (by name or as a copy), pilots of different tasks, sizes beyond
the instrument, and an analysis folder that `analyze` did not finish.
"""

from __future__ import annotations

import hashlib
import shutil

import pytest
from helpers import write_pilot

from lm_eval_ext.cli import main as cli_main


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    return write_pilot(tmp_path_factory.mktemp("pilot"), {"ref": 4000.0, "int8": 1000.0})


def _refused(argv: list[str], capsys, out) -> str:
    """Run ``recommend`` in process; return its one line (exit 2, no card written)."""
    assert cli_main.main(["recommend", *argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == "", captured
    assert not out.exists()
    return lines[0]


@pytest.mark.parametrize(("claim", "message"), [
    ("accuracy=100", "accuracy cannot move by 100 points or more (it spans 100)"),
    ("accuracy=250", "accuracy cannot move by 250 points or more"),
    ("accuracy=inf", "the margin must be a finite number of points"),
    ("bias_s_dis=200", "bias_s_dis cannot move by 200 points or more (it spans 200)"),
    ("bias_s_amb=1e9", "bias_s_amb cannot move by 1e+09 points or more"),
])
def test_a_margin_no_protocol_can_exceed_is_refused(pilot, claim, message, capsys, tmp_path):
    line = _refused([str(pilot), "--claim", claim], capsys, tmp_path / "card")
    assert message in line and line.startswith("lm-eval-ext: error: recommend: claim")


def test_a_claim_on_a_metric_the_pilot_leaves_undefined_is_refused(capsys, tmp_path):
    """trial 10: bias_s_dis on a pilot without a disambiguated item leaked numpy's "Degrees of
    freedom <= 0" and advised a wider margin, which then gave a card."""
    import pandas as pd

    ambiguous = write_pilot(tmp_path / "p", {"ref": 4000.0, "int8": 1000.0}, context="ambig")
    items = pd.read_csv(ambiguous / "items.csv")
    assert set(items["context_condition"]) == {"ambig"}  # bias_s_dis counts disambig items only
    line = _refused([str(ambiguous), "--claim", "bias_s_dis=5"], capsys, tmp_path / "card")
    assert line == (f"lm-eval-ext: error: recommend: claim 'bias_s_dis=5': bias_s_dis is undefined"
                    f" on pilot {ambiguous.name}'s {len(items) // 2} item(s) (none of them is one "
                    "it counts), so no margin can be resolved; claim a metric the pilot measures,"
                    " or analyse a pilot of more items")
    assert cli_main.main(["recommend", str(ambiguous), "--claim", "bias_s_amb=5", "--out",
                          str(tmp_path / "card2")]) == 0


def test_a_margin_within_the_range_is_carded(pilot, capsys, tmp_path):
    """The largest margins the ranges allow still give a card (the checks refuse no more)."""
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=99.9", "--claim",
                          "bias_s_dis=199", "--out", str(tmp_path / "card")]) == 0
    assert (tmp_path / "card" / "card.md").is_file()


def test_a_difference_of_two_models_may_move_twice_as_far(pilot, tmp_path, capsys):
    other = write_pilot(tmp_path / "other", {"ref": 2000.0, "int8": 500.0},
                        task="bbq_instrument_loglik")
    # the same answers, but other runs (other joules): two models' pilots
    line = _refused([f"a={pilot}", f"b={other}", "--claim", "accuracy@a-b=200"], capsys,
                    tmp_path / "card")
    assert "a difference of two models' accuracy cannot move by 200 points" in line
    assert cli_main.main(["recommend", f"a={pilot}", f"b={other}", "--claim",
                          "accuracy@a-b=150"]) == 0


def test_one_pilot_under_two_names_or_as_a_copy_is_refused(pilot, capsys, tmp_path):
    twice = _refused([f"a={pilot}", f"b={pilot}", "--claim", "accuracy=5"], capsys,
                     tmp_path / "card")
    assert twice.endswith(f"the pilot {pilot.resolve()} is given twice; give each model's own "
                          "pilot once (one analyze folder per model)")
    copy = tmp_path / "copy"
    shutil.copytree(pilot, copy)
    line = _refused([f"a={pilot}", f"b={copy}", "--claim", "accuracy@a-b=5"], capsys,
                    tmp_path / "card")
    assert "pilots a and b hold the same run" in line


def test_pilots_of_different_tasks_are_refused(pilot, capsys, tmp_path):
    subset = write_pilot(tmp_path / "subset", {"ref": 1000.0, "int8": 250.0},
                         task="bbq_subset_25pct_loglik", membership="25pct")
    line = _refused([f"a={pilot}", f"b={subset}", "--claim", "accuracy=5"], capsys,
                    tmp_path / "card")
    assert ("pilots a and b differ in task (bbq_instrument_loglik against "
            "bbq_subset_25pct_loglik)") in line


def test_sizes_beyond_the_instrument_are_refused(pilot, capsys, tmp_path):
    line = _refused([str(pilot), "--claim", "accuracy=5", "--sizes", "125,100000"], capsys,
                    tmp_path / "card")
    assert "--sizes 100000 is beyond the instrument, which has 500 natural units" in line


def test_an_unfinished_analysis_folder_is_refused(pilot, capsys, tmp_path):
    cut = tmp_path / "cut"
    shutil.copytree(pilot, cut)
    (cut / "report.md").unlink()  # what a full disk left before report.md was written
    line = _refused([str(cut), "--claim", "accuracy=5"], capsys, tmp_path / "card")
    assert f"{cut} is an unfinished analysis (no report.md" in line


def _pilot_refused(reference: str, run: str, tmp_path, capsys, **settings) -> str:
    """The line `recommend --claim accuracy=2` gives on the pilot of ``run`` against
    ``reference`` (written to tmp_path/pilot)."""
    from lm_eval_ext.analysis.report import analyze_to_folder

    analyze_to_folder(reference, [run], tmp_path / "pilot", n_resamples=100, mc_draws=10,
                      progress=False, **settings)
    return _refused([str(tmp_path / "pilot"), "--claim", "accuracy=2"], capsys,
                    tmp_path / "card")


def test_a_candidate_of_another_model_is_refused(capsys, tmp_path):
    """`analyze --reference m=REF --runs g=OTHER_MODEL` gave a pilot whose card said
    "Run g on 248 items ... 95.3% saved" with the guarantee, rc 0: a model swap certified."""
    import numpy as np

    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("instrument").rows[:500]
    answers = simulate_predictions(rows, 0.6, np.random.default_rng(3))
    ref = write_run(tmp_path / "ref", "bbq_instrument_loglik", rows, answers, model="m",
                    energy_joules=4000.0, inference_seconds=40.0)
    other = write_run(tmp_path / "g", "bbq_instrument_loglik", rows, answers, model="gemma",
                      energy_joules=200.0, inference_seconds=2.0)
    line = _pilot_refused(f"m={ref}", f"g={other}", tmp_path, capsys)
    assert line == (
        f"lm-eval-ext: error: recommend: in {tmp_path / 'pilot'} run g is model gemma, the "
        "reference m model m; a card certifies a protocol change of the reference's own model "
        "on the same items, not another model: analyse each model's protocols against its own "
        "reference and pass one pilot per model (recommend A=PILOT_A B=PILOT_B), or compare "
        "the models with `lm-eval-ext analyze` alone")


def test_a_candidate_of_other_items_alone_is_refused(capsys, tmp_path):
    """trial 15: a campaign condition that was the reference's own settings on fewer items
    (its answers derived, so identical on the shared items) was listed as a candidate to
    certify; the shared items' deltas say nothing of another item set."""
    import numpy as np

    from lm_eval_ext.analysis.synthetic import write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("instrument").rows[:600]
    answers = np.array([r["label"] for r in rows])
    ref = write_run(tmp_path / "ref", "bbq_instrument_loglik", rows, answers,
                    energy_joules=6000.0, inference_seconds=60.0)
    fewer = write_run(tmp_path / "few", "bbq_instrument_loglik", rows[:500], answers[:500],
                      energy_joules=5000.0, inference_seconds=50.0)
    line = _pilot_refused(f"m0={ref}", f"m4={fewer}", tmp_path, capsys, intersection=True)

    def item_set(chosen) -> str:  # by hand: the sorted item keys, one per line
        text = "".join(f"{key}\n" for key in sorted(r["item_key"] for r in chosen))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    assert line == (
        f"lm-eval-ext: error: recommend: in {tmp_path / 'pilot'} run m4 differs from the "
        f"reference m0 in its items (item_set_sha256: {item_set(rows)} -> "
        f"{item_set(rows[:500])}; n_items: "
        "600 -> 500); a card certifies a protocol change on the same items, and the pilot's "
        "deltas on the shared items cannot vouch for another item set: analyse runs of one task "
        "and --limit, and let recommend choose a smaller subset of the reference itself "
        "(--sizes)")


def test_a_candidate_of_another_task_on_the_same_items_is_refused_as_a_task(capsys, tmp_path):
    """Trial 18 (N18_144): the generative twin of a log-likelihood task on the same items was
    carded as a change of items; it is a change of task, which a card does not certify."""
    import numpy as np

    from lm_eval_ext.analysis.synthetic import write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("instrument").rows[:600]
    answers = np.array([r["label"] for r in rows])
    ref = write_run(tmp_path / "ref", "bbq_instrument_loglik", rows, answers,
                    energy_joules=6000.0, inference_seconds=60.0)
    twin = write_run(tmp_path / "twin", "bbq_instrument", rows, answers,
                     energy_joules=5000.0, inference_seconds=50.0)
    line = _pilot_refused(f"m0={ref}", f"g={twin}", tmp_path, capsys)
    assert line == (
        f"lm-eval-ext: error: recommend: in {tmp_path / 'pilot'} run g differs from the "
        "reference m0 in its task (task: bbq_instrument_loglik -> bbq_instrument); a card "
        "certifies a protocol change of one task: analyse runs of the reference's task, or "
        "compare the tasks with `lm-eval-ext analyze` alone")
    factors = (tmp_path / "pilot" / "card_differences.csv").read_text().splitlines()[1]
    assert ",task," in factors and "items" not in factors


def _rerun_advice(folder) -> str:
    """The fix every refusal of a table `analyze` wrote ends with."""
    return ("`lm-eval-ext analyze` wrote it: rerun `lm-eval-ext analyze` with the pilot's "
            f"--reference and --runs and --out {folder} --overwrite")


def test_an_edited_table_is_refused_and_the_advised_rerun_restores_it(pilot, capsys, tmp_path):
    """A pilot's items.csv with one outcome changed by hand ('maybe', or a flipped value)
    was carded, rc 0; analyze records the tables' SHA-256 and recommend checks them."""
    edited = tmp_path / "edited"
    shutil.copytree(pilot, edited)
    items = edited / "items.csv"
    lines = items.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = lines[1].replace(",True,", ",maybe,", 1)
    items.write_text("".join(lines), encoding="utf-8")
    line = _refused([str(edited), "--claim", "accuracy=5"], capsys, tmp_path / "card")
    assert line == (f"lm-eval-ext: error: recommend: {items} is not the table `analyze` wrote "
                    "(its SHA-256 differs from the one in tables.sha256): it was edited; "
                    + _rerun_advice(edited))
    # the advice, followed: the same runs analysed again into that folder, then carded
    runs = pilot.parent
    assert cli_main.main(["analyze", "--reference", f"ref={runs / 'ref'}", "--runs",
                          f"int8={runs / 'int8'}", "--out", str(edited), "--overwrite",
                          "--bootstrap", "100", "--mc-draws", "10", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main.main(["recommend", str(edited), "--claim", "accuracy=5", "--bootstrap",
                          "200", "--out", str(tmp_path / "card")]) == 0


def test_tables_without_their_checksums_are_refused(pilot, capsys, tmp_path):
    """With tables.sha256 removed, an edited items.csv (one outcome flipped, or 'maybe') was
    carded, rc 0 (trials 2 and 3)."""
    edited = tmp_path / "edited"
    shutil.copytree(pilot, edited)
    (edited / "tables.sha256").unlink()
    line = _refused([str(edited), "--claim", "accuracy=5"], capsys, tmp_path / "card")
    assert line == (f"lm-eval-ext: error: recommend: {edited / 'tables.sha256'} is missing "
                    "(the SHA-256 `analyze` writes beside its tables), so an edit of the table "
                    "could not be told; " + _rerun_advice(edited))
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5", "--bootstrap",
                          "200", "--out", str(tmp_path / "card")]) == 0  # the folder analyze wrote


def test_an_analysis_older_than_its_item_check_is_refused_with_the_rerun(pilot, capsys, tmp_path):
    """Trial 16 (R16_N15_187): a folder analysed before card_differences.csv had a checksum
    listed a candidate of other items, as its items were not checked; now it must be rerun."""
    older = tmp_path / "older"
    shutil.copytree(pilot, older)
    checksums = older / "tables.sha256"
    checksums.write_text("".join(line for line in checksums.read_text().splitlines(True)
                                 if "card_differences" not in line))
    line = _refused([str(older), "--claim", "accuracy=5"], capsys, tmp_path / "card")
    assert line == (f"lm-eval-ext: error: recommend: {checksums} does not list "
                    "card_differences.csv (the SHA-256 `analyze` writes beside its tables), so "
                    "an edit of the table could not be told; " + _rerun_advice(older))
    (older / "card_differences.csv").unlink()
    line = _refused([str(older), "--claim", "accuracy=5"], capsys, tmp_path / "card")
    assert line == (f"lm-eval-ext: error: recommend: {older} has no card_differences.csv; pass "
                    "the folder that `lm-eval-ext analyze --out` wrote for the pilot (analyse it "
                    "again with this version if it is an old one)")


def test_analyze_overwrite_keeps_a_recommendation_card_in_the_pilot_folder(tmp_path, capsys):
    """Trial 17 (N17_197): `recommend --out PILOT`, then `analyze --overwrite --out PILOT`:
    rc 0, and the card (a record, kept by recommend itself unless --overwrite) was deleted."""
    pilot = write_pilot(tmp_path / "runs", {"ref": 4000.0, "int8": 1000.0})
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5", "--bootstrap",
                          "200", "--out", str(pilot)]) == 0
    card = (pilot / "card.json").read_text()
    capsys.readouterr()
    runs = pilot.parent

    def reanalyse() -> int:
        """`analyze --overwrite` of the pilot's runs into the pilot folder."""
        return cli_main.main(["analyze", "--reference", f"ref={runs / 'ref'}", "--runs",
                              f"int8={runs / 'int8'}", "--out", str(pilot), "--overwrite",
                              "--bootstrap", "100", "--mc-draws", "10", "--no-progress"])

    assert reanalyse() == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: --out {pilot} also holds a recommendation card (card.json, "
        "card.md, written by `recommend --out`), which --overwrite would delete with the "
        "folder: move the card out first, or analyse into a new --out")
    assert (pilot / "card.json").read_text() == card
    # trial 18 (N18_156): a card in a folder of its own inside the pilot was deleted, rc 0
    (pilot / "mine").mkdir()
    for name in ("card.json", "card.md"):
        (pilot / name).rename(pilot / "mine" / name)
    assert reanalyse() == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: --out {pilot} also holds a recommendation card (mine/card.json, "
        "mine/card.md, written by `recommend --out`), which --overwrite would delete with the "
        "folder: move the card out first, or analyse into a new --out")
    (pilot / "mine" / "card.json").rename(tmp_path / "card.json")  # the advice, followed
    (pilot / "mine" / "card.md").rename(tmp_path / "card.md")
    assert reanalyse() == 2
    assert capsys.readouterr().err.strip() == (  # another folder of the user's: kept too
        f"lm-eval-ext: error: --out {pilot} also holds mine/, which analyze did not write and "
        "--overwrite would delete with the folder: move it out first, or analyse into a new "
        "--out")
    (pilot / "mine").rmdir()
    # trial 19 (N19_63): the user's files beside the tables and inside figures/ were deleted
    (pilot / "notes.md").write_text("mine")
    (pilot / "figures" / "my_plot.png").write_bytes(b"png")
    (pilot / "figures" / "mine").mkdir()
    (pilot / "figures" / "mine" / "keep.txt").write_text("mine")
    assert reanalyse() == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: --out {pilot} also holds figures/mine/, figures/my_plot.png, "
        "notes.md, which analyze did not write and --overwrite would delete with the folder: "
        "move them out first, or analyse into a new --out")
    assert (pilot / "figures" / "mine" / "keep.txt").read_text() == "mine"
    for name in ("notes.md", "figures/my_plot.png", "figures/mine/keep.txt"):
        (pilot / name).unlink()  # the advice, followed
    (pilot / "figures" / "mine").rmdir()
    assert reanalyse() == 0
