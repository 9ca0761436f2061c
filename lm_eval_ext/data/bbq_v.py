"""BBQ-V (image-grounded BBQ; Narnaware et al., arXiv:2502.08779), from the user's own copy.

BBQ-V is a gated Hugging Face dataset (``ucf-crcv/BBQ-V``, CC BY-NC 4.0); nothing of it ships
here and no download is attempted without the user's token. Two sources:

* **A prepared folder** (the seed paper's layout): ``sample.csv`` with columns
  ``id, cross_id, unique_question_id, category, subcategory, stereotyped_groups,
  question_polarity, context, question, ans0, ans1, ans2, label, image_sha256, image_file``
  and the ``.jpg`` files in ``images/``. Found at ``dataset_kwargs.bbq_v_dir`` or
  ``$LM_EVAL_EXT_DATA/bbq_v``. Every image is checked (safe basename, SHA-256).
* **A datasets repository** (``dataset_kwargs.hf_dataset``, e.g. the gated ``ucf-crcv/BBQ-V``
  with ``HF_TOKEN`` set, or a local folder of parquet files) with the same columns and an
  ``image`` column of images. The open-ended official release lacks ``ans0..2``/``label``:
  that is an error that says so.

The natural unit is the scenario (``unique_question_id``): both polarities (two ``cross_id``s)
and their image variants. Fingerprint (the seed paper's): SHA-256 over the lines
``id,cross_id,unique_question_id,image_sha256,label``, sorted by ``id``.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lm_eval_ext.errors import DataCorruptError, DataMissingError
from lm_eval_ext.paths import DATA_ENV

REQUIRED = ("id", "cross_id", "unique_question_id", "category", "question_polarity", "context",
            "question", "ans0", "ans1", "ans2", "label")
_SAFE_IMAGE = re.compile(r"^[\w.-]+\.jpe?g$", re.IGNORECASE)
GATED_HINT = (
    "BBQ-V is a gated Hugging Face dataset (ucf-crcv/BBQ-V, CC BY-NC 4.0) that lm-eval-ext "
    "cannot ship: accept its conditions, then either prepare a folder with sample.csv + images/ "
    f"(see lm_eval_ext/data/bbq_v.py) at ${DATA_ENV}/bbq_v or --metadata "
    "'{\"bbq_v_dir\": \"<folder>\"}', or pass --metadata '{\"hf_dataset\": \"ucf-crcv/BBQ-V\"}' "
    "with HF_TOKEN set.")


def fingerprint(rows: Iterable[Mapping[str, Any]]) -> str:
    """The seed paper's BBQ-V sample fingerprint."""
    digest = hashlib.sha256()
    for row in sorted(rows, key=lambda r: r["id"]):
        line = ",".join(str(row[f]) for f in ("id", "cross_id", "unique_question_id",
                                               "image_sha256", "label"))
        digest.update((line + "\n").encode("utf-8"))
    return digest.hexdigest()


def _prepared(row: Mapping[str, Any], source: str) -> dict[str, Any]:
    missing = [c for c in REQUIRED if row.get(c) in (None, "")]
    if missing:
        raise DataCorruptError(f"{source}: row {row.get('id')!r} lacks {', '.join(missing)}. "
                               + GATED_HINT)
    groups = row.get("stereotyped_groups") or ""
    return {
        "item_key": f"bbq_v:{row['id']}", "unit_id": f"bbq_v:{row['unique_question_id']}",
        "id": str(row["id"]), "cross_id": str(row["cross_id"]),
        "unique_question_id": str(row["unique_question_id"]), "category": row["category"],
        "benchmark_group": row["category"], "subcategory": row.get("subcategory"),
        "stereotyped_groups": [g for g in re.split(r"[|;,]\s*", groups.strip("[]'\" ")) if g]
        if isinstance(groups, str) else list(groups),
        "question_polarity": row["question_polarity"], "context": row["context"],
        "question": row["question"], "ans0": row["ans0"], "ans1": row["ans1"],
        "ans2": row["ans2"], "label": int(row["label"]),
        "image_sha256": row.get("image_sha256"),
    }


def _check_scenarios(rows: list[dict[str, Any]], source: str) -> None:
    polarities: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for row in rows:
        polarities[row["unique_question_id"]].add((row["cross_id"], row["question_polarity"]))
    for scenario, pairs in polarities.items():
        if len(pairs) != 2 or {p for _, p in pairs} != {"neg", "nonneg"}:
            raise DataCorruptError(
                f"{source}: scenario {scenario} must hold exactly two cross_ids, one neg and one "
                f"nonneg; found {sorted(pairs)}")


def load_folder(folder: Path) -> list[dict[str, Any]]:
    """Rows of a prepared BBQ-V folder, images verified."""
    sample = folder / "sample.csv"
    if not sample.is_file():
        raise DataMissingError(f"no BBQ-V sample.csv in {folder}. " + GATED_HINT)
    with open(sample, encoding="utf-8", newline="") as handle:
        raw = list(csv.DictReader(handle))
    rows = []
    for row in raw:
        prepared = _prepared(row, str(sample))
        name = row.get("image_file", "")
        if not _SAFE_IMAGE.match(name):
            raise DataCorruptError(f"{sample}: row {row['id']}: image_file {name!r} is not a "
                                   "plain .jpg file name")
        path = folder / "images" / name
        if not path.is_file():
            raise DataMissingError(f"BBQ-V image {path} (row {row['id']}) is missing")
        actual = hashlib.sha256(path.read_bytes()).hexdigest()
        if row.get("image_sha256") and actual != row["image_sha256"]:
            raise DataCorruptError(f"BBQ-V image {path} has sha256 {actual}, but sample.csv "
                                   f"says {row['image_sha256']}; replace the image")
        prepared["image_sha256"] = actual
        prepared["image_path"] = str(path)
        rows.append(prepared)
    _check_scenarios(rows, str(sample))
    return sorted(rows, key=lambda r: r["id"])


def load_hf(dataset: str, revision: str | None = None, split: str = "train"
            ) -> list[dict[str, Any]]:
    """Rows of a datasets repository (HF id with ``HF_TOKEN``, or a local parquet folder)."""
    import datasets

    try:
        data = datasets.load_dataset(dataset, revision=revision, split=split,
                                     token=os.environ.get("HF_TOKEN"))
    except Exception as exc:
        raise DataMissingError(f"could not load BBQ-V from {dataset!r} ({exc}). "
                               + GATED_HINT) from exc
    if "image" not in data.column_names:
        raise DataCorruptError(f"{dataset} has no 'image' column. " + GATED_HINT)
    rows = []
    for row in data:
        image = row["image"]
        prepared = _prepared(row, dataset)
        buffer = image.tobytes() if hasattr(image, "tobytes") else bytes(image)
        prepared["image_sha256"] = row.get("image_sha256") or hashlib.sha256(buffer).hexdigest()
        prepared["image"] = image
        rows.append(prepared)
    _check_scenarios(rows, dataset)
    return sorted(rows, key=lambda r: r["id"])


def load_bbq_v(bbq_v_dir: str | None = None, hf_dataset: str | None = None,
               hf_revision: str | None = None) -> list[dict[str, Any]]:
    """BBQ-V rows from an explicit folder, a datasets repository, or ``$LM_EVAL_EXT_DATA/bbq_v``."""
    if hf_dataset:
        return load_hf(hf_dataset, hf_revision)
    if bbq_v_dir:
        return load_folder(Path(bbq_v_dir).expanduser())
    root = os.environ.get(DATA_ENV)
    if not root:
        raise DataMissingError(f"{DATA_ENV} is not set and no BBQ-V source was given. "
                               + GATED_HINT)
    return load_folder(Path(root).expanduser() / "bbq_v")
