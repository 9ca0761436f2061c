"""Answers taken from a parent run at batch 1, a random sample of items re-run to check them.

Composed into a metered model (``self.derived``) when ``answers_from`` is given. Per task of a
``loglikelihood`` or (greedy) ``generate_until`` call: every request's strings must be answered
by one parent task of that type; a seeded random sample of the task's items (``recheck``, at
least :data:`MIN_RECHECK` items, all of them when fewer) runs for real in a re-check window,
and its answers must equal the parent's exactly (the same log-likelihood and greedy flag; for a
generation the same text, character for character). Then every other request is answered from
the parent and the task's seconds and joules are derived (the parent task's per item x items,
flagged); otherwise the whole task runs for real in its own window and the reason is recorded
(``derivation_refused``). A sample that is every item (a task of at most :data:`MIN_RECHECK`
items, or ``recheck=1``) is the task itself: it runs once in the task's own window, measured,
and is compared with the parent for the record. Sampled generation is never derived (its texts
depend on the random state), nor is anything at a batch size other than 1 (load_parent).

    derived = DerivedAnswers(parent, recheck=0.05, seed=0)
    answers = derived.run(metering, "loglikelihood", requests, serve)
    derived.report(metering_block["per_task"])   # config.metering.derived
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm_eval_ext.backends.parent_run import ParentRun, ParentTask, answer_of, request_key
from lm_eval_ext.metering import Metering
from lm_eval_ext.metering.derived import DerivedEnergy
from lm_eval_ext.metering.requests import by_task, run_by_task

#: the fewest items re-checked (all items of a task with fewer)
MIN_RECHECK = 10
#: request types whose answers may be derived
DERIVABLE = ("loglikelihood", "generate_until")


def recheck_count(items: int, fraction: float) -> int:
    """Items to re-run: ``ceil(fraction * items)``, at least :data:`MIN_RECHECK`, at most all."""
    return min(items, max(MIN_RECHECK, math.ceil(fraction * items)))


def draw_recheck(doc_ids: Sequence[Any], fraction: float, seed: str, task: str) -> tuple:
    """The sorted doc ids to re-run, drawn without replacement from ``sha256(task|seed)``."""
    ordered = sorted(doc_ids)
    rng = np.random.default_rng(int.from_bytes(
        hashlib.sha256(f"{task}|{seed}".encode()).digest()[:8], "big"))
    chosen = rng.choice(len(ordered), size=recheck_count(len(ordered), fraction), replace=False)
    return tuple(sorted(ordered[int(i)] for i in chosen))


@dataclass(frozen=True)
class TaskDerivation:
    """How one task's answers were obtained (``config.metering.derived[task]``).

    ``derivation_refused`` is None when the answers were derived; else why the task ran in
    full. ``energy`` is the derived cost (None when refused).
    """

    derived: bool
    derivation_refused: str | None
    from_results: str
    from_task: str | None
    items: int
    rechecked_items: int
    matched_items: int
    recheck_fraction: float
    recheck_seed: str
    rechecked_doc_ids: tuple
    energy: DerivedEnergy | None = None

    def line(self, task: str) -> str:
        """The console's one line: derived (from which task, re-checked how), or why not."""
        if self.derived:
            return (f"[answers_from] {task}: derived from {self.from_task} of "
                    f"{self.from_results} ({self.matched_items} of {self.items} items re-run "
                    "and matched)")
        return f"[answers_from] {task}: measured, not derived: {self.derivation_refused}"

    def record(self, measured_recheck: Mapping[str, Any] | None) -> dict[str, Any]:
        """The JSON record, with the parent's energy, the derived one and the re-check's."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "energy"}
        energy = self.energy
        return {**fields, "rechecked_doc_ids": list(self.rechecked_doc_ids),
                "from_items": None if energy is None else energy.parent_items,
                "from_energy_joules": None if energy is None else energy.parent.get("energy_joules"),
                "from_energy_joules_idle_corrected": None if energy is None
                else energy.parent.get("energy_joules_idle_corrected"),
                "parent_joules_per_item": None if energy is None
                else energy.per_item("energy_joules"),
                "derived_energy_joules": None if energy is None else energy.value("energy_joules"),
                "derived_energy_joules_idle_corrected": None if energy is None
                else energy.value("energy_joules_idle_corrected"),
                "recheck_energy_joules": (measured_recheck or {}).get("energy_joules"),
                "recheck_inference_seconds": (measured_recheck or {}).get("inference_seconds")}


class DerivedAnswers:
    """A parent run's answers for this run's batch-1 requests, re-checked on a sample."""

    def __init__(self, parent: ParentRun, recheck: float, seed: str | int = 0):
        self.parent = parent
        self.recheck = float(recheck)
        self.seed = str(seed)
        self._tasks: dict[str, TaskDerivation] = {}

    def run(self, metering: Metering, request_type: str, requests: Sequence[Any],
            serve: Callable[[list], list], *, world_size: int = 1,
            extras: Callable[[], Mapping[str, Any]] = dict,
            originals: Sequence[Any] | None = None) -> list:
        """``serve`` per task as :meth:`Metering.run` would, deriving what may be derived.

        ``originals``: the requests as lm-eval made them, where ``requests`` are copies (the
        chat-templated generation requests); their strings are what the parent's samples log.
        """
        if request_type not in DERIVABLE or world_size > 1:
            if request_type in DERIVABLE:
                for task, indices in by_task(requests).items():
                    self._refuse(task, [requests[i] for i in indices], "a data-parallel run "
                                 f"({world_size} ranks): each rank sees part of the items")
                    print(self._tasks[task].line(task), file=sys.stderr, flush=True)
            return metering.run(request_type, requests, serve, world_size=world_size,
                                extras=extras)
        logged = {id(r): o for r, o in zip(requests, originals or requests, strict=True)}

        def per_task(task: str, group: list) -> list:
            keys = [request_key(request_type, getattr(logged[id(r)], "args", None))
                    for r in group]
            answers = self._derive(metering, request_type, task, group, keys, serve)
            print(self._tasks[task].line(task), file=sys.stderr, flush=True)  # the config too
            return answers if answers is not None else metering.run(request_type, group, serve)

        return run_by_task(requests, per_task)

    def _derive(self, metering: Metering, request_type: str, task: str, group: list,
                keys: list, serve: Callable[[list], list]) -> list | None:
        """The task's answers, derived and re-checked; None (recorded why) to run it in full."""
        source = (self.parent.covering(keys, request_type) if all(k is not None for k in keys)
                  else None)
        reason = self._precondition(metering, request_type, group, keys, source)
        if reason is not None:
            return self._refuse(task, group, reason)
        docs = list(dict.fromkeys(r.doc_id for r in group))
        sample = set(draw_recheck(docs, self.recheck, self.seed, task))
        answers = [source.answers[k] for k in keys]
        if len(sample) == len(docs):  # every item re-run: that is the task, measured
            real = metering.run(request_type, group, serve)
            differing, first = _differences(request_type, group, range(len(group)), real,
                                            answers)
            self._refuse(task, group, f"every item was re-run ({len(docs)} of {len(docs)}): the "
                         "task was measured" + (f"; {first}" if differing else ""),
                         sample=sample, matched=len(docs) - differing, source=source)
            return real
        rerun = [i for i, r in enumerate(group) if r.doc_id in sample]
        with metering.recheck(task, request_type, len(rerun)):
            real = serve([group[i] for i in rerun])
        differing, first = _differences(request_type, group, rerun, real, answers)
        if differing:
            return self._refuse(task, group, f"{first}; the task ran in full", sample=sample,
                                matched=len(sample) - differing, source=source)
        for i, answer in zip(rerun, real, strict=True):
            answers[i] = answer
        energy = DerivedEnergy(source.metering, source.items, len(docs), len(group))
        metering.derive(task, request_type, energy)
        self._tasks[task] = TaskDerivation(
            True, None, str(self.parent.path), source.name, len(docs), len(sample), len(sample),
            self.recheck, self.seed, tuple(sorted(sample)), energy)
        return answers

    def _precondition(self, metering: Metering, request_type: str, group: list, keys: list,
                      source: ParentTask | None) -> str | None:
        """Why the task cannot be derived before anything runs (None: it can be)."""
        if request_type == "generate_until" and (sampled := _sampling(group)):
            return f"sampled generation ({sampled}): its texts depend on the random state"
        devices = tuple(str(d.get("name")) for d in metering.meter.source.describe())
        if devices != self.parent.devices:
            return f"the parent ran on {list(self.parent.devices)}, this run on {list(devices)}"
        import transformers

        if self.parent.transformers_version not in (None, transformers.__version__):
            return (f"the parent ran transformers {self.parent.transformers_version}, this run "
                    f"{transformers.__version__}")
        if source is None:
            missing = [r.doc_id for r, k in zip(group, keys, strict=True)
                       if k is None or not self.parent.known(k, request_type)]
            if not missing:
                return "the requests' answers are spread over several parent tasks"
            return (f"{len(missing)} of {len(group)} requests are not in the parent (first: "
                    f"doc {missing[0]})")
        if source.metering is None or source.items == 0:
            return f"the parent's config.metering has no entry for task {source.name}"
        return None

    def _refuse(self, task: str, group: list, reason: str, *, sample: set | None = None,
                matched: int = 0, source: ParentTask | None = None) -> None:
        self._tasks[task] = TaskDerivation(
            False, reason, str(self.parent.path), None if source is None else source.name,
            len({r.doc_id for r in group}), len(sample or ()), matched, self.recheck,
            self.seed, tuple(sorted(sample or ())))
        return None

    def report(self, per_task: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """``config.metering.derived``: each derivable task's record.

        ``per_task``: the block's task entries (their re-checks' measured energy).
        """
        return {task: derivation.record((per_task.get(task) or {}).get("measured_recheck"))
                for task, derivation in sorted(self._tasks.items())}

    def reset(self) -> None:
        """Forget the records (a new run on the same loaded model)."""
        self._tasks.clear()


def _differences(request_type: str, group: list, indices: Sequence[int], real: Sequence[Any],
                 parent: Sequence[Any]) -> tuple[int, str]:
    """How many items re-run (``real``, for ``group[indices]``) differ from the parent's answers.

    Returns the count and the first difference in words ("" when none).
    """
    mismatched = [(i, answer) for i, answer in zip(indices, real, strict=True)
                  if answer_of(request_type, answer) != parent[i]]
    if not mismatched:
        return 0, ""
    i, answer = mismatched[0]
    items = len({group[j].doc_id for j in indices})
    differing = len({group[j].doc_id for j, _ in mismatched})
    return differing, (f"{differing} of {items} re-checked items differ from the parent (first: "
                       f"doc {group[i].doc_id}, request {group[i].idx}: re-run "
                       f"{_shown(answer)}, parent {_shown(parent[i])})")


def _shown(answer: Any) -> str:
    """An answer in a refusal's words (a text cut to its first 60 characters)."""
    if isinstance(answer, str):
        return repr(answer if len(answer) <= 60 else answer[:60] + "...")
    return str(tuple(answer))


def _sampling(group: list) -> str | None:
    """The generation kwargs that sample (do_sample, a temperature above 0), if any ask to."""
    for request in group:
        kwargs = request.args[1] if len(request.args) > 1 else {}
        if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0) > 0:
            return ", ".join(f"{k}={kwargs[k]}" for k in ("do_sample", "temperature")
                             if k in kwargs)
    return None
