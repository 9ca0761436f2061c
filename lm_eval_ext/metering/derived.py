"""A task's cost derived from a parent run's measurement, and how it joins the measured block.

A task whose answers were taken from a parent run (``answers_from``) is not measured: its
seconds and joules are the parent task's per-item values times its items, flagged
:data:`DERIVED_FLAG`; what was measured (the re-check of a sample of its items) is kept beside
them under ``measured_recheck``, never added to the task's or the run's totals.

    derived = DerivedEnergy(parent_entry, parent_items=2000, items=500, n_requests=1500)
    derived.entry()["energy_joules"]   # the parent's J / 2000 * 500
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lm_eval_ext.metering.idle import physical_or_none

#: flag of an entry whose seconds and joules were derived, not measured
DERIVED_FLAG = "derived_energy"
#: the entry fields that scale with the items (seconds and joules)
EXTENSIVE = ("inference_seconds", "forward_seconds", "energy_joules",
             "energy_joules_idle_corrected", "idle_joules")
#: standard errors: none for a derived entry (it has no interval of its own); in quadrature
#: when measured entries are combined
ERRORS = ("inference_seconds_se", "energy_joules_se", "energy_joules_idle_corrected_se")


def _ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole or whole <= 0 else part / whole


def _shares(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry with its forward and idle shares recomputed from its sums (none above 1)."""
    corrected, share = physical_or_none(entry["energy_joules_idle_corrected"],
                                        _ratio(entry["idle_joules"], entry["energy_joules"]))
    return {**entry, "forward_share": _ratio(entry["forward_seconds"], entry["inference_seconds"]),
            "energy_joules_idle_corrected": corrected, "idle_share": share}


@dataclass(frozen=True)
class DerivedEnergy:
    """A task's seconds and joules as the parent task's per-item values times ``items``.

    Attributes:
        parent: The parent task's entry of ``config.metering.per_task`` (ledger field names).
        parent_items: Items the parent task evaluated (the per-item divisor).
        items: Items of the derived task.
        n_requests: Requests the derived task answered (reported, not scaled).
    """

    parent: Mapping[str, Any]
    parent_items: int
    items: int
    n_requests: int

    def per_item(self, field: str) -> float | None:
        """The parent's ``field`` per item (None where the parent has no value)."""
        value = self.parent.get(field)
        return None if value is None else float(value) / self.parent_items

    def value(self, field: str) -> float | None:
        """``field`` of the derived task: the parent's per-item value x items."""
        per_item = self.per_item(field)
        return None if per_item is None else per_item * self.items

    def entry(self) -> dict[str, Any]:
        """The task's ledger entry: derived sums, the parent's flags plus :data:`DERIVED_FLAG`.

        ``windows`` is 0: no window of this run measured these sums.
        """
        entry = {field: self.value(field) for field in EXTENSIVE}
        return {**_shares(entry), **dict.fromkeys(ERRORS), "n_requests": self.n_requests,
                "windows": 0, "slices": 0,
                "flags": sorted(set(self.parent.get("flags") or ()) | {DERIVED_FLAG})}


def combine(entries: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Entries summed (a null in any entry makes that sum null), shares recomputed, flags joined.

    ``None`` entries (nothing measured) are skipped; no entries give None.
    """
    present = [e for e in entries if e is not None]
    if not present:
        return None
    sums: dict[str, Any] = {}
    for field in EXTENSIVE:
        values = [e.get(field) for e in present]
        sums[field] = None if any(v is None for v in values) else float(sum(values))
    for field in ERRORS:
        values = [e.get(field) for e in present]
        sums[field] = (None if any(v is None for v in values)
                       else math.sqrt(sum(v * v for v in values)))
    return {**_shares(sums), "n_requests": sum(e.get("n_requests", 0) for e in present),
            "windows": sum(e.get("windows", 0) for e in present),
            "slices": sum(e.get("slices", 0) for e in present),
            "flags": sorted({f for e in present for f in e.get("flags") or ()})}
