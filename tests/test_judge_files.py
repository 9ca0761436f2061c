"""The judge's own files beside a run, damaged: one line that says to judge again (trial 11)."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.loader import campaign_card, judge_scores_path, read_judge_scores
from lm_eval_ext.analysis.synthetic import simulate_predictions, write_run
from lm_eval_ext.cli import main as cli_main
from lm_eval_ext.data.instrument import load_membership

TASK = "bbq_instrument_loglik"


@pytest.fixture
def judged(tmp_path):
    """A run with judge scores and a judge summary beside its results file."""
    rows = load_membership("instrument").rows[:8]
    answers = simulate_predictions(rows, 0.6, np.random.default_rng(0))
    results = write_run(tmp_path / "run", TASK, rows, answers)
    scores = judge_scores_path(results, TASK)
    scores.write_text("".join(f'{{"doc_id": {i}, "judge_bias": 0.0}}\n' for i in range(8)))
    scores.with_suffix(".json").write_text('{"rubric_sha256": {"bias": "ab"}}\n')
    return results, scores


def test_an_intact_judging_is_read(judged):
    results, _ = judged
    frame, rubrics = read_judge_scores(results, TASK)
    assert len(frame) == 8 and rubrics == {"bias": "ab"}


@pytest.mark.parametrize(("text", "what"), [
    ("{", "(the judge's summary) cannot be read (not valid JSON: Expecting"),
    ("[]", "(the judge's summary) holds a JSON list, not a summary"),
])
def test_a_damaged_judge_summary_says_to_judge_again(judged, text, what, capsys, tmp_path):
    """`judge_*.json` holding [] was an AttributeError bug line in judge, analyze and
    compare-harness; cut, analyze advised rerunning the evaluation, which added a second
    results file."""
    results, scores = judged
    summary = scores.with_suffix(".json")
    summary.write_text(text)
    again = (f"judge the run again (`lm-eval-ext judge {results.parent} --overwrite`), or remove "
             "the judge's files to analyse the run unjudged")
    with pytest.raises(AnalysisInputError) as caught:
        read_judge_scores(results, TASK)
    assert str(caught.value).startswith(f"{summary} {what}")
    assert str(caught.value).endswith(again)
    code = cli_main.main(["analyze", "--reference", f"a={results.parent.parent}", "--runs",
                          f"b={results.parent.parent}", "--out", str(tmp_path / "an"),
                          "--bootstrap", "100", "--mc-draws", "10", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].endswith(again)


def test_judge_files_of_another_run_are_refused(judged, tmp_path):
    """Trial 17 (N17_179): judge files copied from run A into run B (renamed to B's stamp)
    paired A's judge scores with B's items, no word: the summary names the judged samples."""
    import json

    from lm_eval_ext.analysis.loader import samples_path
    from lm_eval_ext.data.store import sha256_of

    results, scores = judged
    summary = scores.with_suffix(".json")
    summary.write_text(json.dumps({"rubric_sha256": {"bias": "ab"},
                                   "samples_sha256": sha256_of(samples_path(results, TASK))}))
    assert len(read_judge_scores(results, TASK)[0]) == 8  # its own run: read
    summary.write_text(json.dumps({"rubric_sha256": {"bias": "ab"}, "samples_sha256": "0" * 64}))
    with pytest.raises(AnalysisInputError) as caught:
        read_judge_scores(results, TASK)
    assert str(caught.value) == (
        f"{scores} (the judge's scores) judged another samples file than "
        f"{samples_path(results, TASK)} (its SHA-256 differs: copied from another run, or the "
        f"samples changed since): judge the run again (`lm-eval-ext judge {results.parent} "
        "--overwrite`), or remove the judge's files to analyse the run unjudged")


def test_damaged_judge_scores_say_to_judge_again(judged):
    results, scores = judged
    scores.write_text('{"doc_id": 0, "jud')
    with pytest.raises(AnalysisInputError) as caught:
        read_judge_scores(results, TASK)
    assert str(caught.value).startswith(f"{scores} (the judge's scores) is damaged or cut: judge "
                                        "the run again")


def test_a_damaged_campaign_card_says_to_rerun_the_campaign(judged):
    """A cut card.json was told "rerun the evaluation"; a campaign reruns a damaged cell."""
    results, _ = judged
    (results.parent / "card.json").write_text("{")
    with pytest.raises(AnalysisInputError) as caught:
        campaign_card(results)
    assert str(caught.value) == (f"{results.parent / 'card.json'} (the campaign's card of this "
                                 "cell) is damaged: rerun the campaign, which runs a damaged "
                                 "cell again")


def test_a_rerun_after_the_samples_changed_is_not_the_same_judging(judged):
    """Trial 17 (N17_179): a judging is reused by a rerun of the same settings; on other
    samples it must not be."""
    import json

    from lm_eval_ext.judge.run import JudgeTarget, _judging_differences

    results, scores = judged
    target = JudgeTarget(results, TASK)
    summary = {"judge": {}, "max_gen_toks": 96, "rubric_sha256": {}, "n_items": 8}
    scores.with_suffix(".json").write_text(json.dumps(summary))
    assert _judging_differences(target, {}, [], 96, None) == []
    scores.with_suffix(".json").write_text(json.dumps({**summary, "samples_sha256": "0" * 64}))
    assert _judging_differences(target, {}, [], 96, None) == [
        "the judged samples file is another (its SHA-256 differs)"]


def test_a_judging_of_the_first_items_is_not_a_judging_of_every_item(judged):
    """Trial 18 (N18_77): `judge RUN` after `judge RUN --limit 4` on an 8-item run reused the
    4-item judging, rc 0: no --limit means every item."""
    import json

    from lm_eval_ext.judge.run import JudgeTarget, _judging_differences

    results, scores = judged
    target = JudgeTarget(results, TASK)
    scores.with_suffix(".json").write_text(json.dumps(
        {"judge": {}, "max_gen_toks": 96, "rubric_sha256": {}, "n_items": 4}))
    assert _judging_differences(target, {}, [], 96, None) == ["items 4 then, 8 now"]
    assert _judging_differences(target, {}, [], 96, 4) == []
    assert _judging_differences(target, {}, [], 96, 50) == ["items 4 then, 8 now"]


def test_a_campaign_judged_with_other_settings_names_its_own_fix(tmp_path):
    """A campaign rerun without its earlier --judge-limit: the judge's "pass --overwrite" is no
    campaign option; the line gives the judge command that judges every cell again."""
    import json

    from lm_eval_ext.campaign.judging import JudgeSettings, judge_cells
    from lm_eval_ext.campaign.store import CampaignFolder
    from lm_eval_ext.data.store import sha256_of
    from lm_eval_ext.judge.rubrics import RUBRICS
    from lm_eval_ext.judge.run import JudgingDiffers

    task = "bbq_instrument"
    rows = load_membership("instrument").rows[:8]
    results = write_run(tmp_path / "camp" / "cells" / "c1" / "output", task, rows,
                        simulate_predictions(rows, 0.6, np.random.default_rng(0)))
    data = json.loads(results.read_text())
    data["configs"][task]["output_type"] = "generate_until"
    results.write_text(json.dumps(data))
    scores = judge_scores_path(results, task)
    scores.write_text("".join(f'{{"doc_id": {i}}}\n' for i in range(4)))
    samples = next(results.parent.glob(f"samples_{task}_*.jsonl"))
    scores.with_suffix(".json").write_text(json.dumps({
        "task": task, "results": results.name, "n_items": 4, "samples_sha256": sha256_of(samples),
        "judge": {"model": "hf-metered", "model_args": "", "batch_size": 8}, "max_gen_toks": 96,
        "rubric_sha256": {r.name: r.sha256 for r in RUBRICS.values()}, "counts": {},
        "created": "2026-12-07T21:00:00+0000"}))
    folder = CampaignFolder(tmp_path / "camp")
    with pytest.raises(JudgingDiffers) as caught:
        judge_cells(folder, JudgeSettings())
    assert str(caught.value) == (
        f"{scores} holds an earlier judging with other settings (items 4 then, 8 now); rerun "
        "the campaign with its earlier --judge-model, --judge-model-args and --judge-limit to "
        "keep it, or first judge every cell again with these settings: lm-eval-ext judge "
        f"{folder.cells_dir} --overwrite")
    [kept] = judge_cells(folder, JudgeSettings(limit=4))  # the earlier settings: reused
    assert (kept["n_items"], kept["reused"]) == (4, True)
