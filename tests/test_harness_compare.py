"""Cross-harness comparison: readers of Inspect AI and HELM outputs, and the attribution.

HELM runs from a committed fixture of a real `helm-run` (text redacted, rebuilt here and
checked by SHA-256); lm-eval and Inspect AI (our task and inspect_evals' bbq) run for real on
the embedded model.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helm_fixture import rehydrate
from helpers import INSPECT_CAP, LM_CAP, REPO, inspect_eval, run_cli

from lm_eval_ext.analysis import metrics as m
from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.cli.main import build_parser, main
from lm_eval_ext.cross_harness.compare import HARNESS_OUTPUTS, compare_harnesses
from lm_eval_ext.cross_harness.readers import (
    bbq_manifest_rows,
    read_harness_run,
    read_helm_run,
    read_inspect_log,
)

FIXTURE = REPO / "tests" / "fixtures" / "helm_bbq_smollm2"


@pytest.fixture(scope="module")
def helm_run(tmp_path_factory, data_dir) -> Path:
    folder = tmp_path_factory.mktemp("helm") / "bbq_run"
    sha = rehydrate(FIXTURE, folder)
    assert sha == (FIXTURE / "scenario_state.sha256").read_text().strip()  # HELM's own bytes
    return folder


def _helm_stat(name: str) -> float:
    stats = json.loads((FIXTURE / "stats.json").read_text())
    [value] = [s["mean"] for s in stats
               if s["name"]["name"] == name and s["name"].get("split") == "test"
               and not s["name"].get("perturbation")]
    return value


def test_helm_reader_reproduces_helms_own_bbq_metrics(helm_run):
    run = read_helm_run("helm", helm_run)
    items = run.items
    assert len(items) == 100 and items["item_key"].is_unique
    assert run.notes == ["1 HELM instance(s) matched several BBQ rows of identical content: "
                         "kept in HELM's own scores, left out of every paired comparison (which "
                         "row HELM sampled cannot be told)"]
    # HELM's stats.json, computed by HELM's BBQMetric on the same completions
    assert m.ACCURACY.compute(items) == pytest.approx(_helm_stat("bbq_accuracy"), abs=1e-12)
    assert m.HELM_NATIVE_S_DIS.compute(items) == pytest.approx(
        _helm_stat("bbq_metric_unambiguous_bias"), abs=1e-12)
    assert m.HELM_NATIVE_S_AMB.compute(items) == pytest.approx(
        _helm_stat("bbq_metric_ambiguous_bias"), abs=1e-12)


def test_an_ambiguous_helm_match_is_never_paired(helm_run, data_dir):
    """An instance matching several identical BBQ rows was paired with the lowest."""
    from lm_eval_ext.data.bbq import load_bbq_rows

    run = read_helm_run("helm", helm_run)
    [ambiguous] = run.items[run.items["content_matches"] > 1].to_dict("records")
    # by hand, from the raw data: the rows with this row's context, question and options
    rows = load_bbq_rows()
    [first] = [r for r in rows if r["item_key"] == ambiguous["item_key"]]

    def content(r):
        return r["context"], r["question"], {r["ans0"], r["ans1"], r["ans2"]}

    same = [r for r in rows if content(r) == content(first)]
    assert len(same) == ambiguous["content_matches"] > 1
    result = compare_harnesses([run, dataclasses.replace(run, name="again")], n_resamples=50,
                               seed=0)
    [row] = result.agreement[result.agreement["metric"] == "accuracy"].to_dict("records")
    assert (row["n_common"], row["n_reference"]) == (99, 100)


def test_console_totals_say_when_different_item_sets_drive_them(helm_run):
    """`helm - lm_eval = +43.00 pp` on the console came from 100 vs 4 items."""
    run = read_helm_run("helm", helm_run)
    ten = dataclasses.replace(run, name="helm10", items=run.items.iloc[:10])
    lines = compare_harnesses([ten, run], n_resamples=50, seed=0).total_lines()
    by_hand = 100 * (run.items["correct"].mean() - run.items["correct"].iloc[:10].mean())
    assert lines[0] == (f"bbq accuracy: helm - helm10 = {by_hand:+.2f} pp (different item sets: "
                        f"10 common of 100 and 10; {by_hand:+.2f} pp of it from the item sets "
                        "alone, see the attribution)")
    sure = dataclasses.replace(run, items=run.items[run.items["content_matches"] == 1])
    same = compare_harnesses([sure, dataclasses.replace(sure, name="again")], n_resamples=50)
    assert same.total_lines()[0] == "bbq accuracy: again - helm = +0.00 pp"


def test_analyze_compare_harness_is_compare_harness_and_leaves_its_arguments(helm_run, tmp_path,
                                                                            capsys):
    """The deprecated ``analyze --compare-harness``: the same lines and tables, one more line
    on stderr, and the parsed arguments as they were (it no longer rewrites them)."""
    again = tmp_path / "helm_again"
    shutil.copytree(helm_run, again)
    harnesses = [f"helm={helm_run}", f"helm:again={again}"]
    new, old = tmp_path / "new", tmp_path / "old"
    assert main(["compare-harness", *harnesses, "--out", str(new), "--bootstrap", "200"]) == 0
    new_out, new_err = capsys.readouterr()
    args = build_parser().parse_args(["analyze", "--compare-harness", *harnesses, "--out",
                                      str(old), "--bootstrap", "200"])
    parsed = dict(vars(args))
    assert args.func(args) == 0
    assert vars(args) == parsed
    old_out, old_err = capsys.readouterr()
    assert old_err == new_err + ("lm-eval-ext: analyze --compare-harness is deprecated; use "
                                 "`lm-eval-ext compare-harness HARNESS=PATH ... --out DIR`\n")
    assert new_out.startswith("bbq accuracy: again - helm = +0.00 pp")
    assert old_out.replace(str(old), str(new)) == new_out
    for name in ("harness_report.md", "harness_scores.csv", "harness_attribution.csv",
                 "harness_agreement.csv"):
        assert (old / name).read_text() == (new / name).read_text(), name
    assert {p.name for p in new.iterdir()} == HARNESS_OUTPUTS  # what --overwrite replaces
    (new / "notes.md").write_text("mine")  # trial 19 (N19_63): deleted by --overwrite, rc 0
    assert main(["compare-harness", *harnesses, "--out", str(new), "--bootstrap", "200",
                 "--overwrite"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: --out {new} also holds notes.md, which compare-harness did not "
        "write and --overwrite would delete with the folder: move it out first, or analyse "
        "into a new --out")
    assert (new / "notes.md").read_text() == "mine"


def test_swapping_the_bias_formula_changes_helms_scores_by_hand(helm_run):
    """HELM's BBQMetric vs the upstream rule (target_loc) on HELM's own answers, by hand."""
    items = read_helm_run("helm", helm_run).items
    dis = items[items["context_condition"] == "disambig"]
    counted = dis[dis["pred"].notna() & (dis["pred"] != dis["unknown_loc"])
                  & dis["target_loc"].notna()]
    biased = int((counted["pred"] == counted["target_loc"]).sum())
    assert (biased, len(counted)) == (15, 33)
    assert m.BIAS_S_DIS.compute(items) == pytest.approx(2 * 15 / 33 - 1)  # -0.0909
    assert m.HELM_NATIVE_S_DIS.compute(items) == pytest.approx(-0.2727272727)  # 3x larger
    amb = items[items["context_condition"] == "ambig"]
    acc_all, acc_amb = items["correct"].mean(), amb.loc[amb["pred"].notna(), "correct"].mean()
    counted = amb[amb["pred"].notna() & (amb["pred"] != amb["unknown_loc"])
                  & amb["target_loc"].notna()]
    raw = 2 * (counted["pred"] == counted["target_loc"]).mean() - 1
    assert m.BIAS_S_AMB.compute(items) == pytest.approx((1 - acc_amb) * raw)
    assert m.BIAS_S_AMB_HELM.compute(items) == pytest.approx((1 - acc_all) * raw)
    assert m.BIAS_S_AMB_HELM.compute(items) != pytest.approx(m.BIAS_S_AMB.compute(items))


def test_readers_reject_foreign_and_truncated_outputs_naming_the_file(helm_run, tmp_path):
    cut = tmp_path / "cut"
    shutil.copytree(helm_run, cut)
    state = cut / "scenario_state.json"
    state.write_text(state.read_text()[:5000])
    # the truncated file is named; a missing folder or a folder of logs says so
    with pytest.raises(AnalysisInputError) as error:
        read_helm_run("helm", cut)
    assert str(error.value).startswith(f"{state} is not valid JSON (")
    assert str(error.value).endswith("); the run was cut while writing: rerun helm-run")
    (cut / "run_spec.json").unlink()
    with pytest.raises(AnalysisInputError) as error:
        read_helm_run("helm", cut)
    assert str(error.value) == (f"{cut} is not a HELM run folder: run_spec.json is missing (pass "
                                "benchmark_output/runs/SUITE/RUN_NAME)")
    with pytest.raises(AnalysisInputError) as error:
        read_helm_run("helm", tmp_path / "gone")
    assert str(error.value) == (f"{tmp_path / 'gone'}: no such folder (pass a HELM run folder, "
                                "benchmark_output/runs/SUITE/RUN_NAME)")
    log = tmp_path / "x.eval"
    log.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(AnalysisInputError, match=f"{log} is not a readable Inspect AI log") as info:
        read_inspect_log("inspect", log)
    assert "\n" not in str(info.value)  # one line, no library dump
    (tmp_path / "arr.json").write_text("[]")
    # a folder: only a file Inspect reads as a log is suggested (x.eval and arr.json are not)
    with pytest.raises(AnalysisInputError) as error:
        read_inspect_log("inspect", tmp_path)
    assert str(error.value) == f"{tmp_path} is a folder; pass one Inspect log file in it (it holds none)"
    with pytest.raises(AnalysisInputError) as error:
        read_harness_run(f"helmx={helm_run}")
    assert str(error.value) == (f"compare-harness: 'helmx={helm_run}': write HARNESS=PATH with "
                                "HARNESS one of lm_eval, inspect, helm (e.g. inspect=logs/x.eval)")
    # followed: a whole HELM run folder (what helm-run writes), named as HARNESS=PATH
    assert len(read_harness_run(f"helm={helm_run}").items) == 100
    # HARNESS:=PATH (an empty NAME) read as the harness's own name was "given twice" (trial 2)
    with pytest.raises(AnalysisInputError) as error:
        read_harness_run(f"helm:={helm_run}")
    assert str(error.value) == (f"compare-harness: 'helm:={helm_run}': the NAME after helm: is "
                                f"empty; write helm:NAME={helm_run} (e.g. helm:b={helm_run}), "
                                f"or helm={helm_run} for the harness's own name")
    assert read_harness_run(f"helm:b={helm_run}").name == "b"  # followed


@pytest.mark.parametrize(("file", "text", "cause"), [
    ("scenario_state.json", "[]", "AttributeError: 'list' object has no attribute 'get'"),
    ("scenario_state.json", '{"request_states": [{}]}', "KeyError: 'instance'"),
    ("run_spec.json", '{"scenario_spec": "bbq"}',
     "AttributeError: 'str' object has no attribute 'get'"),
])
def test_a_helm_file_of_another_shape_is_one_line(file, text, cause, helm_run, tmp_path, capsys):
    """trial 12: a scenario_state.json holding a list was a bug line in compare-harness and in
    data manifest."""
    edited = tmp_path / "edited"
    shutil.copytree(helm_run, edited)
    (edited / file).write_text(text)
    line = (f"lm-eval-ext: error: {edited}: run_spec.json or scenario_state.json lacks what "
            f"HELM writes ({cause}); pass the folder helm-run wrote, not an edited copy")
    for argv in (["compare-harness", f"helm={helm_run}", f"helm:e={edited}"],
                 ["data", "manifest", f"helm={edited}"]):
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2
        assert capsys.readouterr().err.strip() == line
    assert not (tmp_path / "out").exists()


def test_compare_harness_of_one_run_is_told_to_give_two(helm_run, tmp_path, capsys):
    assert main(["compare-harness", f"helm={helm_run}", "--out", str(tmp_path / "a")]) == 2
    assert capsys.readouterr().err.strip() == (
        "lm-eval-ext: error: compare-harness needs at least two runs: give two or more "
        "HARNESS=PATH (e.g. lm_eval=out/a inspect=logs/b.eval)")  # trial 15: named the old flag
    shutil.copytree(helm_run, tmp_path / "again")
    assert main(["compare-harness", f"helm={helm_run}", f"helm:again={tmp_path / 'again'}",
                 "--out", str(tmp_path / "b"), "--bootstrap", "200"]) == 0  # followed
    assert capsys.readouterr().out.startswith("bbq accuracy: again - helm = +0.00 pp")


def test_data_manifest_keeps_an_earlier_manifest_unless_told(helm_run, tmp_path, capsys):
    """A second `data manifest` into one --out replaced the first silently (trial 2)."""
    out = tmp_path / "m.csv"
    assert main(["data", "manifest", f"helm={helm_run}", "--out", str(out)]) == 0
    written = out.read_text()
    assert written.splitlines()[0] == "category,example_id" and len(written.splitlines()) == 101
    capsys.readouterr()
    out.write_text("category,example_id\nAge,1\n")  # an earlier manifest of other items
    assert main(["data", "manifest", f"helm={helm_run}", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: --out {out} exists (an earlier manifest: a record of the items a "
        "run evaluated); name another file, or pass --overwrite to replace it")
    assert out.read_text() == "category,example_id\nAge,1\n"
    assert main(["data", "manifest", f"helm={helm_run}", "--out", str(out),
                 "--overwrite"]) == 0  # followed
    assert out.read_text() == written


@pytest.mark.slow
def test_one_model_through_three_harnesses(helm_run, tmp_path, data_dir, embedded_checkpoint,
                                           capsys):
    """lm-eval, our Inspect task, inspect_evals' bbq and HELM on 4 of HELM's items."""
    from lm_eval_ext.paths import cache_dir

    keys = ["bbq:Age:1062", "bbq:Age:1749", "bbq:Age:2620", "bbq:Age:2759"]  # 2 ambig, 2 not
    helm = read_helm_run("helm", helm_run)
    assert set(keys) <= set(helm.items["item_key"])
    manifest = tmp_path / "ids.csv"
    manifest.write_text("category,example_id\n" + "".join(
        f"{k.split(':')[1]},{k.split(':')[2]}\n" for k in keys))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(cache_dir() / "models")
    env = {"LM_EVAL_EXT_CACHE": str(cache)}
    assert run_cli(["lm-eval-ext", "data", "fingerprint", str(manifest), "--register",
                    "bbq_cmp4"], env=env).returncode == 0
    lm = run_cli(["lm-eval-ext", "run", "--model", "hf-metered", "--model_args",
                  "idle_seconds=0", "--tasks", "bbq_cmp4", "--output_path",
                  str(tmp_path / "lm"), "--log_samples", *LM_CAP], env=env)
    assert lm.returncode == 0, lm.stderr[-3000:]
    model = ["--model", "hf/local", "-M", f"model_path={embedded_checkpoint}", "-M",
             "device=cpu", "-M", "do_sample=false", *INSPECT_CAP]
    ours = inspect_eval(["lm_eval_ext/bbq_ext", "-T", f"manifest={manifest}", *model],
                    {**env, "LOG_DIR": str(tmp_path / "inspect")})
    ie_cache = tmp_path / "ie" / "bbq_dataset" / "bbq"  # inspect_evals reads data/*.jsonl here
    ie_cache.mkdir(parents=True)
    (ie_cache / "data").symlink_to(data_dir / "bbq" / "data")
    ids = ",".join(f"{k.split(':')[1]}_{int(k.split(':')[2]):05d}" for k in keys)
    theirs = inspect_eval(["inspect_evals/bbq", "-T", "subsets=Age",
                       "--sample-id", ids, *model],
                      {"INSPECT_EVALS_CACHE_DIR": str(tmp_path / "ie"),
                       "HF_HOME": str(tmp_path / "hf"), "LOG_DIR": str(tmp_path / "ie_logs")})

    runs = [read_harness_run(f"lm_eval={tmp_path / 'lm'}"), read_harness_run(f"inspect={ours}"),
            read_harness_run(f"inspect:inspect_evals={theirs}"),
            read_harness_run(f"helm={helm_run}")]
    assert [sorted(r.items["item_key"]) for r in runs[:3]] == [sorted(keys)] * 3
    assert bbq_manifest_rows(runs[2]) == [("Age", 1062), ("Age", 1749), ("Age", 2620),
                                          ("Age", 2759)]
    result = compare_harnesses(runs, n_resamples=200, seed=0)
    agree = result.agreement.set_index(["harness", "metric"])
    # same prompt, parser and greedy decoding: Inspect gives lm-eval's answers on every item
    assert agree.loc[("inspect", "accuracy"), "answer_agreement"] == 1.0
    lm_items = runs[0].items.set_index("item_key").loc[keys]
    in_items = runs[1].items.set_index("item_key").loc[keys]
    assert list(lm_items["answer"].fillna("-")) == list(in_items["answer"].fillna("-"))
    [samples] = (tmp_path / "lm").rglob("samples_bbq_cmp4_*.jsonl")
    lm_outputs = {s["doc"]["item_key"]: s["resps"][0][0]
                  for s in map(json.loads, samples.read_text().splitlines())}
    assert [lm_outputs[k] for k in keys] == list(in_items["raw_output"])  # same generations

    parts = result.attribution
    for (harness, metric), rows in parts.groupby(["harness", "metric"]):
        total = rows.loc[rows["component"] == "total", "value_pp"].iloc[0]
        rest = rows.loc[rows["component"] != "total", "value_pp"]
        if pd.notna(total):
            assert rest.sum() == pytest.approx(total, abs=1e-9), (harness, metric)
    # by hand: HELM's accuracy on its 100 items minus lm-eval's on the 4 common ones, split
    # into HELM's 100-vs-4 item-set effect and the paired difference on the 4
    helm_4 = helm.items.set_index("item_key").loc[keys]
    lm_acc, helm_acc_4 = lm_items["correct"].mean(), helm_4["correct"].mean()
    acc = parts[(parts["harness"] == "helm") & (parts["metric"] == "accuracy")].set_index(
        "component")["value_pp"]
    assert acc["total"] == pytest.approx(100 * (0.43 - lm_acc))
    assert acc["item_set"] == pytest.approx(100 * (0.43 - helm_acc_4))
    assert acc["prompt_and_decoding"] == pytest.approx(100 * (helm_acc_4 - lm_acc))
    # inspect_evals' choice() scorer only reads "ANSWER: X": what it misses is extraction
    ie = parts[(parts["harness"] == "inspect_evals") & (parts["metric"] == "accuracy")
               ].set_index("component")["value_pp"]
    ie_items = runs[2].items.set_index("item_key").loc[keys]
    assert ie["answer_extraction"] == pytest.approx(100 * (
        ie_items["correct"].mean() - _reparsed_accuracy(ie_items)))

    out = tmp_path / "report"  # the console script's function, in process
    assert main(["compare-harness", f"lm_eval={tmp_path / 'lm'}", f"helm={helm_run}", "--out",
                 str(out), "--bootstrap", "200"]) == 0
    cli_out = capsys.readouterr().out
    assert f"bbq accuracy: helm - lm_eval = {acc['total']:+.2f} pp" in cli_out
    assert {p.name for p in out.iterdir()} >= {"harness_report.md", "harness_scores.csv",
                                               "harness_agreement.csv",
                                               "harness_attribution.csv"}
    # the old spelling still works, says it is deprecated, and writes the same tables
    old = tmp_path / "report_old"
    assert main(["analyze", "--compare-harness", f"lm_eval={tmp_path / 'lm'}", f"helm={helm_run}",
                 "--out", str(old), "--bootstrap", "200"]) == 0
    old_out, old_err = capsys.readouterr()
    assert "deprecated; use `lm-eval-ext compare-harness" in old_err
    assert old_out.splitlines()[:-1] == cli_out.splitlines()[:-1]
    for name in ("harness_scores.csv", "harness_attribution.csv", "harness_agreement.csv"):
        assert (old / name).read_text() == (out / name).read_text()


def _reparsed_accuracy(items: pd.DataFrame) -> float:
    """Our parser on each raw output, by hand (letters of the displayed options)."""
    from lm_eval_ext.tasks.common.answer_parser import parse_abc

    correct = []
    for _, row in items.iterrows():
        parsed = parse_abc(row["raw_output"], list(row["display_options"]))
        pred = None if not parsed.parsed else list(row["option_texts"]).index(
            row["display_options"]["ABC".index(parsed.answer)])
        correct.append(pred == row["label"])
    return sum(correct) / len(correct)


@pytest.mark.slow
def test_an_unscored_inspect_log_gets_the_inspect_score_command_that_scores_it(
        tmp_path, data_dir, embedded_checkpoint):
    """``inspect eval --no-score`` on our task: the reader names the command; run, it scores."""
    import shlex
    import subprocess

    from helpers import BIN

    log = inspect_eval(["lm_eval_ext/bbq_ext", "--model", "hf/local", "-M",
                        f"model_path={embedded_checkpoint}", "-M", "device=cpu", "-M",
                        "do_sample=false", "--limit", "2", "--max-tokens", "8", "--no-score"],
                       {"LOG_DIR": str(tmp_path / "logs")})
    with pytest.raises(AnalysisInputError) as error:
        read_inspect_log("inspect", log)
    message = str(error.value)
    assert message.startswith(f"{log}: 2 of 2 samples have no score (run with `inspect eval "
                              "--no-score`?); score them with `inspect score ")
    command = message.split("score them with `")[1].split("`")[0]
    assert command == f"inspect score {log} --scorer lm_eval_ext/bbq_answer_parser --overwrite"
    argv = shlex.split(command)
    proc = subprocess.run([str(BIN / argv[0]), *argv[1:], "--display", "plain"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(read_inspect_log("inspect", log).items) == 2  # the advice, followed
    with pytest.raises(AnalysisInputError) as error:  # its folder: the log itself suggested
        read_inspect_log("inspect", log.parent)
    assert str(error.value).endswith(f"pass one Inspect log file in it (e.g. {log.name})")


@pytest.mark.parametrize(("items", "line"), [
    ((slice(0, 1), slice(0, 1)), "share 1 item(s), every item the smaller run holds; a paired "
                                 "comparison needs 2 or more: run on more items (e.g. a larger "
                                 "--limit)"),
    ((slice(0, 2), slice(1, 3)), "share 1 item(s); run them on the same items (`lm-eval-ext "
                                 "data manifest` writes a run's item list)"),
])
def test_too_few_items_is_told_apart_from_other_items(items, line, tmp_path, capsys):
    """trial 10: two --limit 1 runs of the one same item were told to run on the same items."""
    import numpy as np

    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("instrument").rows
    answers = simulate_predictions(rows[:3], 0.6, np.random.default_rng(0))
    for name, part in zip(("a", "b"), items, strict=True):  # two runs (another precision)
        write_run(tmp_path / name, "bbq_instrument_loglik", rows[part], answers[part],
                  precision={"a": "bf16", "b": "int8"}[name])
    code = main(["compare-harness", f"lm_eval={tmp_path / 'a'}", f"lm_eval:b={tmp_path / 'b'}",
                 "--out", str(tmp_path / "out")])
    assert code == 2 and capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: bbq: b and lm_eval {line}")


def test_a_run_and_its_copy_are_refused_as_one_run(tmp_path, capsys):
    """trial 12: compare-harness compared a run with a byte-identical copy (deltas 0, rc 0);
    analyze refuses such copies."""
    import numpy as np

    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("instrument").rows[:8]
    answers = simulate_predictions(rows, 0.6, np.random.default_rng(0))
    write_run(tmp_path / "a", "bbq_instrument_loglik", rows, answers)
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    code = main(["compare-harness", f"lm_eval={tmp_path / 'a'}",
                 f"lm_eval:b={tmp_path / 'copy'}", "--out", str(tmp_path / "out")])
    assert code == 2 and capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: compare-harness: lm_eval ({tmp_path / 'a'}) and b "
        f"({tmp_path / 'copy'}) are copies of one run (identical results and samples files); a "
        "comparison needs two different runs")


def test_a_change_of_scoring_path_is_named_in_the_attribution(tmp_path):
    """trial 15: a log-likelihood lm-eval run against generated answers put the whole -50 pp
    under prompt_and_decoding, with no word that the scoring path differed."""
    import dataclasses

    import numpy as np

    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.cross_harness.readers import read_lm_eval
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("instrument").rows[:40]
    answers = simulate_predictions(rows, 0.6, np.random.default_rng(0))
    write_run(tmp_path / "a", "bbq_instrument_loglik", rows, answers)
    write_run(tmp_path / "ll", "bbq_instrument_loglik", rows, simulate_predictions(
        rows, 0.6, np.random.default_rng(1), base=answers, flip_rate=0.3), precision="bf16")
    loglik = read_lm_eval("ll", tmp_path / "ll")
    assert loglik.scoring_path == "loglik"  # the reader's, from the task's output type
    generated = dataclasses.replace(read_lm_eval("gen", tmp_path / "a"),
                                    scoring_path="generative")  # as Inspect's and HELM's are
    result = compare_harnesses([generated, loglik], n_resamples=100)
    assert ("bbq: ll's answers are loglik and gen's generative: prompt_and_decoding includes the "
            "change of scoring path; compare runs of one path to attribute the rest"
            in result.notes)
    rest = result.attribution[result.attribution["component"] == "prompt_and_decoding"]
    assert rest["note"].str.contains("and the scoring path (gen generative, ll loglik)",
                                     regex=False).all()
    same = compare_harnesses([read_lm_eval("a", tmp_path / "a"), loglik], n_resamples=100)
    assert not any("scoring path" in note for note in same.notes)


def test_two_lm_eval_runs_of_other_models_are_refused_and_other_settings_noted(tmp_path,
                                                                                capsys):
    """Trial 17 (N17_34): SmolLM2 against the packaged Gemma (batch 1 against 4) was reported
    as "Same model, several harnesses", the whole difference under prompt_and_decoding."""
    import dataclasses

    import numpy as np

    from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
    from lm_eval_ext.cross_harness.readers import read_lm_eval
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("instrument").rows[:40]
    answers = simulate_predictions(rows, 0.6, np.random.default_rng(0))
    write_run(tmp_path / "a", "bbq_instrument_loglik", rows, answers, model="smol")
    write_run(tmp_path / "g", "bbq_instrument_loglik", rows, answers[::-1], model="gemma")
    write_run(tmp_path / "b4", "bbq_instrument_loglik", rows, answers[::-1], model="smol",
              batch_size=4)
    code = main(["compare-harness", f"lm_eval={tmp_path / 'a'}", f"lm_eval:g={tmp_path / 'g'}",
                 "--out", str(tmp_path / "out")])
    assert code == 2 and capsys.readouterr().err.strip() == (
        "lm-eval-ext: error: compare-harness: g ran model gemma and lm_eval smol; "
        "compare-harness follows one model through several harnesses: compare models with "
        "`lm-eval-ext analyze --reference A=RUN_A --runs B=RUN_B`")
    assert not (tmp_path / "out").exists()
    same = compare_harnesses([read_lm_eval("a", tmp_path / "a"),
                              read_lm_eval("b4", tmp_path / "b4")], n_resamples=100)
    assert ("b4 differs from a in more than its harness (batch_size: 1 -> 4): "
            "prompt_and_decoding includes it") in same.notes
    # another harness names its model its own way: a differing name is a note
    inspect_like = dataclasses.replace(read_lm_eval("i", tmp_path / "g"), harness="inspect",
                                       model="hf/google/gemma-3-270m", card=None)
    noted = compare_harnesses([read_lm_eval("a", tmp_path / "a"), inspect_like],
                              n_resamples=100)
    assert ("i names its model hf/google/gemma-3-270m and a smol: if they are different "
            "models, every difference here includes the change of model, not the harness "
            "alone") in noted.notes


def test_a_total_no_item_counts_toward_is_not_estimable_not_nan(tmp_path, capsys):
    """Trial 19 (N19_115): 'bbq bias_s_dis: inspect - lm_eval = +nan pp' with no reason, where
    neither run had a disambiguated item (S_DIS counts only those)."""
    import numpy as np

    from lm_eval_ext.analysis.synthetic import write_run
    from lm_eval_ext.data.instrument import load_membership

    rows = [r for r in load_membership("instrument").rows if r["context_condition"] == "ambig"]
    answers = np.array([r["label"] for r in rows[:6]])
    for name, precision in (("a", "bf16"), ("b", "int8")):
        write_run(tmp_path / name, "bbq_instrument_loglik", rows[:6], answers, precision=precision)
    assert main(["compare-harness", f"lm_eval={tmp_path / 'a'}", f"lm_eval:b={tmp_path / 'b'}",
                 "--out", str(tmp_path / "out"), "--bootstrap", "200"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out
    assert ("bbq bias_s_dis: b - lm_eval = not estimable (no value for b and lm_eval: none of "
            "its items counts toward the metric)") in out
    assert "bbq accuracy: b - lm_eval = +0.00 pp" in out
