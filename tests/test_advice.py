"""Advice that works when followed; each message is checked by doing what it says.

A cut samples file was told to "delete the broken line" (then the line count failed); a samples
folder without its results file was told to pass an lm_eval output folder (it was one).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import generation_requests

from lm_eval_ext.analysis import AnalysisInputError
from lm_eval_ext.analysis.loader import load_runs
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.data.instrument import load_membership


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir):
    rows = load_membership("12p5pct").rows
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    return write_run(tmp_path_factory.mktemp("run") / "run", "bbq_subset_12p5pct_loglik", rows,
                     preds)


def test_a_samples_file_cut_while_written_is_told_to_rerun(run, tmp_path):
    folder = tmp_path / "cut"
    shutil.copytree(run.parent, folder)
    samples = next(folder.glob("samples_*.jsonl"))
    data = samples.read_bytes()
    samples.write_bytes(data[:8192])  # what a full disk left (lm-eval writes in 8 KiB blocks)
    with pytest.raises(AnalysisInputError) as error:
        load_runs([folder])
    message = str(error.value)
    assert "was cut while lm-eval wrote it (a full disk or a killed run)" in message
    assert "Rerun the evaluation with --log_samples" in message
    assert "delete" not in message
    # the old advice, followed: the remaining items fail the count check, so it was wrong
    samples.write_bytes(data[:8192].rpartition(b"\n")[0] + b"\n")
    with pytest.raises(AnalysisInputError, match="holds 3 samples but its results file reports 248"):
        load_runs([folder])


def test_a_samples_folder_without_its_results_file_says_so(run, tmp_path):
    folder = tmp_path / "no_results"
    shutil.copytree(run.parent, folder)
    next(folder.glob("results_*.json")).unlink()
    with pytest.raises(AnalysisInputError) as error:
        load_runs([tmp_path])
    assert str(error.value) == (
        f"{folder} holds lm-eval samples files but no results_*.json: lm-eval writes the "
        "results file beside them, so the run stopped before writing it or the file was "
        "moved; pass the folder that holds both, or rerun the evaluation")


@pytest.mark.parametrize(("damage", "advice"), [
    # trial 16: a results file copied away from its samples was told to rerun with --log_samples
    ("no samples", "{results} has no samples file for task bbq_subset_12p5pct_loglik (expected "
     "{samples.name} beside it); the analysis needs per-item outputs: where the run wrote that "
     "file elsewhere, put it beside its results file; otherwise rerun lm_eval with "
     "--log_samples"),
    ("empty samples", "{samples} holds no samples; rerun with --log_samples"),
    ("cut results", "{results} is not readable JSON (Expecting ',' delimiter: line 1 column 9 "
     "(char 8)); the run may have been interrupted while writing it: rerun the evaluation"),
])
def test_a_run_without_per_item_outputs_is_told_to_rerun_and_the_rerun_loads(run, tmp_path,
                                                                             damage, advice):
    folder = tmp_path / "run"
    shutil.copytree(run.parent, folder)
    results, samples = next(folder.glob("results_*.json")), next(folder.glob("samples_*.jsonl"))
    {"no samples": samples.unlink, "empty samples": lambda: samples.write_text(""),
     "cut results": lambda: results.write_text('{"a": 1 "b"')}[damage]()
    with pytest.raises(AnalysisInputError) as error:
        load_runs([folder])
    assert str(error.value) == advice.format(results=results, samples=samples)
    for name in (results.name, samples.name):  # followed: what the rerun writes
        shutil.copy(run.parent / name, folder / name)
    assert len(load_runs([folder])[0].items) == 248


def test_a_folder_of_two_runs_is_told_to_pass_one_per_run(run, tmp_path):
    rows = load_membership("12p5pct").rows
    other = write_run(tmp_path / "both" / "b4", "bbq_subset_12p5pct_loglik", rows,
                      simulate_predictions(rows, 0.5, np.random.default_rng(1)), batch_size=4)
    shutil.copytree(run.parent, tmp_path / "both" / "b1")
    with pytest.raises(AnalysisInputError) as error:
        load_runs([tmp_path / "both"])
    first, *listed, advice = str(error.value).splitlines()
    assert first == f"{tmp_path / 'both'} holds 2 runs:" and len(listed) == 2
    assert advice == ("pass one results_*.json file per run (a folder only where it holds one "
                      "run)")
    assert [len(r.items) for r in load_runs([other.parent, tmp_path / "both" / "b1"])] == [248,
                                                                                         248]


@pytest.mark.parametrize(("tasks", "advice"), [
    ("hellaswg", "unknown task(s) hellaswg (did you mean hellaswag?)"),
    ("bbq_subset_13pct,arc_easy", "unknown task(s) bbq_subset_13pct (13pct is not a subset of "
     "the BBQ instrument; the subsets are 12p5pct, 25pct, 37p5pct, 50pct, 75pct and the "
     "replicates 50pct_r2..50pct_r5, 12p5pct_r2..12p5pct_r5, e.g. bbq_subset_12p5pct; the whole "
     "instrument is bbq_instrument)"),
])
def test_an_unknown_task_is_refused_before_lm_evals_index(tasks, advice, tmp_path):
    """lm-eval reported it after indexing its whole tree (60-94 s on 2 busy cores, exit 1)."""
    import time

    from helpers import run_cli

    start = time.monotonic()
    proc = run_cli(["lm_eval", "--model", "hf-metered", "--tasks", tasks, "--limit", "1",
                    "--output_path", str(tmp_path / "out")])
    elapsed = time.monotonic() - start
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"lm_eval: error: {advice}"), last
    assert elapsed < 40, elapsed  # lm-eval's index alone took longer than this


def test_the_subset_advice_names_a_task_that_runs():
    """Following the advice: the task it names exists (our own index)."""
    from lm_eval_ext.plugin.task_folders import our_task_names

    assert {"bbq_subset_12p5pct", "bbq_instrument", "bbq_subset_12p5pct_r5_loglik",
            "bbq_subset_50pct_r2"} <= our_task_names()


@pytest.mark.parametrize("size", ["0", "1e300"])
def test_sequential_batch_sizes_are_checked_as_the_flag_is_read(size, tmp_path, capsys):
    """`--reference-batch 0` ran the reference for 50 s, then suggested `--batch_size 8`, a flag
    `sequential` does not have; `1e300` failed in the first look's lm-eval (trial 9)."""
    from lm_eval_ext.cli import main as cli_main

    with pytest.raises(SystemExit) as exit_info:
        cli_main.main(["sequential", "--reference-args", "idle_seconds=0", "--candidate-args",
                       "idle_seconds=0", "--reference-batch", size, "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext sequential: error: argument --reference-batch: {size} is not a batch size; give "
        "a positive integer, auto or auto:N (e.g. 8) (see lm-eval-ext sequential --help)")
    assert not (tmp_path / "o").exists()


def test_lm_evals_default_batch_size_is_no_conflict():
    """`--model_args batch_size=8` alone was refused as a conflict with lm-eval's default 1."""
    from lm_eval_ext.backends.model_args import merge_model_args
    from lm_eval_ext.errors import ConfigError

    lm_eval_default = {"batch_size": 1, "max_batch_size": None, "device": None}
    assert merge_model_args("hf-metered", {"batch_size": "8"}, lm_eval_default) == {
        "batch_size": "8"}
    typed = {"batch_size": "1", "max_batch_size": None, "device": None}  # --batch_size 1
    with pytest.raises(ConfigError, match="batch_size='8' in --model_args conflicts with "
                                          r"lm-eval's --batch_size \('1'\)"):
        merge_model_args("hf-metered", {"batch_size": "8"}, typed)


def test_mde_of_runs_with_identical_answers_gives_its_bound(run, tmp_path, capsys):
    """The README's b1/b4 agree on every item: "rho_d must be in (0, 1], got 0.0" was the
    answer, a value the user never gave."""
    from lm_eval_ext.analysis.empirical_power import discordance_upper_bound
    from lm_eval_ext.analysis.stats.power import paired_mde
    from lm_eval_ext.cli import main as cli_main

    rows = load_membership("12p5pct").rows
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    same = write_run(tmp_path / "b4", "bbq_subset_12p5pct_loglik", rows, preds, batch_size=4)
    card = tmp_path / "card.md"
    assert cli_main.main(["mde", "--runs", str(run.parents[1]), str(same.parents[1]),
                          "--card", str(card)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    bound = 1 - 0.05 ** (1 / 248)  # Clopper-Pearson, 0 of 248 (about 3/248)
    # trial 16: the card recorded the bound as the MDE target and the prior, without a word
    assert card.read_text().splitlines()[:2] == [
        f"- **MDE target**: {100 * paired_mde(248, bound):.2f} pp (at most: 0 of 248 paired "
        "items were discordant)",
        f"- **rho_d prior** (discordance rate): {bound:.3f} (the 95% upper confidence bound "
        "after 0 of 248 discordant items)"]
    assert discordance_upper_bound(248) == pytest.approx(bound) and bound == pytest.approx(
        0.0120069, rel=1e-5)
    # trial 19 (N19_193): 'design effect = nan (used as 1: an estimate below 1 ...)'
    assert lines[0] == ("empirical rho_d = 0.0000, design effect = not estimable (no "
                        "discordant item; used as 1) over 248 paired items")
    assert lines[1] == ("no discordant items: the runs agree on all 248 paired items, so rho_d "
                        "= 0 gives no MDE; the MDE is bounded by the MDE at rho_d = 0.0120, the "
                        "95% upper confidence bound after 0 of 248 discordant items (design "
                        "effect taken as 1)")
    assert lines[2].startswith(f"paired MDE <= {100 * paired_mde(248, bound):.2f} pp (m=248")


def test_mde_of_runs_of_two_tasks_is_told_to_pair_one_task(run, tmp_path, capsys):
    from lm_eval_ext.cli import main as cli_main

    rows = load_membership("12p5pct_r2").rows
    other = write_run(tmp_path / "r2", "bbq_subset_12p5pct_r2_loglik", rows,
                      simulate_predictions(rows, 0.5, np.random.default_rng(1)))
    assert cli_main.main(["mde", "--runs", str(run.parents[1]), str(other.parents[1])]) == 2
    message = capsys.readouterr().err.strip()
    assert message == ("lm-eval-ext: error: mde --runs: synthetic-model@bf16/bs1/12p5pct and "
                       "synthetic-model@bf16/bs1/12p5pct_r2 differ in tasks "
                       "bbq_subset_12p5pct_loglik vs bbq_subset_12p5pct_r2_loglik; a discordance "
                       "rate needs two runs of one task and scoring path")
    rows = load_membership("12p5pct").rows  # followed: a second run of the same task
    same = write_run(tmp_path / "b4", "bbq_subset_12p5pct_loglik", rows,
                     simulate_predictions(rows, 0.5, np.random.default_rng(1)), batch_size=4)
    assert cli_main.main(["mde", "--runs", str(run.parents[1]), str(same.parents[1])]) == 0
    assert capsys.readouterr().out.startswith("empirical rho_d = 0.5202, design effect = 1.009 "
                                              "over 248 paired items")


#: three short generation requests (a 4-token cap)
SHORT = (["One.", "Two, three.", "Four"], {"until": ["\n"], "max_gen_toks": 4})


def test_the_fast_path_shows_lm_evals_progress_bar_and_obeys_its_switches(embedded_lm, capsys):
    """67 s of silence on 2 busy cores: lm-eval's own loop shows a bar, the fast path showed
    none. The bar counts the requests as their rows end; it is off where lm-eval's is."""
    assert embedded_lm.generation_settings().requested == "fast"
    embedded_lm.generate_until(generation_requests(*SHORT))
    err = capsys.readouterr().err
    assert "Running generate_until requests (fast path): 100%" in err and "3/3" in err
    embedded_lm.generate_until(generation_requests(*SHORT), disable_tqdm=True)
    assert "Running generate_until" not in capsys.readouterr().err


@pytest.mark.slow
def test_the_fast_paths_bar_is_off_under_tqdm_disable(embedded_checkpoint):
    """tqdm reads TQDM_DISABLE when it is imported: a fresh process, as a user would run it."""
    import subprocess
    import sys

    code = ("from helpers import generation_requests\n"
            "from lm_eval_ext.backends.hf.metered import HFMeteredLM\n"
            "lm = HFMeteredLM(device='cpu', idle_seconds=0)\n"
            f"print(lm.generate_until(generation_requests(*{SHORT!r})))")
    for disabled in ("1", ""):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=600,
                              env={**os.environ, "TQDM_DISABLE": disabled})
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert ("fast path" in proc.stderr) == (disabled == ""), (disabled, proc.stderr[-500:])


def _pilot_analysis(folder: Path, out: Path, capsys) -> None:
    """``lm-eval-ext analyze`` of a :func:`helpers.write_pilot` folder's runs into ``out``."""
    from lm_eval_ext.cli import main as cli_main

    assert cli_main.main(["analyze", "--reference", f"ref={folder / 'ref'}", "--runs",
                          f"int8={folder / 'int8'}", "--out", str(out), "--bootstrap", "100",
                          "--mc-draws", "10", "--no-progress", *(
                              ["--overwrite"] if out.exists() else [])]) == 0
    capsys.readouterr()


def _recommend_error(pilot: Path, capsys, *more: str) -> str:
    from lm_eval_ext.cli import main as cli_main

    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5", *more]) == 2
    return capsys.readouterr().err.strip()


@pytest.fixture()
def pilot(tmp_path):
    from helpers import write_pilot

    return write_pilot(tmp_path, {"ref": 4000.0, "int8": 1000.0})


def test_an_unfinished_pilot_analysis_is_told_what_analyze_accepts(pilot, tmp_path, capsys):
    """"rerun analyze into it with --overwrite", which analyze refuses for a folder
    without report.md ("not empty and holds no earlier analysis")."""
    from lm_eval_ext.cli import main as cli_main

    (pilot / "report.md").unlink()
    message = _recommend_error(pilot, capsys)
    assert message.endswith(f"delete {pilot}, then rerun `lm-eval-ext analyze` with --out "
                            f"{pilot}"), message
    shutil.rmtree(pilot)  # followed
    _pilot_analysis(tmp_path, pilot, capsys)
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5"]) == 0


@pytest.mark.parametrize(("damage", "problem"), [
    (b"\xff\xfe" + b"x" * 64, "is damaged ('utf-8' codec can't decode byte 0xff in position 0"),
    (b"", "is empty"),
    (b"run,model\n", "holds no rows"),
])
def test_a_damaged_pilot_table_is_named_and_analysed_again(pilot, tmp_path, capsys, damage,
                                                          problem):
    """"byte 0xff at offset 0 ... pass the file lm-eval wrote" named no file, and
    analyze wrote it; an empty runs.csv reached the catch-all."""
    from lm_eval_ext.cli import main as cli_main

    (pilot / "runs.csv").write_bytes(damage)
    message = _recommend_error(pilot, capsys)
    assert message.startswith(f"lm-eval-ext: error: recommend: {pilot / 'runs.csv'} {problem}")
    assert message.endswith(f"`lm-eval-ext analyze` wrote it: rerun `lm-eval-ext analyze` with "
                            f"the pilot's --reference and --runs and --out {pilot} --overwrite"), \
        message
    _pilot_analysis(tmp_path, pilot, capsys)  # followed
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5"]) == 0


@pytest.mark.parametrize(("name", "damage", "problem"), [
    ("items.csv", lambda data: data[:len(data) // 2].rstrip(b"\n"),
     "was cut (its last line has no end)"),
    ("runs.csv", lambda data: b"run,metric,delta_pp\nint8,accuracy,1.0\n",
     "lacks the column(s) is_reference, model, n_items, energy_joules, inference_seconds"),
])
def test_a_cut_or_foreign_pilot_table_is_named_and_analysed_again(pilot, tmp_path, capsys, name,
                                                                 damage, problem):
    """A cut items.csv was told its files "name different runs"; another table's content in
    runs.csv reached the catch-all (KeyError is_reference)."""
    from lm_eval_ext.cli import main as cli_main

    path = pilot / name
    path.write_bytes(damage(path.read_bytes()))
    message = _recommend_error(pilot, capsys)
    assert message == (f"lm-eval-ext: error: recommend: {path} {problem}; `lm-eval-ext analyze` "
                       "wrote it: rerun `lm-eval-ext analyze` with the pilot's --reference and "
                       f"--runs and --out {pilot} --overwrite")
    _pilot_analysis(tmp_path, pilot, capsys)  # followed
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5"]) == 0


@pytest.mark.parametrize(("tasks", "advice", "fixed"), [
    (["bbq_subset_12p5pct_loglik,"], "--tasks 'bbq_subset_12p5pct_loglik,': an empty task name "
     "(a stray comma); write --tasks bbq_subset_12p5pct_loglik", "bbq_subset_12p5pct_loglik"),
    (["bbq_subset_12p5pct_loglik, bbq_subset_25pct_loglik"],
     "--tasks 'bbq_subset_12p5pct_loglik, bbq_subset_25pct_loglik': the name "
     "' bbq_subset_25pct_loglik' holds a space (lm-eval splits only at commas); write --tasks "
     "bbq_subset_12p5pct_loglik,bbq_subset_25pct_loglik",
     "bbq_subset_12p5pct_loglik,bbq_subset_25pct_loglik"),
    ([""], "--tasks '': no task named; give at least one (e.g. --tasks bbq_subset_25pct)",
     "bbq_subset_25pct"),
])
def test_a_stray_comma_or_space_in_tasks_is_told_the_list_that_runs(tasks, advice, fixed):
    """"unknown task(s) ;" for a trailing comma; 'a, b' suggested b back."""
    from lm_eval_ext.command_preflight import PreflightError, check_command_line
    from lm_eval_ext.plugin.task_folders import check_known_tasks, command_line_tasks

    with pytest.raises(PreflightError) as error:
        check_command_line(["--tasks", *tasks])
    assert str(error.value) == advice
    check_command_line(["--tasks", fixed])  # followed: accepted, and every name is a task
    check_known_tasks(*command_line_tasks(["--tasks", fixed]))


@pytest.mark.slow
def test_a_campaigns_unknown_subset_is_told_a_subset_that_exists(tmp_path, capsys):
    """A campaign's `bbq_subset_13pct` was told "did you mean bbq_subset_37p5pct?"."""
    from lm_eval_ext.cli import main as cli_main

    spec = tmp_path / "c.yaml"
    spec.write_text("tasks: [bbq_subset_13pct]\nconditions: {M0: {}}\n")
    argv = ["campaign", str(spec), "--out", str(tmp_path / "out"), "--dry-run",
            "--calibration-limit", "0"]
    assert cli_main.main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "37p5pct?" not in line and line.startswith(
        "lm-eval-ext: error: unknown task(s) bbq_subset_13pct (13pct is not a subset of the BBQ "
        "instrument; the subsets are 12p5pct, 25pct, 37p5pct, 50pct, 75pct and the replicates "
        "50pct_r2..50pct_r5, 12p5pct_r2..12p5pct_r5, e.g. bbq_subset_12p5pct;"), line
    spec.write_text("tasks: [bbq_subset_12p5pct]\nconditions: {M0: {}}\n")  # followed
    assert cli_main.main(argv) == 0


def test_intersection_is_suggested_only_where_items_are_shared(tmp_path):
    """BBQ against another benchmark was told to pass --intersection, which then
    found no shared item."""
    from lm_eval_ext.analysis import analyze

    rows = load_membership("instrument").rows
    preds = simulate_predictions(rows, 0.5, np.random.default_rng(0))
    first = write_run(tmp_path / "a", "bbq_instrument_loglik", rows[:40], preds[:40])
    other = write_run(tmp_path / "b", "bbq_instrument_loglik", rows[40:80], preds[40:80])
    part = write_run(tmp_path / "c", "bbq_instrument_loglik", rows[:20], preds[:20])
    fast = {"n_resamples": 100, "mc_draws": 10, "progress": False}
    with pytest.raises(AnalysisInputError) as error:
        analyze(first, [other], **fast)
    # one benchmark (trial 19, N19_180): not "compare runs of the same benchmark"
    assert str(error.value).endswith(
        "They share no item, so no option can pair them: evaluate them on shared items (one "
        "task, or a --limit or --samples that reaches the same items).")
    with pytest.raises(AnalysisInputError) as error:
        analyze(first, [part], **fast)
    assert str(error.value).endswith("pass --intersection to compare the 20 shared items.")
    assert analyze(first, [part], intersection=True, **fast).n_items == 20  # followed


@pytest.mark.parametrize(("more", "advice", "followed"), [
    (["--weights", "int8"], "--weights entry 'int8' is not RUN=WEIGHT (e.g. --weights "
     "int8_b1=0.8,nf4_b1=0.2)", ["--weights", "int8=1"]),
    (["--sizes", "0,5"], "--sizes '0,5' is not a list of positive natural-unit counts (e.g. "
     "--sizes 62,125,250,500)", ["--sizes", "62,125,250,500"]),
])
def test_a_bad_recommend_option_is_told_a_value_that_runs(pilot, capsys, more, advice, followed):
    from lm_eval_ext.cli import main as cli_main

    assert _recommend_error(pilot, capsys, *more) == f"lm-eval-ext: error: recommend: {advice}"
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5", *followed]) == 0
    assert "int8 0.000643 (certified)" in capsys.readouterr().out


def test_a_claim_without_a_margin_is_told_the_form(pilot, capsys):
    from lm_eval_ext.cli import main as cli_main

    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy"]) == 2
    assert capsys.readouterr().err.strip() == (
        "lm-eval-ext: error: recommend: claim 'accuracy' is not METRIC=MARGIN_PP with a positive "
        "margin in points (e.g. --claim accuracy=2, --claim accuracy@gemma-smollm=5)")
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=2"]) == 0  # followed
    assert "# Recommendation card" in capsys.readouterr().out


def test_order_and_weights_together_are_refused_and_either_one_runs(pilot):
    """The command line makes them exclusive; the library function says so too."""
    from lm_eval_ext.analysis.recommendation import recommend_from_pilots

    with pytest.raises(AnalysisInputError) as error:
        recommend_from_pilots([pilot], ["accuracy=5"], order=["int8"], weights={"int8": 1.0})
    assert str(error.value) == "recommend: give --order or --weights, not both"
    with pytest.raises(AnalysisInputError) as error:  # trial 15: was carded as "(int8, int8)"
        recommend_from_pilots([pilot], ["accuracy=5"], order=["int8", "int8"])
    assert str(error.value) == ("recommend: --order names int8 twice; a fixed sequence tests "
                                "each candidate once: name each run once, in the order to test "
                                "them")
    card = recommend_from_pilots([pilot], ["accuracy=5"], order=["int8"], n_resamples=200)
    assert card["settings"]["alpha_rule"] == "a fixed sequence declared before the pilot (int8)"
    assert card["recommended"]["protocol"] == "int8"  # followed


@pytest.mark.parametrize("wrong", ["run folder", "missing", "other runs"])
def test_recommend_on_a_folder_analyze_did_not_write_is_told_the_folder_to_pass(
        pilot, tmp_path, capsys, wrong):
    from lm_eval_ext.cli import main as cli_main

    given = {"run folder": pilot.parent, "missing": tmp_path / "nope", "other runs": pilot}[wrong]
    if wrong == "other runs":
        items = pilot / "items.csv"
        items.write_text(items.read_text().replace("\nint8,", "\nint4,").replace(",int8,m,",
                                                                                  ",int4,m,"))
        (pilot / "tables.sha256").write_text("".join(  # a mixed folder, checksums remade
            f"{hashlib.sha256((pilot / name).read_bytes()).hexdigest()}  {name}\n"
            for name in ("runs.csv", "items.csv", "card_differences.csv")))
    message = _recommend_error(given, capsys)
    assert message == "lm-eval-ext: error: recommend: " + {
        "run folder": f"{given} has no runs.csv; pass the folder that `lm-eval-ext analyze "
                      "--out` wrote for the pilot (analyse it again with this version if it is "
                      "an old one)",
        "missing": f"pilot folder {given} not found; pass the folder that `lm-eval-ext analyze "
                   "--out` wrote for the pilot",
        "other runs": f"{pilot}/items.csv and runs.csv name different runs; pass a folder "
                      "written by one `analyze`"}[wrong]
    _pilot_analysis(tmp_path, pilot, capsys)  # followed: the folder analyze writes
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5"]) == 0


def test_a_card_is_not_written_into_an_lm_eval_run_folder(pilot, tmp_path, capsys):
    """`recommend --out RUN_FOLDER` put card.json and card.md beside lm-eval's files."""
    from lm_eval_ext.cli import main as cli_main

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)  # lm-eval writes one folder down, named by the model
    (run / "model" / "results_2026-01-01T00-00-00.json").write_text("{}")
    for out in (run, run / "model"):
        message = _recommend_error(pilot, capsys, "--out", str(out))
        assert message == (f"lm-eval-ext: error: recommend: --out {out} is an lm-eval run "
                           "folder; write the card into its own folder (e.g. --out cards/)")
    cards = tmp_path / "cards"
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5", "--out",
                          str(cards)]) == 0  # followed
    assert sorted(p.name for p in cards.iterdir()) == ["card.json", "card.md"]
    written = (cards / "card.json").read_text()
    assert _recommend_error(pilot, capsys, "--out", str(cards)) == (
        f"lm-eval-ext: error: recommend: --out {cards} holds a card already (a card is a "
        "record); name another folder, or pass --overwrite to replace it")
    assert (cards / "card.json").read_text() == written  # kept
    assert cli_main.main(["recommend", str(pilot), "--claim", "accuracy=5", "--out",
                          str(cards), "--overwrite"]) == 0


def test_a_claim_given_twice_is_refused_not_dropped(pilot, capsys):
    """`--claim accuracy=2 --claim accuracy=3` kept only the last one, without a word."""
    assert _recommend_error(pilot, capsys, "--claim", "accuracy=3") == (
        "lm-eval-ext: error: recommend: --claim accuracy is given twice; give each claim once, "
        "with the one margin it must resolve")


@pytest.mark.slow
def test_the_folder_named_for_lm_evals_hf_runs(embedded_checkpoint, tmp_path):
    """The advice for `--model hf --model_args pretrained=embedded`, followed as printed."""
    import re

    from helpers import run_cli

    common = ["--tasks", "bbq_subset_12p5pct_loglik", "--limit", "1", "--output_path",
              str(tmp_path)]
    refused = run_cli(["lm-eval-ext", "run", "--model", "hf", "--model_args",
                       "pretrained=embedded", *common])
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    folder = re.search(r"give hf the folder: pretrained=(\S+) ", refused.stderr).group(1)
    done = run_cli(["lm-eval-ext", "run", "--model", "hf", "--model_args",
                    f"pretrained={folder}", *common])
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(tmp_path.rglob("results_*.json"))) == 1
