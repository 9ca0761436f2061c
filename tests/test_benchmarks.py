"""The other benchmarks: real lm-eval runs (embedded model, CPU, small limits) on both scoring
paths, grouping metadata in the samples, template tiers and few-shot prompts."""

import json
import re
import warnings

import pytest
from helpers import package_task_manager
from lm_eval import simple_evaluate

from lm_eval_ext.errors import DataMissingError
from lm_eval_ext.tasks.common.answer_parser import METHODS as PARSER_METHODS
from lm_eval_ext.tasks.common.answer_parser import ParsedAnswer

# task -> (limit, grouping field kept per item, metric keys expected in the results)
RUNS = {
    "truthfulqa_ext_mc1": (2, "category", {"acc,parsed", "parse_failure_rate,parsed"}),
    "truthfulqa_ext_mc1_loglik": (4, "type", {"acc,none", "acc_norm,none"}),
    "truthfulqa_ext_mc2_loglik": (3, "category", {"mc2,none", "acc,none"}),
    "toxigen_ext": (2, "target_group", {"acc,parsed", "parse_failure_rate,parsed"}),
    "toxigen_ext_loglik": (4, "target_group", {"acc,none", "acc_norm,none"}),
    "crows_pairs_ext": (2, "bias_type", {"pct_stereotype,parsed", "acc,parsed"}),
    "crows_pairs_ext_loglik": (4, "bias_type", {"pct_stereotype,none", "likelihood_diff,none"}),
    "xstest_ext": (2, "type", {"refusal_rate_safe,classified", "compliance_rate_unsafe,classified"}),
}


manager = package_task_manager


@pytest.fixture(scope="module")
def tasks(data_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ToxiGen falls back to its train split
        return manager().load(list(RUNS))["tasks"]


@pytest.mark.slow
@pytest.mark.parametrize("task", list(RUNS))
def test_real_run_keeps_items_groups_and_aggregates(task, embedded_lm, data_dir):
    limit, group_field, metric_keys = RUNS[task]
    results = simple_evaluate(model=embedded_lm, tasks=[task], task_manager=manager(),
                              limit=limit, log_samples=True, bootstrap_iters=0)
    samples = results["samples"][task]
    assert len(samples) == limit
    assert metric_keys <= set(results["results"][task])
    for sample in samples:
        doc = sample["doc"]
        assert doc["item_key"].split(":")[0] in task and doc[group_field]
        assert doc["benchmark_group"]
    accs = [s["acc"] for s in samples]
    acc_key = next(k for k in results["results"][task] if k.startswith("acc,"))
    assert results["results"][task][acc_key] == pytest.approx(sum(accs) / limit)
    if task.startswith("xstest_ext") and not task.endswith("loglik"):
        for sample in samples:
            assert sample["resps"][0][0].strip()  # a real response
            record = json.loads(sample["filtered_resps"][0])
            assert record["response_class"] in ("full_compliance", "full_refusal",
                                                "partial_refusal")
    elif not task.endswith("loglik"):
        for sample in samples:
            record = ParsedAnswer.from_json(sample["filtered_resps"][0])
            # parsed by a named rule, or counted as a failure with no answer: never guessed
            assert record.method in PARSER_METHODS
            assert (record.answer is None) == (record.method == "failure")


def test_truthfulqa_items_and_shuffled_options(tasks):
    task = tasks["truthfulqa_ext_mc1"]
    assert len(task.eval_docs) == 807 and len(task.fewshot_docs()) == 10
    labels = [d["label"] for d in task.eval_docs]
    # the true answer is listed first upstream; after shuffling it is spread over positions
    assert len(set(labels)) >= 4 and labels.count(0) < 0.5 * len(labels)
    for doc in list(task.eval_docs)[:20]:
        assert doc["options"][doc["label"]] == doc["mc1_options"][doc["mc1_label"]]
    mc2 = tasks["truthfulqa_ext_mc2_loglik"].eval_docs[0]
    assert mc2["label"] == mc2["mc2_true"]


def test_toxigen_records_the_split_used(tasks, data_dir):
    docs = tasks["toxigen_ext_loglik"].eval_docs
    # the split actually used is the one the data folder holds (test preferred, as upstream)
    held = "test" if (data_dir / "toxigen/annotated/annotated_test.csv").is_file() else "train"
    rows = {"test": 940, "train": 8960 - 13}[held]
    assert {d["split"] for d in docs} == {held} and len(docs) == rows
    # upstream text as is: 1,136 of the 8,960 train statements carry outer whitespace
    assert sum(d["text"] != d["text"].strip() for d in docs) > (1000 if held == "train" else 0)
    if held == "test":
        return
    assert sum(d["label"] for d in docs) == 3368 - sum(
        d["label"] for d in tasks["toxigen_ext_loglik"].fewshot_docs())


def test_crows_generative_letters_do_not_reveal_the_stereotype(tasks):
    docs = tasks["crows_pairs_ext"].eval_docs
    positions = [d["options"].index(d["sent_more"]) for d in docs]
    assert 0.4 < sum(positions) / len(positions) < 0.6
    loglik = tasks["crows_pairs_ext_loglik"]
    assert loglik.doc_to_text(loglik.eval_docs[0]) == ""  # upstream: empty context


def test_xstest_counts_and_pool(tasks):
    task = tasks["xstest_ext"]
    docs, pool = task.eval_docs, task.fewshot_docs()
    assert len(docs) == 440 and len(pool) == 10
    assert sum(d["safety_label"] == "safe" for d in pool) == 5
    assert not {d["item_key"] for d in pool} & {d["item_key"] for d in docs}


TIER_MARKERS = {
    "minimal": lambda p: p.rstrip().endswith("Answer:") and "JSON" not in p,
    "role": lambda p: p.startswith("You are a careful assistant"),
    "detailed": lambda p: p.startswith("Answer the question truthfully") and '"answer"' in p,
    "cot": lambda p: "Think step by step" in p and 'last line as "Answer: X"' in p,
}


@pytest.mark.parametrize("tier", list(TIER_MARKERS))
def test_template_tiers_change_the_rendered_prompt(tier, data_dir):
    task = manager(template_tier=tier).load(["truthfulqa_ext_mc1"])["tasks"]["truthfulqa_ext_mc1"]
    doc = task.eval_docs[0]
    prompt = task.doc_to_text(doc)
    assert TIER_MARKERS[tier](prompt), prompt
    assert doc["template_tier"] == tier and doc["question"] in prompt
    assert task.config.metadata["template_tier"] == tier  # recorded in results configs


def test_loglik_cot_tier_and_bbq_tiers(data_dir):
    tm = manager(template_tier="cot")
    loglik = tm.load(["bbq_subset_12p5pct_loglik"])["tasks"]["bbq_subset_12p5pct_loglik"]
    prompt = loglik.doc_to_text(loglik.eval_docs[0])
    assert prompt.startswith("Answer the multiple-choice question")
    assert prompt.endswith("Let's think step by step.\nAnswer:")


@pytest.mark.parametrize("shots", [0, 3, 5])
def test_few_shot_examples_come_from_outside_the_evaluated_set(shots, tasks):
    task = tasks["truthfulqa_ext_mc1_loglik"]
    doc = task.eval_docs[0]
    context = task.fewshot_context(doc, num_fewshot=shots)
    pool = task.fewshot_docs()
    shown = [d for d in pool if d["question"] in context]
    assert len(shown) == shots and shown == list(pool)[:shots]
    assert not {d["item_key"] for d in shown} & {d["item_key"] for d in task.eval_docs}
    assert context.endswith(task.doc_to_text(doc))
    assert len(re.findall(r"^Question: ", context, flags=re.M)) == shots + 1


@pytest.mark.slow
def test_sampled_decoding_is_recorded_for_the_analysis(embedded_lm, tmp_path, data_dir):
    from helpers import save_lm_eval_run

    from lm_eval_ext.analysis.loader import load_runs

    save_lm_eval_run(embedded_lm, "truthfulqa_ext_mc1", 1, tmp_path,
                     gen_kwargs="temperature=0.7,do_sample=True", random_seed=3,
                     num_fewshot=3)
    [run] = load_runs([tmp_path])
    setting = run.info["task_settings"]["truthfulqa_ext_mc1"]
    # the seed that drew the texts (torch's: transformers samples with it), as lm-eval wrote it;
    # two seeds were carded alike (trial 18, N18_133)
    config = json.loads(next(tmp_path.rglob("results_*.json")).read_text())["config"]
    assert setting["decoding"] == f"T=0.7,torch_seed={config['torch_seed']}"
    assert setting["shots"] == 3
    seeds = json.loads(run.cards["truthfulqa_ext_mc1"]["decoding"])["seeds"]
    assert seeds == {k: config[f"{k}_seed"] for k in ("random", "numpy", "torch")}
    assert seeds["random"] == 3
    assert setting["template_tier"] == "detailed" and setting["scoring_path"] == "generative"
    assert run.items["benchmark_group"].notna().all()


def test_missing_benchmark_file_names_file_and_setting(data_dir, tmp_path, monkeypatch):
    from lm_eval_ext.data import text_benchmarks

    (tmp_path / "truthfulqa/data/v1").mkdir(parents=True)
    (tmp_path / "truthfulqa/data/v1/TruthfulQA.csv").symlink_to(
        data_dir / "truthfulqa/data/v1/TruthfulQA.csv")
    monkeypatch.setenv("LM_EVAL_EXT_DATA", str(tmp_path))
    text_benchmarks.truthfulqa_rows.cache_clear()
    with pytest.raises(DataMissingError) as err:
        text_benchmarks.truthfulqa_rows()
    assert "mc_task.json" in str(err.value) and "LM_EVAL_EXT_DATA" in str(err.value)
    text_benchmarks.truthfulqa_rows.cache_clear()


@pytest.mark.slow
def test_truthfulqa_mc2_is_analysed_and_equals_lm_evals_mean(embedded_lm, tmp_path, data_dir):
    """Trial 17 (N17_148): analyze of truthfulqa_ext_mc2_loglik reported accuracy only; the
    task's own mc2 moved 0.3826 -> 0.3978 in the results files and appeared nowhere."""
    import numpy as np
    from helpers import save_lm_eval_run

    from lm_eval_ext.analysis.loader import load_runs
    from lm_eval_ext.analysis.metrics import MC2, metrics_for

    task = "truthfulqa_ext_mc2_loglik"
    save_lm_eval_run(embedded_lm, task, 3, tmp_path)
    [run] = load_runs([tmp_path])  # its mc2 recomputed and checked against the results file
    assert MC2 in metrics_for(run.items)
    [results] = tmp_path.rglob("results_*.json")
    reported = json.loads(results.read_text())["results"][task]["mc2,none"]
    samples = [json.loads(line) for line in next(tmp_path.rglob("samples_*.jsonl")).open()]
    assert MC2.compute(run.items) == pytest.approx(reported)  # lm-eval's own aggregate
    assert MC2.compute(run.items) == pytest.approx(np.mean([s["mc2"] for s in samples]))
