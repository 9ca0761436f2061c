"""Which campaign cells take their answers from an earlier cell instead of scoring items again.

At batch 1 a log-likelihood answer depends only on the model, its precision and engine
settings and the request strings, and so does a greedy generation's text (each item is
decoded alone). A cell whose items all lie inside an earlier cell of the same
model and settings therefore runs with hf-metered's ``answers_from`` set to that cell's results
(a random sample of its items is re-run and must match, else it runs in full:
:mod:`lm_eval_ext.backends.derived_answers`). :func:`plan_derivations` decides from the cells
alone; the runner passes ``answers_from`` only when the parent is done
(:func:`parent_answers`), in the argv, never in the cell's configuration: the campaign's
identity and every config SHA-256 stay what they are.

    plan = plan_derivations(spec.cells)        # {child cell id: parent cell id}
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lm_eval_ext.backends.engine_key import (
    FREE_OPTIONS,
    LOAD_OPTIONS,
    RUN_ARGS,
    answer_differences,
    at_batch_one,
)
from lm_eval_ext.campaign.spec import Cell, parse_model_args
from lm_eval_ext.campaign.store import CampaignFolder

#: the backend that takes answers from a parent run (``answers_from``)
DERIVES = "hf-metered"
#: a task's items in the order lm-eval evaluates them (what ``--limit`` cuts), None: unknown
ItemOrder = Callable[[str], Sequence[Any] | None]


def greedy(cell: Cell) -> bool:
    """Whether the cell's ``gen_kwargs`` option leaves generation greedy (no sampling)."""
    kwargs = cell.options.get("gen_kwargs") or {}
    if isinstance(kwargs, str):
        kwargs = parse_model_args(kwargs, cell.cell_id)
    sample = str(kwargs.get("do_sample", False)).strip().lower() in ("true", "1")
    try:
        hot = float(kwargs.get("temperature") or 0) > 0
    except (TypeError, ValueError):
        hot = True
    return not (sample or hot)


def batch_independent(cell: Cell) -> bool:
    """Whether answers are per item: hf-metered at batch 1, a log-likelihood or greedy BBQ task.

    Log-likelihood: the ``*_loglik`` tasks; generative: the package's BBQ tasks (their YAML
    decodes greedily) unless the cell's ``gen_kwargs`` sample.
    """
    if (cell.backend != DERIVES or "answers_from" in cell.engine_args
            or not at_batch_one(cell.engine_args.get("batch_size"))):
        return False  # a cell given its own answers_from is derived as its file says
    return cell.task.endswith("_loglik") or (cell.task in _bbq_tasks() and greedy(cell))


def _same_engine(parent: Cell, child: Cell) -> bool:
    """Same model, answers and request options: the parent check would accept the pair.

    Answers by :func:`~lm_eval_ext.backends.engine_key.answer_differences`; request options are
    all but the limit and those that reach the model as model args.
    """
    def options(cell: Cell) -> dict[str, Any]:
        skip = FREE_OPTIONS + LOAD_OPTIONS + RUN_ARGS
        return {k: v for k, v in cell.options.items() if k not in skip}

    return (parent.model_label == child.model_label and options(parent) == options(child)
            and not answer_differences(parent.engine_args, child.engine_args))


def _limited(items: Sequence[Any], limit: Any) -> set[Any]:
    """The items lm-eval evaluates under ``--limit`` (a count, or a fraction < 1)."""
    if limit is None:
        return set(items)
    limit = float(limit)
    return set(items[:math.ceil(len(items) * limit) if limit < 1 else int(limit)])


def items_within(child: Cell, parent: Cell, order: ItemOrder) -> bool:
    """Every item of ``child`` (under its limit) is an item of ``parent`` (under its limit)."""
    if child.task == parent.task and parent.options.get("limit") is None:
        return True
    child_items, parent_items = order(child.task), order(parent.task)
    if child_items is None or parent_items is None:
        return False
    return (_limited(child_items, child.options.get("limit"))
            <= _limited(parent_items, parent.options.get("limit")))


@lru_cache(maxsize=1)
def _bbq_tasks() -> dict[str, str]:
    from lm_eval_ext.data.instrument import membership_names
    from lm_eval_ext.tasks.bbq._generate_configs import PATHS, task_name

    return {task_name(m) + suffix: m for m in membership_names() for suffix in PATHS}


def bbq_item_order(task: str) -> tuple[tuple[str, int], ...] | None:
    """A frozen-instrument BBQ task's items in evaluation order, from the committed manifest.

    Rows are sorted by (category, example_id) and a unit ``Category:k`` holds the 4 rows with
    example ids 4k..4k+3, so the order is each unit's (unit, 0..3) with units sorted by
    (category, k). None for any other task.
    """
    membership = _bbq_tasks().get(task)
    if membership is None:
        return None
    from lm_eval_ext.data.instrument import load_manifest

    units = load_manifest()["memberships"][membership]["unit_ids"]
    ordered = sorted(units, key=lambda u: (u.split(":", 1)[0], int(u.split(":", 1)[1])))
    return tuple((unit, offset) for unit in ordered for offset in range(4))


def _repeat(child: Cell, parent: Cell) -> bool:
    """``child`` evaluates ``parent``'s items again (its task and limit): a repeat.

    A repeat is run to measure run-to-run variation; its parent's answers and joules, copied,
    would measure none.
    """
    return child.task == parent.task and child.options.get("limit") == parent.options.get("limit")


def plan_derivations(cells: Sequence[Cell], *, measure_all: bool = False,
                     order: ItemOrder = bbq_item_order) -> dict[str, str]:
    """Child cell id -> the earlier, measured cell whose answers it takes.

    A child and its parent are both batch-independent (:func:`batch_independent`), have the
    same model, model args and options but the limit, and the child's items lie within the
    parent's (:func:`items_within`) but are not all of them (a repeat, :func:`_repeat`, is
    measured); the parent comes first in campaign order and is measured itself (never a
    child). ``measure_all``: no cell is derived.
    """
    if measure_all:
        return {}
    plan: dict[str, str] = {}
    for position, child in enumerate(cells):
        if not batch_independent(child):
            continue
        parent = next((p for p in cells[:position] if p.cell_id not in plan
                       and batch_independent(p) and _same_engine(p, child)
                       and items_within(child, p, order) and not _repeat(child, p)), None)
        if parent is not None:
            plan[child.cell_id] = parent.cell_id
    return plan


@dataclass(frozen=True)
class ParentAnswers:
    """The parent a planned child takes its answers from, or why it runs in full.

    ``results``: the parent's results file (None: the child runs in full, ``not_derived`` says
    why).
    """

    parent_id: str
    results: Path | None
    not_derived: str | None


def parent_answers(folder: CampaignFolder, plan: Mapping[str, str], cell: Cell,
                   versions: Mapping[str, str | None]) -> ParentAnswers | None:
    """The planned parent of ``cell`` as it stands now (None: ``cell`` is not a planned child).

    The parent must be done, with the same package versions as this process (``versions``).
    """
    parent_id = plan.get(cell.cell_id)
    if parent_id is None:
        return None
    record, damage = folder.read_record_of(parent_id)
    if record is None:
        return ParentAnswers(parent_id, None, "the parent cell was not done when this cell "
                             "started (another shard or worker has it, or it failed): measured "
                             "in full" if damage is None else f"the parent cell is damaged "
                             f"({damage}): measured in full")
    if record.get("packages") != dict(versions):
        return ParentAnswers(parent_id, None, f"the parent ran other package versions "
                                              f"({record.get('packages')})")
    results = (folder.root / record["output_path"]).resolve()
    if any(ch in str(results) for ch in ",="):
        return ParentAnswers(parent_id, None, f"the parent's path {results} holds ',' or '=', "
                                              "which --model_args cannot carry")
    return ParentAnswers(parent_id, results, None)


def record_fields(parent: ParentAnswers | None, results_path: Path, task: str) -> dict[str, Any]:
    """A finished cell's ``derived_from`` and ``derivation`` fields of ``cell.json``.

    ``derived_from``: the parent cell id where the task's answers were derived (else None);
    ``derivation`` (planned children only): the parent, why it was not used, and the model's
    record of the task (``config.metering.derived``: items, re-check, energies).
    """
    if parent is None:
        return {"derived_from": None}
    results = json.loads(results_path.read_text(encoding="utf-8"))
    block = (((results.get("config") or {}).get("metering") or {}).get("derived") or {}).get(task)
    derived = bool(block and block.get("derived"))
    return {"derived_from": parent.parent_id if derived else None,
            "derivation": {"parent": parent.parent_id, "not_attempted": parent.not_derived,
                           **(block or {})}}


def outcome_note(record: Mapping[str, Any]) -> str:
    """A finished cell's derivation in a few words, for its end line ("" if none was planned)."""
    derivation = record.get("derivation")
    if not derivation:
        return ""
    if record.get("derived_from"):
        return (f"; derived from {record['derived_from']}, {derivation.get('matched_items')}/"
                f"{derivation.get('rechecked_items')} re-checked items matched")
    why = derivation.get("not_attempted") or derivation.get("derivation_refused") or "measured"
    return f"; measured in full, not derived: {why}"
