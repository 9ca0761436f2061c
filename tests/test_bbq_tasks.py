"""BBQ task configs: generated YAMLs, no shadowing, loading, and real in-process runs."""

import json
from pathlib import Path

import pytest
from helpers import package_task_manager
from lm_eval import simple_evaluate
from lm_eval.tasks._index import TaskIndex

import lm_eval_ext.tasks.bbq._generate_configs as gen
from lm_eval_ext.data.instrument import load_manifest
from lm_eval_ext.paths import package_tasks_dir
from lm_eval_ext.tasks.bbq.metrics import s_amb, s_dis
from lm_eval_ext.tasks.common.answer_parser import ParsedAnswer, parse_abc

BBQ_DIR = package_tasks_dir() / "bbq"


@pytest.fixture(scope="module")
def task_manager(data_dir):
    return package_task_manager()


def our_task_names() -> list[str]:
    return sorted(Path(name).stem for name in gen.render_configs())


def test_committed_yamls_equal_generator_output():
    rendered = gen.render_configs()
    committed = {p.name: p.read_text() for p in BBQ_DIR.glob("bbq_*.yaml")}
    assert committed == rendered


@pytest.mark.slow
def test_no_task_shadows_an_upstream_name():
    import lm_eval.tasks

    upstream = set(TaskIndex().build([Path(lm_eval.tasks.__file__).parent]))
    ours = set(TaskIndex().build([package_tasks_dir()]))
    assert "bbq" in upstream and "bbq_subset_25pct" in ours
    assert not (ours & upstream)


@pytest.mark.slow
def test_every_membership_task_loads_its_rows(task_manager, data_dir):
    memberships = load_manifest()["memberships"]
    names = [n for n in our_task_names() if not n.startswith("bbq_full")]
    tasks = task_manager.load(names)["tasks"]
    for name, task in tasks.items():
        membership = task.config.dataset_kwargs["membership"]
        assert len(task.eval_docs) == memberships[membership]["rows"], name
        assert task.config.metadata["membership_sha256"] == memberships[membership][
            "membership_sha256"]


def test_headline_task_uses_generative_path(task_manager):
    task = task_manager.load(["bbq_subset_25pct"])["tasks"]["bbq_subset_25pct"]
    assert task.OUTPUT_TYPE == "generate_until"
    assert task.config.generation_kwargs["max_gen_toks"] == 128
    assert task.config.generation_kwargs["do_sample"] is False
    doc = task.eval_docs[0]
    prompt = task.doc_to_text(doc)
    assert '{"answer": "A", "reasoning":' in prompt
    assert f"Context: {doc['context'].strip()}" in prompt and f"C. {doc['ans2']}" in prompt
    loglik = task_manager.load(["bbq_subset_25pct_loglik"])["tasks"]["bbq_subset_25pct_loglik"]
    assert loglik.OUTPUT_TYPE == "multiple_choice"


def _run(lm, task_manager, task, limit):
    results = simple_evaluate(model=lm, tasks=[task], task_manager=task_manager, limit=limit,
                              log_samples=True, bootstrap_iters=0)
    samples = results["samples"][task]
    assert len(samples) == limit
    return results, samples


@pytest.mark.slow
def test_loglik_run_scores_match_logged_loglikelihoods(embedded_lm, task_manager):
    task = "bbq_subset_12p5pct_loglik"
    results, samples = _run(embedded_lm, task_manager, task, 12)
    records, correct = [], []
    for s in samples:
        lls = [float(r[0]) for r in s["filtered_resps"]]
        assert len(lls) == 3 and all(ll < 0 for ll in lls)
        pred = max(range(3), key=lls.__getitem__)
        correct.append(pred == s["doc"]["label"])
        assert s["bias_s_dis"]["pred"] == pred
        records.append(s["bias_s_dis"])
        assert {"unit_id", "category", "target_loc", "answer_info"} <= set(s["doc"])
    metrics = results["results"][task]
    assert metrics["acc,none"] == pytest.approx(sum(correct) / 12)
    assert metrics["bias_s_dis,none"] == pytest.approx(s_dis(records), nan_ok=True)
    assert metrics["bias_s_amb,none"] == pytest.approx(s_amb(records), nan_ok=True)


@pytest.mark.slow
def test_generative_run_logs_generation_parse_and_metadata(embedded_lm, task_manager):
    task = "bbq_subset_12p5pct"
    results, samples = _run(embedded_lm, task_manager, task, 4)
    parsed = []
    for s in samples:
        prompt = s["arguments"][0][0]  # in-process samples keep the request tuples
        # the request is logged as the task built it: hf-metered templates a copy
        assert not prompt.startswith("<|im_start|>") and prompt.startswith("Answer the")
        generation = s["resps"][0][0]
        assert generation.strip(), "the embedded model produced an empty generation"
        options = [s["doc"]["ans0"], s["doc"]["ans1"], s["doc"]["ans2"]]
        record = ParsedAnswer.from_json(s["filtered_resps"][0])
        assert record == parse_abc(generation, options)
        parsed.append(record)
    metrics = results["results"][task]
    n_failed = sum(not p.parsed for p in parsed)
    assert metrics["parse_failure_rate,parsed"] == pytest.approx(n_failed / 4)
    correct = [p.parsed and "ABC".index(p.answer) == s["doc"]["label"]
               for p, s in zip(parsed, samples, strict=False)]
    assert metrics["acc,parsed"] == pytest.approx(sum(correct) / 4)
    info = results["config"]["hf_metered"]
    assert info["generation_chat_template_applied_by"] == "hf-metered"
    metadata = json.loads(json.dumps(results["configs"][task]["metadata"]))  # JSON round trip
    assert metadata["version"] == 2.1 and metadata["template_tier"] == "detailed"
    assert metadata["membership_sha256"] == load_manifest()["memberships"]["12p5pct"][
        "membership_sha256"]


def test_lm_evals_custom_dataset_advice_is_not_shown_for_our_tasks(task_manager, caplog):
    """lm-eval advises --metadata kwargs for every custom-dataset task; ours take none."""
    import logging

    from lm_eval_ext.plugin.upstream_noise import drop_metadata_hint

    def advice(tasks: list[str]) -> int:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lm_eval.api.task"):
            task_manager.load(tasks)
        return sum("Custom kwargs can be passed" in r.getMessage() for r in caplog.records)

    drop_metadata_hint()
    assert advice(["bbq_subset_25pct_loglik", "bbq_subset_37p5pct"]) == 0
    task_logger = logging.getLogger("lm_eval.api.task")
    ours = task_logger.filters[:]
    task_logger.filters.clear()
    try:
        assert advice(["bbq_subset_25pct_loglik", "bbq_subset_37p5pct"]) == 2  # lm-eval's own
    finally:
        task_logger.filters[:] = ours
