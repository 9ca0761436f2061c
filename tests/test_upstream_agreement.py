"""Per-item agreement with lm-eval's own TruthfulQA task (prompt and MC2 formula)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import package_task_manager


@pytest.fixture(scope="module")
def primer_tasks(data_dir):
    names = ["truthfulqa_ext_mc1_loglik", "truthfulqa_ext_mc2_loglik"]
    return package_task_manager(template_tier="qa_primer").load(names)["tasks"]


def test_qa_primer_tier_is_lm_evals_own_prompt_item_for_item(primer_tasks):
    from pathlib import Path

    import yaml
    from lm_eval import tasks as lm_eval_tasks
    from lm_eval.utils import apply_template

    upstream = yaml.safe_load((Path(lm_eval_tasks.__file__).parent / "truthfulqa" /
                               "truthfulqa_mc1.yaml").read_text())["doc_to_text"]
    task = primer_tasks["truthfulqa_ext_mc1_loglik"]
    docs = list(task.eval_docs)
    assert len(docs) == 807
    for doc in docs:
        prompt = task.doc_to_text(doc)
        assert prompt == apply_template(upstream, {"question": doc["question"]})
        assert doc["template_tier"] == "qa_primer"
    assert prompt.count("\nQ: ") == 6 and "A: I have no comment." in prompt
    assert prompt.endswith(f"Q: {docs[-1]['question']}\nA:")


def test_mc2_equals_lm_evals_formula_on_the_same_loglikelihoods(primer_tasks):
    from lm_eval.tasks.truthfulqa.utils import process_results_mc2 as upstream_mc2

    from lm_eval_ext.tasks.truthfulqa.utils import process_results_mc2

    rng = np.random.default_rng(0)
    for doc in list(primer_tasks["truthfulqa_ext_mc2_loglik"].eval_docs)[:200]:
        results = [(float(ll), False) for ll in rng.normal(-20, 5, len(doc["options"]))]
        labels = [int(i in doc["label"]) for i in range(len(doc["options"]))]
        theirs = upstream_mc2({"mc2_targets": {"labels": labels}}, results)["acc"]
        assert process_results_mc2(doc, results)["mc2"] == pytest.approx(theirs, rel=1e-9)


def test_qa_primer_is_refused_on_the_generative_path(data_dir):
    from lm_eval_ext.errors import ConfigError
    from lm_eval_ext.tasks.truthfulqa.utils import load_docs

    with pytest.raises(ConfigError, match="log-likelihood prompt"):
        load_docs("mc1", "generative", "qa_primer")


def test_crows_pairs_choices_and_scores_equal_lm_evals_per_item(data_dir):
    from lm_eval.tasks.crows_pairs.utils import doc_to_choice, process_results

    from lm_eval_ext.tasks.crows_pairs.utils import process_results_loglik

    task = package_task_manager().load(["crows_pairs_ext_loglik"])["tasks"][
        "crows_pairs_ext_loglik"]
    docs = list(task.eval_docs)
    assert len(docs) == 1498
    rng = np.random.default_rng(1)
    for doc in docs:
        assert sorted(task.doc_to_choice(doc)) == sorted(doc_to_choice(doc))
        lls = {s: float(rng.normal(-40, 8)) for s in doc_to_choice(doc)}
        ours = process_results_loglik(doc, [(lls[s], False) for s in task.doc_to_choice(doc)])
        theirs = process_results(doc, [(lls[s], False) for s in doc_to_choice(doc)])
        assert ours["pct_stereotype"] == theirs["pct_stereotype"]
        assert ours["likelihood_diff"] == pytest.approx(theirs["likelihood_diff"])


def test_toxigen_labels_equal_lm_evals_rule_per_item(data_dir):
    from lm_eval.tasks.toxigen.utils import doc_to_target

    from lm_eval_ext.data.text_benchmarks import toxigen_rows

    rows, _ = toxigen_rows("auto")
    assert all(int(r["toxic"]) == int(doc_to_target(r)) for r in rows)
    assert 0.3 < np.mean([r["toxic"] for r in rows]) < 0.45  # both classes present


def test_toxigens_train_split_fallback_is_one_note_not_a_python_warning(capsys, recwarn,
                                                                       data_dir):
    """Trial 19 (N19_112): the offline fallback printed a UserWarning with a source path and
    line; it is one note, once (the rows are cached), where the test split is absent."""
    from lm_eval_ext.data.text_benchmarks import toxigen_rows

    toxigen_rows.cache_clear()
    capsys.readouterr()
    _, split = toxigen_rows("auto")
    toxigen_rows("auto")
    err = capsys.readouterr().err
    assert not [w for w in recwarn if "ToxiGen" in str(w.message)]
    if split == "test":  # the test split is here: nothing to say
        assert err == ""
    else:
        assert err == ("lm-eval-ext: note: ToxiGen test split (940 rows) unavailable here; "
                       "evaluating the annotated train split (8,960 rows) instead; the output "
                       "records split=train\n")
