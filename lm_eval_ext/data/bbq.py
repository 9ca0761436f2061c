"""Prepared BBQ rows: the upstream JSONL joined with ``additional_metadata.csv``.

Every prepared row keeps what the analysis needs: category, example_id, the natural unit
(``unit_id = "{category}:{example_id // 4}"``: the four rows ambig/disambig x neg/nonneg of
one template instance), question_index, context_condition, question_polarity, answer_info,
stereotyped groups, ``target_loc`` (index of the answer naming the targeted group, from the
supplemental metadata that the upstream bias-score script uses) and ``unknown_loc`` (index
of the "can't be determined" answer).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from lm_eval_ext.data.sources import BBQ, BBQ_CATEGORIES
from lm_eval_ext.data.store import benchmark_dir
from lm_eval_ext.errors import DataCorruptError
from lm_eval_ext.files import pid_alive
from lm_eval_ext.paths import cache_dir

METADATA_PATH = "supplemental/additional_metadata.csv"
UNITS_PER_CASE = 4
_OPTIONS = ("ans0", "ans1", "ans2")


def unit_id(category: str, example_id: int) -> str:
    """Natural unit of a BBQ row: ``"{category}:{example_id // 4}"``."""
    return f"{category}:{example_id // UNITS_PER_CASE}"


def item_key(category: str, example_id: int) -> str:
    """Stable key of a BBQ row across runs and harnesses."""
    return f"bbq:{category}:{example_id}"


def _na(value: str) -> str | None:
    return None if value in ("NA", "") else value


def _read_metadata(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Supplemental metadata keyed by (category, example_id), duplicates collapsed.

    The file has embedded newlines (parse it as CSV) and 64 duplicated Gender_identity
    keys whose copies agree on ``target_loc`` but not on other columns; the first copy is
    kept, and a disagreement on ``target_loc`` is an error.
    """
    out: dict[tuple[str, int], dict[str, Any]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            key = (row["category"], int(row["example_id"]))
            target = _na(row["target_loc"])
            record = {
                "target_loc": None if target is None else int(target),
                "label_type": _na(row["label_type"]),
                "known_stereotyped_groups": _na(row["Known_stereotyped_groups"]),
                "known_stereotyped_race": _na(row["Known_stereotyped_race"]),
                "known_stereotyped_var2": _na(row["Known_stereotyped_var2"]),
                "relevant_social_values": _na(row["Relevant_social_values"]),
            }
            previous = out.get(key)
            if previous is None:
                out[key] = record
            elif previous["target_loc"] != record["target_loc"]:
                raise DataCorruptError(
                    f"{path}: duplicated key {key} has conflicting target_loc "
                    f"({previous['target_loc']} vs {record['target_loc']}); replace the file "
                    "with the upstream original."
                )
    return out


def _prepare(raw: dict[str, Any], meta: dict[str, Any], source: Path) -> dict[str, Any]:
    category, example_id = raw["category"], int(raw["example_id"])
    unknown = [i for i, k in enumerate(_OPTIONS) if raw["answer_info"][k][1] == "unknown"]
    if len(unknown) != 1:
        raise DataCorruptError(
            f"{source}: example_id {example_id} has {len(unknown)} 'unknown' answers in "
            "answer_info (expected exactly 1); replace the file with the upstream original."
        )
    extra = raw["additional_metadata"]
    return {
        "item_key": item_key(category, example_id),
        "category": category,
        "example_id": example_id,
        "case_id": example_id // UNITS_PER_CASE,
        "unit_id": unit_id(category, example_id),
        "question_index": str(raw["question_index"]),
        "context_condition": raw["context_condition"],
        "question_polarity": raw["question_polarity"],
        "context": raw["context"],
        "question": raw["question"],
        "ans0": raw["ans0"],
        "ans1": raw["ans1"],
        "ans2": raw["ans2"],
        "label": int(raw["label"]),
        "answer_info": {k: list(raw["answer_info"][k]) for k in _OPTIONS},
        "subcategory": extra.get("subcategory"),
        "stereotyped_groups": list(extra.get("stereotyped_groups") or []),
        "source": extra.get("source"),
        "unknown_loc": unknown[0],
        **meta,
    }


def _read_rows(root: Path) -> tuple[dict[str, Any], ...]:
    """Every prepared row, read and joined from the upstream files (about 5 s on 2 cores)."""
    metadata_path = root / METADATA_PATH
    metadata = _read_metadata(metadata_path)
    rows: list[dict[str, Any]] = []
    for category in BBQ_CATEGORIES:
        path = root / f"data/{category}.jsonl"
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                raw = json.loads(line)
                key = (raw["category"], int(raw["example_id"]))
                meta = metadata.get(key)
                if meta is None:
                    raise DataCorruptError(
                        f"{metadata_path} has no row for {key} (from {path}); replace both "
                        "files with the upstream originals."
                    )
                rows.append(_prepare(raw, meta, path))
    rows.sort(key=lambda r: (r["category"], r["example_id"]))
    return tuple(rows)


def _prepared_cache_path() -> Path:
    """Cache file of the prepared rows, named by the pinned files' SHA-256 and this code.

    The files are verified against their pinned SHA-256 before any load, and any change to
    this module (the preparation) changes the name, so a stale cache is never read.
    """
    key = hashlib.sha256()
    for pinned in sorted(BBQ.files, key=lambda f: f.path):
        key.update(f"{pinned.path}:{pinned.sha256}\n".encode())
    key.update(Path(__file__).read_bytes())
    return cache_dir() / "prepared" / f"bbq_rows_{key.hexdigest()[:24]}.json"


def derived_rows(dependencies: Iterable[bytes], derive: Callable[[], tuple[Any, ...]]
                 ) -> tuple[Any, ...]:
    """Rows derived from the prepared rows, cached on disk so later processes skip all 58,492.

    The file is named by the prepared rows' cache name and ``dependencies`` (everything else
    the derivation depends on: the selection, the code that derives), so it is never stale.
    """
    digest = hashlib.sha256(b"\0".join(dependencies)).hexdigest()[:24]
    whole = _prepared_cache_path()
    return _cached(whole.with_name(f"{whole.stem}_{digest}.json"), derive)


def joined(names: Iterable[str]) -> bytes:
    """Names as one sorted, newline-joined byte string (a :func:`derived_rows` dependency)."""
    return "\n".join(sorted(names)).encode()


def _sweep_partials(folder: Path) -> None:
    """Remove partial cache files (``NAME.PID.tmp``) whose writing process is gone."""
    for partial in folder.glob("*.tmp"):
        pid = partial.suffixes[-2].lstrip(".") if len(partial.suffixes) >= 2 else ""
        if pid.isdigit() and not pid_alive(int(pid)):  # killed while writing: never read
            partial.unlink(missing_ok=True)


def _cached(path: Path, build: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """The rows stored at ``path``; else ``build()``, stored there whole or not at all.

    Stored as JSON, which cannot run code: a header line with the key (the file's name) and
    the SHA-256 of the rows' JSON below it. A shared cache folder (``LM_EVAL_EXT_CACHE`` on a
    cluster) is read by every user: a file there is only data, and one whose key is not its
    name, or whose rows were edited or cut, is rebuilt, not trusted.
    """
    try:
        header, _, body = path.read_bytes().partition(b"\n")
        meta = json.loads(header)
        if isinstance(meta, dict) and meta.get("key") == path.stem \
                and meta.get("rows_sha256") == hashlib.sha256(body).hexdigest():
            rows = json.loads(body)
            if isinstance(rows, list):
                return tuple(rows)
    except (OSError, ValueError):
        pass
    value = build()
    body = json.dumps(list(value), ensure_ascii=False).encode("utf-8")
    header = json.dumps({"key": path.stem, "rows_sha256": hashlib.sha256(body).hexdigest()})
    try:  # an unwritable cache only costs time
        path.parent.mkdir(parents=True, exist_ok=True)
        _sweep_partials(path.parent)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(header.encode("utf-8") + b"\n" + body)
        os.replace(partial, path)
    except OSError:
        pass
    return value


@lru_cache(maxsize=4)
def _all_rows(folder: str) -> tuple[dict[str, Any], ...]:
    """Every prepared row: from the cache when it is there, else read (and cached)."""
    return _cached(_prepared_cache_path(), lambda: _read_rows(Path(folder)))


@lru_cache(maxsize=16)
def _load(folder: str, units: frozenset[str] | None) -> tuple[dict[str, Any], ...]:
    """Prepared rows (all, or those of ``units`` only), sorted by (category, example_id).

    The rows of a unit set (a subset's 500 of 58,492) are cached on their own, so a process
    that runs a subset does not read every row.
    """
    if units is None:
        return _all_rows(folder)
    return derived_rows([b"units", joined(units)],
                        lambda: tuple(r for r in _all_rows(folder) if r["unit_id"] in units))


def load_bbq_rows() -> tuple[dict[str, Any], ...]:
    """All 58,492 prepared BBQ rows, sorted by (category, example_id).

    The rows are cached per process; treat them as read-only.
    """
    folder = benchmark_dir(BBQ.name)
    return _load(str(folder), None)


def load_bbq_unit_rows(units: frozenset[str]) -> tuple[dict[str, Any], ...]:
    """The prepared rows of these natural units, sorted like :func:`load_bbq_rows` (cached)."""
    return _load(str(benchmark_dir(BBQ.name)), units)


def rows_by_key() -> dict[tuple[str, int], dict[str, Any]]:
    """Prepared rows keyed by (category, example_id) (cached per data folder; read-only)."""
    return _rows_by_key(str(benchmark_dir(BBQ.name)))


@lru_cache(maxsize=4)
def _rows_by_key(folder: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["category"], r["example_id"]): r for r in _load(folder, None)}


def row_of_item_key(item_key: str) -> dict[str, Any] | None:
    """The prepared row of ``bbq:<category>:<example_id>`` (None when there is none)."""
    _, category, example_id = item_key.split(":")
    return rows_by_key().get((category, int(example_id)))
