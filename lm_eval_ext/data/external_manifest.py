"""External BBQ item manifests: CSV files of (category, example_id) rows.

``lm-eval-ext data fingerprint CSV`` reads such a file (e.g. the seed paper's
``vector_frozen_2000_ids.csv``), joins it with the prepared BBQ rows, prints the paper's
sample fingerprint and, with ``--register NAME``, writes lm-eval tasks for exactly that item
set into the user task folder (indexed by the autoload hook and by ``lm-eval-ext run``).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lm_eval_ext.data.bbq import rows_by_key
from lm_eval_ext.data.fingerprints import sample_fingerprint
from lm_eval_ext.errors import ConfigError, ManifestError
from lm_eval_ext.paths import package_tasks_dir, user_tasks_dir
from lm_eval_ext.tasks.common.prompting import DEFAULT_TIER

REQUIRED_COLUMNS = ("category", "example_id")
_TASK_NAME = re.compile(r"[a-z][a-z0-9_]{2,63}")


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


def load_manifest_rows(
    path: str | Path, *, expected_sample_sha256: str | None = None
) -> list[Mapping[str, Any]]:
    """Prepared BBQ rows of a manifest, sorted by (category, example_id)."""
    by_key = rows_by_key()
    rows = []
    for key in read_manifest_keys(path):
        row = by_key.get(key)
        if row is None:
            raise ManifestError(
                f"manifest {path}: item {key} is not in BBQ {len(by_key)} rows "
                "(check the category spelling, e.g. 'Race_x_SES')"
            )
        rows.append(row)
    rows.sort(key=lambda r: (r["category"], r["example_id"]))
    if expected_sample_sha256 is not None:
        actual = sample_fingerprint(rows)
        if actual != expected_sample_sha256:
            raise ManifestError(
                f"manifest {path} now gives sample fingerprint {actual}, but it was registered "
                f"with {expected_sample_sha256}; the file or the BBQ data changed. Register it "
                "again with `lm-eval-ext data fingerprint CSV --register NAME`."
            )
    return rows


def manifest_fingerprint(path: str | Path) -> str:
    """The seed paper's sample fingerprint of a manifest's item set."""
    return sample_fingerprint(load_manifest_rows(path))


def _registered_yaml(task: str, base: str, path: str, ids_csv: Path, sha: str, n_rows: int
                     ) -> str:
    base_path = package_tasks_dir() / "bbq" / base
    return (
        f"# Registered by `lm-eval-ext data fingerprint --register`; {n_rows} BBQ rows.\n"
        f"include: {base_path}\n"
        f"task: {task}\n"
        "custom_dataset: !function lm_eval_ext.tasks.bbq.utils.load_registered_manifest\n"
        "dataset_kwargs:\n"
        f"  manifest_csv: {ids_csv}\n"
        f"  scoring_path: {path}\n"
        "metadata:\n"
        "  version: 1.1\n"
        f"  sample_sha256: {sha}\n"
        f"  manifest_rows: {n_rows}\n"
        f"  template_tier: {DEFAULT_TIER[path]}\n"
    )


def register_manifest_task(path: str | Path, task: str, root: Path | None = None) -> list[Path]:
    """Write ``task`` (generative) and ``task_loglik`` for a manifest; return the YAML paths.

    ``root``: the folder to write the task folder into (default: the user task folder that
    the start-up hook indexes; another root needs ``--include_path``).

    The manifest's IDs (not the data) are copied next to the YAMLs, so later edits to the
    original file cannot silently change the task.
    """
    if not _TASK_NAME.fullmatch(task):
        raise ConfigError(
            f"task name {task!r} is invalid: use 3-64 lower-case letters, digits and "
            "underscores, starting with a letter (e.g. bbq_vector_frozen2000)"
        )
    if not task.startswith("bbq_"):
        raise ConfigError(f"task name {task!r} must start with 'bbq_' (e.g. bbq_{task})")
    rows = load_manifest_rows(path)
    sha = sample_fingerprint(rows)
    folder = (root or user_tasks_dir()) / task
    folder.mkdir(parents=True, exist_ok=True)
    ids_csv = folder / f"{task}_ids.csv"
    with open(ids_csv, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(REQUIRED_COLUMNS)
        writer.writerows((r["category"], r["example_id"]) for r in rows)
    written = []
    for suffix, base, path in (("", "_bbq_generative_yaml", "generative"),
                               ("_loglik", "_bbq_loglik_yaml", "loglik")):
        yaml_path = folder / f"{task}{suffix}.yaml"
        yaml_path.write_text(
            _registered_yaml(task + suffix, base, path, ids_csv, sha, len(rows)), encoding="utf-8"
        )
        written.append(yaml_path)
    return written
