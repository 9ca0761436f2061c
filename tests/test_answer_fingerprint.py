"""A run's samples with another run's answers are refused, aggregates or not.

A bf16 run's samples under an fp32 run's results file passed every check when the aggregates
agreed (answer agreement 0.833 reported where the real fp32 run has 1.0). The metered models
now record a fingerprint of every answer (``config.responses``); the loader compares it.
"""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import save_lm_eval_run

from lm_eval_ext.analysis.errors import AnalysisInputError
from lm_eval_ext.analysis.loader import load_runs

TASK = "crows_pairs_ext_loglik"


def _samples_file(folder):
    return next(folder.rglob(f"samples_{TASK}_*.jsonl"))


@pytest.fixture(scope="module")
def fp32_run(embedded_lm, tmp_path_factory):
    embedded_lm.reset_metering()
    return save_lm_eval_run(embedded_lm, TASK, 4, tmp_path_factory.mktemp("fp32") / "run")


def test_a_real_run_records_its_answers_and_loads(fp32_run):
    results = json.loads(next(fp32_run.rglob("results_*.json")).read_text())
    assert results["config"]["responses"][TASK]["responses"] == 8  # 4 pairs x 2 sentences
    [run] = load_runs([fp32_run])
    assert len(run.items) == 4


def test_other_answers_with_the_same_aggregates_are_refused(fp32_run, tmp_path):
    """A log-likelihood moved by 0.001: every pick, hash and aggregate stays the same."""
    copy = tmp_path / "run"
    shutil.copytree(fp32_run, copy)
    samples = _samples_file(copy)
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    loglik = lines[0]["resps"][0][0][0]
    lines[0]["resps"][0][0][0] = str(float(loglik) - 0.001)
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(AnalysisInputError, match="its answers are not the ones the model gave "
                                                 r"in the run that wrote the results file "
                                                 r"\(config.responses\)"):
        load_runs([copy])


@pytest.mark.slow
def test_a_bf16_runs_samples_under_an_fp32_results_file_are_refused(embedded_lm, tmp_path):
    """The issue's case, with real fp32 and bf16 runs of the same BBQ items."""
    from lm_eval_ext.backends.hf.metered import HFMeteredLM

    task = "bbq_subset_12p5pct_loglik"
    embedded_lm.reset_metering()
    fp32 = save_lm_eval_run(embedded_lm, task, 4, tmp_path / "fp32")
    bf16 = save_lm_eval_run(HFMeteredLM(device="cpu", batch_size=4, precision="bf16",
                                        idle_seconds=0), task, 4, tmp_path / "bf16")
    reports = [json.loads(next(run.rglob("results_*.json")).read_text())["results"][task]
               for run in (fp32, bf16)]
    assert {k: v for k, v in reports[0].items() if k.endswith(",none")} == {
        k: v for k, v in reports[1].items() if k.endswith(",none")}  # the aggregates agree
    target = next(fp32.rglob(f"samples_{task}_*.jsonl"))
    shutil.copyfile(next(bf16.rglob(f"samples_{task}_*.jsonl")), target)  # the fp32 stamp
    with pytest.raises(AnalysisInputError, match="its answers are not the ones the model gave"):
        load_runs([fp32])


def test_a_run_of_selected_items_loads_with_its_answers_checked(embedded_lm, tmp_path):
    """trial 15: a genuine `--samples` run was refused as mixed: lm-eval's requests carry each
    item's position among those selected, its samples file the item's index."""
    embedded_lm.reset_metering()
    run = save_lm_eval_run(embedded_lm, TASK, None, tmp_path / "run", samples={TASK: [1, 3]})
    [loaded] = load_runs([run])
    assert sorted(loaded.items["doc_id"]) == [1, 3]
    samples = _samples_file(run)  # the check still holds: one answer moved is refused
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    lines[1]["resps"][0][0][0] = str(float(lines[1]["resps"][0][0][0]) - 0.001)
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(AnalysisInputError, match="its answers are not the ones the model gave"):
        load_runs([run])


def test_a_run_answered_from_lm_evals_request_cache_says_nothing_was_measured(embedded_lm,
                                                                             tmp_path):
    """trial 15: a --use_cache rerun wrote inference_seconds 0.0 with no flag, and analyze
    called it impossible. No request reached the model: nothing was measured."""
    from lm_eval_ext.metering.ledger import NO_REQUESTS

    cache = str(tmp_path / "cache" / "c")
    embedded_lm.reset_metering()
    first = save_lm_eval_run(embedded_lm, TASK, 2, tmp_path / "first", use_cache=cache)
    embedded_lm.reset_metering()
    again = save_lm_eval_run(embedded_lm, TASK, 2, tmp_path / "again", use_cache=cache)
    measured, cached = (json.loads(next(run.rglob("results_*.json")).read_text())["config"][
        "metering"] for run in (first, again))
    assert measured["inference_seconds"] > 0 and NO_REQUESTS not in measured["flags"]
    assert cached["inference_seconds"] is None and NO_REQUESTS in cached["flags"]
    [run] = load_runs([again])
    assert run.info["inference_seconds"] is None
    assert "inference_seconds_impossible" not in run.info["energy_flags"]
    # trial 16: half the answers from the cache, the other half metered: no cost at all
    embedded_lm.reset_metering()
    half = save_lm_eval_run(embedded_lm, TASK, 4, tmp_path / "half", use_cache=cache)
    metering = json.loads(next(half.rglob("results_*.json")).read_text())["config"]["metering"]
    assert 0 < metering["per_task"][TASK]["n_requests"] < 16  # 4 pairs x 2 sentences
    [partly] = load_runs([half])
    assert partly.info["inference_seconds"] is None and partly.info["energy_joules"] is None
    assert "requests_not_all_metered" in partly.info["energy_flags"].split(",")
    [whole] = load_runs([first])
    assert whole.info["inference_seconds"] > 0  # every request metered: its cost stands


def test_a_predict_only_run_is_named_as_such(embedded_lm, tmp_path):
    """trial 16: a --predict_only run was blamed on a cut or mixed samples file, and the advice
    (rerun with --log_samples) repeated the refusal."""
    embedded_lm.reset_metering()
    run = save_lm_eval_run(embedded_lm, TASK, 2, tmp_path / "po", predict_only=True)
    with pytest.raises(AnalysisInputError) as caught:
        load_runs([run])
    assert str(caught.value).endswith(
        ": the run was made with --predict_only (its results file reports no metric and 0 "
        "scored samples), so its answers were never scored; analyze compares scored answers: "
        "rerun the evaluation without --predict_only (with --log_samples)")
    embedded_lm.reset_metering()
    [scored] = load_runs([save_lm_eval_run(embedded_lm, TASK, 2, tmp_path / "scored")])
    assert len(scored.items) == 2  # the advice, followed
