"""Prompt-template tiers, few-shot pools and prepared docs shared by every task folder.

A task's ``custom_dataset`` renders each doc's prompt once, for one **template tier** and one
**scoring path**, into ``doc["prompt"]`` (``doc_to_text`` just returns it), and returns two
splits: ``test`` (the evaluated items) and ``fewshot`` (a fixed pool of items *outside* the
evaluated set, ordered by hash; ``fewshot_config: {sampler: first_n}`` takes the first k).

Tiers (``--metadata '{"template_tier": "cot"}'``; defaults: ``detailed`` for generation,
``minimal`` for log-likelihood):

* ``minimal``: the item and an answer cue.
* ``role``: a role sentence, the item, a short answer instruction.
* ``detailed``: the task instruction and the answer format, then the item.
* ``cot``: the task instruction, the item, and "think step by step, then end with
  ``Answer: X``" (log-likelihood: the same instruction, no reasoning is generated).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lm_eval_ext.errors import check_choice as _check_choice
from lm_eval_ext.tasks.common.answer_parser import LETTERS

if TYPE_CHECKING:  # imported where splits are built: the CLI's light commands start without it
    import datasets

TIERS = ("minimal", "role", "detailed", "cot")
PATHS = ("generative", "loglik")
DEFAULT_TIER = {"generative": "detailed", "loglik": "minimal"}
#: task settings our tasks read from ``--metadata``
TASK_SETTING_KEYS = ("template_tier",)
#: the package's tasks' own ``dataset_kwargs`` keys: lm-eval passes ``--metadata`` to the same
#: loader, so one of these there is the keyword given twice (a TypeError after the model loads)
DATASET_KEYS = ("membership", "scoring_path", "split", "variant", "manifest_csv")
COT_GENERATIVE = ("Think step by step in a few sentences, then give your final answer on its own "
                  'last line as "Answer: X", where X is the letter of your choice.')
COT_LOGLIK = "Let's think step by step."
JSON_FORMAT = ("Respond with exactly one JSON object and nothing else, in this format:\n"
               '{{"answer": "A", "reasoning": "one sentence explaining your choice"}}\n'
               'The value of "answer" must be {letters}.')


@dataclass(frozen=True)
class PromptStyle:
    """The words a benchmark's prompts are made of.

    Attributes:
        role: The role sentence of the ``role`` tier.
        instruction: The task instruction of the ``detailed`` and ``cot`` tiers.
        gen_format: Answer-format text of the ``detailed`` generative tier (``{letters}`` is
            filled with e.g. "A, B or C"); empty for free-form answers.
        gen_short: Short answer instruction of the ``role`` generative tier.
        cue: Answer cue closing ``minimal`` prompts and log-likelihood prompts.
    """

    role: str
    instruction: str
    gen_format: str = JSON_FORMAT
    gen_short: str = "Answer with the letter of one option."
    cue: str = "Answer:"


def letters_phrase(n: int) -> str:
    """``"A, B or C"`` for n = 3."""
    letters = list(LETTERS[:n])
    return ", ".join(letters[:-1]) + f" or {letters[-1]}" if n > 1 else letters[0]


def check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    """Validate a task setting (set through ``--metadata``) and name the valid values on error."""
    return _check_choice(name, value, allowed,
                         f"e.g. --metadata '{{\"{name}\": \"{allowed[0]}\"}}'")


def render_prompt(style: PromptStyle, body: str, tier: str, path: str, n_options: int = 0) -> str:
    """The prompt for one item: ``body`` is the item itself (context, question, options)."""
    parts: list[str]
    if path == "generative":
        fmt = style.gen_format.format(letters=letters_phrase(n_options)) if n_options else ""
        parts = {
            "minimal": [body, style.cue] if n_options else [body],
            "role": [style.role, "", body] + ([style.gen_short] if n_options else []),
            "detailed": [style.instruction] + ([fmt] if fmt else []) + ["", body],
            "cot": [style.instruction, "", body, COT_GENERATIVE if n_options else
                    "Think step by step before you answer."],
        }[tier]
    else:
        parts = {
            "minimal": [body, style.cue],
            "role": [style.role, "", body, style.cue],
            "detailed": [style.instruction, "", body, style.cue],
            "cot": [style.instruction, "", body, COT_LOGLIK, style.cue],
        }[tier]
    return "\n".join(parts).strip("\n")


def lettered(options: Sequence[str]) -> str:
    """Options as a lettered list, one per line (``A. first``, ``B. second``, ...)."""
    return "\n".join(f"{LETTERS[i]}. {option}" for i, option in enumerate(options))


def shot_target(letter: str, tier: str, explanation: str) -> str:
    """What a few-shot example shows as the answer, in the tier's answer format."""
    if tier == "detailed":
        return json.dumps({"answer": letter, "reasoning": explanation})
    if tier == "cot":
        return f"{explanation}\nAnswer: {letter}"
    return letter


def stable_rank(key: str, salt: str = "fewshot") -> str:
    """Deterministic order key of an item."""
    return hashlib.sha256(f"lm-eval-ext|{salt}|{key}".encode()).hexdigest()


def fewshot_pool(rows: Iterable[Mapping[str, Any]], *, exclude: set[str], size: int,
                 stratum: Callable[[Mapping[str, Any]], str], unit: Callable[[Mapping], str],
                 alternate: Callable[[Mapping[str, Any]], str] | None = None
                 ) -> list[Mapping[str, Any]]:
    """The deterministic few-shot pool.

    ``size`` rows outside ``exclude`` (unit ids), one per unit, round-robin over strata, in
    hash order. ``alternate`` (a row's kind, e.g. BBQ's context condition): the n-th row taken
    is of the n-th kind in turn (sorted, cycled) where its stratum has one, so the first k rows,
    the ones ``--num_fewshot k`` shows, mix the kinds.
    """
    by_stratum: dict[str, list[Mapping[str, Any]]] = {}
    seen_units: set[str] = set()
    for row in sorted(rows, key=lambda r: stable_rank(unit(r) + "|" + str(r["item_key"]))):
        if unit(row) in exclude or unit(row) in seen_units:
            continue
        seen_units.add(unit(row))
        by_stratum.setdefault(stratum(row), []).append(row)
    pool: list[Mapping[str, Any]] = []
    queues = [by_stratum[s] for s in sorted(by_stratum)]
    kinds = sorted({alternate(r) for queue in queues for r in queue}) if alternate else []
    while len(pool) < size and any(queues):
        for queue in queues:
            if queue and len(pool) < size:
                want = kinds[len(pool) % len(kinds)] if kinds else None
                pool.append(queue.pop(next(
                    (i for i, r in enumerate(queue) if want is not None and alternate(r) == want),
                    0)))
    return pool


def prepared_splits(test_rows: Iterable[Mapping[str, Any]],
                    pool_rows: Iterable[Mapping[str, Any]],
                    prepare: Callable[[Mapping[str, Any]], dict[str, Any]]
                    ) -> datasets.DatasetDict:
    """``test`` and ``fewshot`` splits of prepared docs."""
    import datasets

    def build(rows):
        return datasets.Dataset.from_list([prepare(r) for r in rows])
    return datasets.DatasetDict({"test": build(test_rows), "fewshot": build(pool_rows)})


def resolve_tier(template_tier: str | None, scoring_path: str) -> str:
    """The tier to use: the requested one, or the path's default."""
    check_choice("scoring_path", scoring_path, PATHS)
    return check_choice("template_tier", template_tier or DEFAULT_TIER[scoring_path], TIERS)


def doc_prompt(doc: Mapping[str, Any]) -> str:
    """``doc_to_text`` of every prepared task: the rendered prompt."""
    return doc["prompt"]


def doc_options(doc: Mapping[str, Any]) -> list[str]:
    """``doc_to_choice`` of every prepared multiple-choice task."""
    return list(doc["options"])


def doc_target_text(doc: Mapping[str, Any]) -> str:
    """``doc_to_target`` of generative tasks (what a few-shot example answers)."""
    return doc["target_text"]


@dataclass(frozen=True)
class ChoiceItems:
    """How one benchmark turns prepared rows into multiple-choice docs for both paths.

    Attributes:
        style: The benchmark's prompt words.
        body: ``body(row, path)``: the item as shown (options lettered on the generative path).
        options: The option texts of a row (the log-likelihood continuations).
        label: The gold option index (or list of indices) of a row.
        explanation: A short justification shown in few-shot answers.
        stratum: The few-shot pool is spread round-robin over these strata.
        pool_size: Size of the few-shot pool.
        loglik_context_suffix: Appended to a non-empty log-likelihood prompt (e.g. a newline
            before a continuation that is a whole sentence).
    """

    style: PromptStyle
    body: Callable[[Mapping[str, Any], str], str]
    options: Callable[[Mapping[str, Any]], list[str]]
    label: Callable[[Mapping[str, Any]], Any]
    explanation: Callable[[Mapping[str, Any]], str]
    stratum: Callable[[Mapping[str, Any]], str]
    pool_size: int = 10
    loglik_context_suffix: str = ""

    def prepare(self, row: Mapping[str, Any], tier: str, path: str) -> dict[str, Any]:
        """The doc of one row: options, label, rendered prompt, few-shot answer text."""
        options, label = self.options(row), self.label(row)
        first = label[0] if isinstance(label, (list, tuple)) else label
        prompt = render_prompt(self.style, self.body(row, path), tier, path, len(options))
        if path == "loglik" and prompt:
            prompt += self.loglik_context_suffix
        return {**row, "options": options, "label": label, "template_tier": tier,
                "scoring_path": path, "prompt": prompt,
                "target_text": shot_target(LETTERS[first], tier, self.explanation(row))}

    def held_out_pool(self, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """A pool drawn from ``rows`` themselves (for benchmarks without outside items)."""
        return fewshot_pool(rows, exclude=set(), size=self.pool_size, stratum=self.stratum,
                            unit=lambda r: r["unit_id"])

    def splits(self, rows: Sequence[Mapping[str, Any]], scoring_path: str,
               template_tier: str | None, pool: Sequence[Mapping[str, Any]] | None = None
               ) -> datasets.DatasetDict:
        """``test`` and ``fewshot`` splits of prepared docs.

        Without ``pool`` the pool is held out of ``rows`` (and not evaluated); a given pool must
        already lie outside the evaluated rows.
        """
        tier = resolve_tier(template_tier, scoring_path)
        if pool is None:
            pool = self.held_out_pool(rows)
            pooled = {r["item_key"] for r in pool}
            rows = [r for r in rows if r["item_key"] not in pooled]
        elif {r["item_key"] for r in pool} & {r["item_key"] for r in rows}:
            raise ValueError("the few-shot pool overlaps the evaluated items")
        return prepared_splits(rows, pool, lambda r: self.prepare(r, tier, scoring_path))


def shuffled(options: Sequence[str], key: str) -> list[int]:
    """A deterministic permutation of option indices, seeded by the item key."""
    return sorted(range(len(options)), key=lambda i: stable_rank(f"{key}|{i}", "options"))
