"""External BBQ item manifests: CSV files of (category, example_id) rows.

``lm-eval-ext data fingerprint CSV`` reads such a file (e.g. the seed paper's
``vector_frozen_2000_ids.csv``), joins it with the prepared BBQ rows, prints the paper's
sample fingerprint; with ``--register NAME`` it becomes lm-eval tasks for exactly that item set
(:mod:`lm_eval_ext.tasks.bbq.registered`).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lm_eval_ext.data.bbq import rows_by_key
from lm_eval_ext.data.fingerprints import sample_fingerprint
from lm_eval_ext.errors import ManifestError

REQUIRED_COLUMNS = ("category", "example_id")


def read_manifest_keys(path: str | Path) -> list[tuple[str, int]]:
    """The (category, example_id) keys of a manifest CSV, in file order, checked."""
    path = Path(path)
    try:
        handle = open(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc}") from exc
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ManifestError(
                f"manifest {path} lacks column(s) {', '.join(missing)}; it needs a header "
                f"row with at least: {', '.join(REQUIRED_COLUMNS)}"
            )
        keys: list[tuple[str, int]] = []
        seen: set[tuple[str, int]] = set()
        for line_no, row in enumerate(reader, start=2):
            try:
                key = (row["category"].strip(), int(row["example_id"]))
            except (TypeError, ValueError):
                raise ManifestError(
                    f"manifest {path} row {line_no}: example_id {row.get('example_id')!r} "
                    "is not an integer"
                ) from None
            if key in seen:
                raise ManifestError(f"manifest {path} row {line_no}: duplicate item {key}")
            seen.add(key)
            keys.append(key)
    if not keys:
        raise ManifestError(f"manifest {path} has no rows")
    return keys


def _missing_item_hint(key: tuple[str, int], by_key: Mapping[tuple[str, int], Any]) -> str:
    """Whether the category or the example_id is wrong, and the valid values."""
    import difflib

    category, example_id = key
    ids = sorted(i for c, i in by_key if c == category)
    if ids:
        return f"{category} has example_id {ids[0]}-{ids[-1]}, not {example_id}"
    categories = sorted({c for c, _ in by_key})
    close = difflib.get_close_matches(category, categories, n=1)
    return (f"no category {category!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; the categories are {', '.join(categories)}")


def load_manifest_rows(
    path: str | Path, *, expected_sample_sha256: str | None = None
) -> list[Mapping[str, Any]]:
    """Prepared BBQ rows of a manifest, sorted by (category, example_id)."""
    by_key = rows_by_key()
    rows = []
    for key in read_manifest_keys(path):
        row = by_key.get(key)
        if row is None:
            raise ManifestError(f"manifest {path}: item {key} is not in BBQ: "
                                + _missing_item_hint(key, by_key))
        rows.append(row)
    rows.sort(key=lambda r: (r["category"], r["example_id"]))
    if expected_sample_sha256 is not None:
        actual = sample_fingerprint(rows)
        if actual != expected_sample_sha256:
            raise ManifestError(
                f"manifest {path} now gives sample fingerprint {actual}, but it was registered "
                f"with {expected_sample_sha256}; the file or the BBQ data changed. Register it "
                "again from the manifest CSV it came from (`lm-eval-ext data fingerprint CSV "
                "--register NAME --replace`), not from this copy."
            )
    return rows


def manifest_fingerprint(path: str | Path) -> str:
    """The seed paper's sample fingerprint of a manifest's item set."""
    return sample_fingerprint(load_manifest_rows(path))
