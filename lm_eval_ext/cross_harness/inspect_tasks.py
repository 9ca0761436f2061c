"""Our BBQ and XSTest tasks as Inspect AI tasks: same prepared rows, prompt text and parser.

    inspect eval lm_eval_ext/bbq_ext -T membership=25pct --model hf/local \
        -M model_path=CHECKPOINT -M do_sample=false --log-dir logs

(``pip install 'lm-eval-ext[inspect]'``; the tasks are registered through the ``inspect_ai``
entry point.) Every sample carries the prepared row lm-eval logs as ``doc`` (in
``metadata["doc"]``), so ``lm_eval_ext.cross_harness.readers`` reads the log into the same per-item
frame as an lm-eval run. The prompt is :func:`doc_prompt` of that row, sent as one user turn
(the provider applies the model's chat template, as hf-metered does); decoding is greedy with
the lm-eval task's token budget; the scorer is the lm-eval task's own answer parser (BBQ) or
response classifier (XSTest).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate

from lm_eval_ext.tasks.common.answer_parser import LETTERS
from lm_eval_ext.tasks.common.prompting import doc_prompt

#: the lm-eval generative tasks' ``max_gen_toks`` (``_bbq_generative_yaml``, ``xstest_ext.yaml``)
MAX_TOKENS = 128


def _jsonable(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The prepared row as lm-eval logs it (JSON round trip)."""
    return json.loads(json.dumps(dict(doc), default=str))


def _samples(docs, benchmark: str) -> list[Sample]:
    samples = []
    for doc in docs:
        row = _jsonable(doc)
        letters = LETTERS[:len(row.get("options") or [])]
        target = letters[row["label"]] if letters and isinstance(row["label"], int) else ""
        samples.append(Sample(input=doc_prompt(row), target=target, id=row["item_key"],
                              metadata={"benchmark": benchmark, "doc": row}))
    return samples


def _task_scorer(filter_fn, process_results, answer_key: str):
    """An Inspect scorer that runs an lm-eval task's own filter and ``process_results``."""
    async def score(state: TaskState, target: Target) -> Score:
        doc = state.metadata["doc"]
        [[record]] = filter_fn([[state.output.completion]], [doc])
        metrics = process_results(doc, [record])
        parsed = json.loads(record)
        return Score(value=CORRECT if metrics["acc"] == 1.0 else INCORRECT,
                     answer=parsed.get(answer_key), metadata={"filtered": record})

    return score


@scorer(metrics=[accuracy(), stderr()])
def bbq_answer_parser():
    """The lm-eval BBQ task's answer parser and scoring (JSON first, documented fallbacks)."""
    from lm_eval_ext.tasks.bbq.results import process_results_generative
    from lm_eval_ext.tasks.common.scoring import parse_letter_generations

    return _task_scorer(parse_letter_generations, process_results_generative, "answer")


@scorer(metrics=[accuracy(), stderr()])
def xstest_response_classifier():
    """The lm-eval XSTest task's response classifier; correct = the appropriate behaviour."""
    from lm_eval_ext.tasks.xstest.results import classify_generations, process_results_generative

    return _task_scorer(classify_generations, process_results_generative, "response_class")


@task
def bbq_ext(membership: str = "25pct", template_tier: str | None = None,
            manifest: str | None = None) -> Task:
    """A frozen BBQ membership (``instrument``, ``25pct``, ``12p5pct_r2``, ...), generative.

    ``manifest``: a ``category,example_id`` CSV instead (e.g. from ``lm-eval-ext data manifest``
    of another harness's run), so that both harnesses see the same items.
    """
    from lm_eval_ext.tasks.bbq import utils

    if manifest is not None:
        from lm_eval_ext.data.external_manifest import load_manifest_rows
        from lm_eval_ext.data.fingerprints import sample_fingerprint

        sha = sample_fingerprint(load_manifest_rows(manifest))
        docs = utils.load_registered_manifest(manifest, sha, "generative", template_tier)["test"]
        name, task_name = f"bbq_manifest_{sha[:12]}", None
    else:
        docs = utils.load_membership(membership, "generative", template_tier)["test"]
        name = f"bbq_{membership}"
        task_name = (f"bbq_{membership}" if membership in ("instrument", "full")
                     else f"bbq_subset_{membership}")
    return Task(dataset=MemoryDataset(_samples(docs, "bbq"), name=name),
                solver=generate(), scorer=bbq_answer_parser(),
                config=GenerateConfig(temperature=0.0, max_tokens=MAX_TOKENS),
                metadata={"lm_eval_ext_task": task_name, "membership": membership,
                          "manifest": manifest, "template_tier": template_tier})


@task
def xstest_ext(template_tier: str | None = None) -> Task:
    """XSTest v2's 440 evaluated prompts (10 held out as the few-shot pool), generative."""
    from lm_eval_ext.tasks.xstest.utils import load_docs

    docs = load_docs("generative", template_tier)["test"]
    return Task(dataset=MemoryDataset(_samples(docs, "xstest"), name="xstest"),
                solver=generate(), scorer=xstest_response_classifier(),
                config=GenerateConfig(temperature=0.0, max_tokens=MAX_TOKENS),
                metadata={"lm_eval_ext_task": "xstest_ext", "template_tier": template_tier})
