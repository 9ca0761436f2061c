"""A generative cell at batch 1 takes its texts from a parent run (``answers_from``).

Real runs of the embedded model at batch 1, greedy, at most 16 new tokens (``--gen_kwargs``, the
same in every run, so the request strings match): a parent on the instrument's first 16 items and
a child on the 75% membership's first 12, which lie inside them (``tests/test_campaign.py``
checks the order against the data). The child's re-check draws 10 of its 12 items.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import save_lm_eval_run

from lm_eval_ext.backends.derived_answers import _sampling, _shown, draw_recheck
from lm_eval_ext.backends.parent_run import answer_of, request_key
from lm_eval_ext.metering.derived import DERIVED_FLAG

PARENT_TASK, PARENT_LIMIT = "bbq_instrument", 16
CHILD_TASK, CHILD_LIMIT = "bbq_subset_75pct", 12
GEN_KWARGS = "max_gen_toks=16"


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _run(folder: Path, task: str, limit: int, model_args: str = "") -> Path:
    save_lm_eval_run("hf-metered", task, limit, folder, batch_size=1, device=_device(),
                     gen_kwargs=GEN_KWARGS,
                     model_args=",".join(a for a in ("idle_seconds=0", model_args) if a))
    [results] = folder.rglob("results_*.json")
    return results


def _samples(results: Path, task: str) -> dict[int, dict]:
    [path] = results.parent.glob(f"samples_{task}_*.jsonl")
    return {s["doc_id"]: s for s in map(json.loads, path.read_text().splitlines())}


def test_generation_keys_and_answers_are_the_logged_strings():
    kwargs = {"until": [], "max_gen_toks": 16, "do_sample": False}
    key = request_key("generate_until", ("prompt", kwargs))
    # the samples file logs the same dict in another key order: the same key
    assert key == request_key("generate_until", ["prompt", dict(reversed(kwargs.items()))])
    assert request_key("generate_until", ("prompt", "not kwargs")) is None
    assert request_key("loglikelihood", ("context", " continuation")) == ("context", " continuation")
    assert answer_of("generate_until", "text") == "text"
    assert answer_of("loglikelihood", ["-1.5", "True"]) == (-1.5, True)
    with pytest.raises(ValueError):
        answer_of("generate_until", ["-1.5", "True"])
    sampled = [SimpleNamespace(args=("p", {"do_sample": True, "temperature": 0.7}))]
    assert _sampling(sampled) == "do_sample=True, temperature=0.7"
    assert _sampling([SimpleNamespace(args=("p", kwargs))]) is None


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> SimpleNamespace:
    """The measured parent, a child derived from it and a real run of the child."""
    root = tmp_path_factory.mktemp("generative")
    parent = _run(root / "parent", PARENT_TASK, PARENT_LIMIT)
    derived = _run(root / "derived", CHILD_TASK, CHILD_LIMIT, f"answers_from={parent}")
    return SimpleNamespace(parent=parent, derived=derived,
                           real=_run(root / "real", CHILD_TASK, CHILD_LIMIT))


@pytest.mark.slow
def test_a_derived_generative_cell_equals_a_real_run_of_it(runs):
    ours, theirs = _samples(runs.derived, CHILD_TASK), _samples(runs.real, CHILD_TASK)
    assert len(ours) == CHILD_LIMIT and set(ours) == set(theirs)
    for doc_id, sample in ours.items():  # the texts, the parsed answers, every metric
        assert sample["resps"] == theirs[doc_id]["resps"], doc_id
        assert sample["filtered_resps"] == theirs[doc_id]["filtered_resps"], doc_id
        assert {k: sample[k] for k in sample["metrics"]} == {
            k: theirs[doc_id][k] for k in sample["metrics"]}
    derived, real = (json.loads(p.read_text()) for p in (runs.derived, runs.real))
    assert derived["results"] == real["results"]
    assert derived["config"]["responses"] == real["config"]["responses"]  # answer fingerprint
    metering = derived["config"]["metering"]
    record = metering["derived"][CHILD_TASK]
    assert record["derived"] and record["derivation_refused"] is None
    assert (record["from_task"], record["from_items"], record["items"]) == (
        PARENT_TASK, PARENT_LIMIT, CHILD_LIMIT)
    # 12 items: 5% is 1, so the floor of 10 items is re-run, every text equal
    assert (record["rechecked_items"], record["matched_items"]) == (10, 10)
    assert record["rechecked_doc_ids"] == list(draw_recheck(list(range(12)), 0.05, "0",
                                                            CHILD_TASK))
    entry = metering["per_task"][CHILD_TASK]
    assert DERIVED_FLAG in entry["flags"] and entry["measured_recheck"]["n_requests"] == 10
    assert metering["execution_modes"]["generate_until"].startswith("derived(")
    assert "derived" not in real["config"]["metering"]


@pytest.mark.slow
def test_one_changed_continuation_in_the_parent_makes_the_cell_run_in_full(runs, tmp_path):
    from lm_eval_ext.data.instrument import load_membership

    drawn = draw_recheck(list(range(CHILD_LIMIT)), 0.05, "0", CHILD_TASK)
    item = load_membership("75pct").rows[drawn[0]]
    copy = tmp_path / "tampered"
    shutil.copytree(runs.parent.parent, copy)
    [samples] = copy.glob(f"samples_{PARENT_TASK}_*.jsonl")
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    [target] = [s for s in lines if (s["doc"]["category"], s["doc"]["example_id"])
                == (item["category"], item["example_id"])]
    target["resps"][0][0] += "."  # one generated text, one character longer
    samples.write_text("".join(json.dumps(s) + "\n" for s in lines))
    child = _run(tmp_path / "child", CHILD_TASK, CHILD_LIMIT,
                 f"answers_from={copy / runs.parent.name}")
    metering = json.loads(child.read_text())["config"]["metering"]
    record = metering["derived"][CHILD_TASK]
    assert not record["derived"] and (record["rechecked_items"], record["matched_items"]) == (
        10, 9)
    assert record["derivation_refused"].startswith(
        f"1 of 10 re-checked items differ from the parent (first: doc {drawn[0]}, request 0: "
        "re-run ")
    assert record["derivation_refused"].endswith(
        f", parent {_shown(target['resps'][0][0])}); the task ran in full")
    entry = metering["per_task"][CHILD_TASK]
    assert DERIVED_FLAG not in entry["flags"] and entry["n_requests"] == CHILD_LIMIT
    assert entry["measured_recheck"]["n_requests"] == 10
    assert not metering["execution_modes"]["generate_until"].startswith("derived")
    real = _samples(runs.real, CHILD_TASK)  # the full run's texts are the model's own
    assert {d: s["resps"] for d, s in _samples(child, CHILD_TASK).items()} == {
        d: s["resps"] for d, s in real.items()}
