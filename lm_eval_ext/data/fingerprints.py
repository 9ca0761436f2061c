r"""SHA-256 fingerprints of item sets, as defined by the seed paper.

* Sample fingerprint: SHA-256 over one line per row,
  ``category,case_id,example_id,question_index,context_condition,question_polarity,label,target_loc``
  each ending in ``\n``, rows sorted by category name then ``int(example_id)``. A missing
  ``target_loc`` is written as ``NA`` (the upstream CSV's spelling).
* Membership fingerprint: SHA-256 over the sorted unit IDs, one per line, each ending in ``\n``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

SAMPLE_FIELDS = (
    "category",
    "case_id",
    "example_id",
    "question_index",
    "context_condition",
    "question_polarity",
    "label",
    "target_loc",
)


def _field(value: Any) -> str:
    return "NA" if value is None else str(value)


def sample_fingerprint(rows: Iterable[Mapping[str, Any]]) -> str:
    """Paper sample fingerprint of prepared BBQ rows (order of ``rows`` does not matter)."""
    ordered = sorted(rows, key=lambda r: (r["category"], int(r["example_id"])))
    digest = hashlib.sha256()
    for row in ordered:
        digest.update((",".join(_field(row[f]) for f in SAMPLE_FIELDS) + "\n").encode("utf-8"))
    return digest.hexdigest()


def membership_fingerprint(unit_ids: Iterable[str]) -> str:
    """SHA-256 over the sorted unit IDs, one per line with a trailing newline."""
    text = "".join(f"{u}\n" for u in sorted(unit_ids))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
