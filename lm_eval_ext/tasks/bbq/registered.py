"""User BBQ tasks for an external item manifest (``lm-eval-ext data fingerprint --register``).

Writes ``NAME`` (generative) and ``NAME_loglik`` into the user task folder (indexed by the
autoload hook and by ``lm-eval-ext run``); both include the packaged BBQ base YAMLs.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from lm_eval_ext.data.external_manifest import REQUIRED_COLUMNS, load_manifest_rows
from lm_eval_ext.data.fingerprints import sample_fingerprint
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.files import staging_folder, swap_in
from lm_eval_ext.paths import package_tasks_dir, user_tasks_dir
from lm_eval_ext.tasks.bbq import TASK_VERSION
from lm_eval_ext.tasks.common.prompting import DEFAULT_TIER

_TASK_NAME = re.compile(r"[a-z][a-z0-9_]{2,63}")


def _registered_yaml(task: str, base: str, path: str, ids_csv: Path, sha: str, n_rows: int
                     ) -> str:
    base_path = package_tasks_dir() / "bbq" / base
    return (
        f"# Registered by `lm-eval-ext data fingerprint --register`; {n_rows} BBQ rows.\n"
        f"include: {base_path}\n"
        f"task: {task}\n"
        "tag: []  # not in the package's lm_eval_ext_bbq tag (nor registered twice)\n"
        "custom_dataset: !function lm_eval_ext.tasks.bbq.utils.load_registered_manifest\n"
        "dataset_kwargs:\n"
        f"  manifest_csv: {ids_csv}\n"
        f"  scoring_path: {path}\n"
        "metadata:\n"
        f"  version: {TASK_VERSION}\n"
        f"  sample_sha256: {sha}\n"
        f"  manifest_rows: {n_rows}\n"
        f"  template_tier: {DEFAULT_TIER[path]}\n"
    )


def check_task_name(task: str) -> None:
    """The name rules of a registered BBQ task (checked before any work)."""
    if not _TASK_NAME.fullmatch(task):
        raise ConfigError(
            f"task name {task!r} is invalid: use 'bbq_' and then lower-case letters, digits and "
            "underscores, 3-64 characters in all (e.g. bbq_vector_frozen2000)"
        )
    if not task.startswith("bbq_"):
        raise ConfigError(f"task name {task!r} must start with 'bbq_' (e.g. bbq_{task})")
    if task.endswith("_loglik"):  # NAME_loglik is registered beside NAME
        raise ConfigError(f"task name {task!r} ends in _loglik, which names the log-likelihood "
                          f"task registered beside NAME; give {task.removesuffix('_loglik')!r} "
                          f"(it registers {task.removesuffix('_loglik')} and {task})")


def _registered_items(folder: Path, task: str) -> list[tuple[str, str]] | None:
    """The (category, example_id) rows of an earlier registration in ``folder`` (None: none)."""
    ids_csv = folder / f"{task}_ids.csv"
    if not ids_csv.is_file():
        return None
    with open(ids_csv, encoding="utf-8", newline="") as handle:
        return [tuple(row) for row in csv.reader(handle)][1:]


def _registered_fingerprint(folder: Path, task: str) -> tuple[str, str] | None:
    """The sample fingerprint and row count an earlier registration recorded in its YAML."""
    yaml_file = folder / f"{task}.yaml"
    text = yaml_file.read_text(encoding="utf-8", errors="replace") if yaml_file.is_file() else ""
    sha, rows = (re.search(rf"{key}: (\w+)", text) for key in ("sample_sha256", "manifest_rows"))
    return (sha.group(1), rows.group(1) if rows else "?") if sha else None


def register_manifest_task(path: str | Path, task: str, root: Path | None = None, *,
                           replace: bool = False) -> list[Path]:
    """Write ``task`` (generative) and ``task_loglik`` for a manifest; return the YAML paths.

    ``root``: the folder to write the task folder into (default: the user task folder that
    the start-up hook indexes; another root needs ``--include_path``).

    The manifest's IDs (not the data) are copied next to the YAMLs, so later edits to the
    original file cannot silently change the task. A task of the same name registered for
    another item set is kept unless ``replace``; the new folder is written beside it and
    swapped in whole, so a crash leaves the old registration or the new one, never a mix.
    """
    check_task_name(task)
    rows = load_manifest_rows(path)
    sha = sample_fingerprint(rows)
    folder = (root or user_tasks_dir()) / task
    items = [(str(r["category"]), str(r["example_id"])) for r in rows]
    earlier = _registered_items(folder, task)
    recorded = _registered_fingerprint(folder, task)  # the copy of the IDs may be damaged
    if ((earlier is not None and earlier != items) or (recorded and recorded[0] != sha)) \
            and not replace:
        rows = recorded[1] if recorded else len(earlier or ())
        raise ConfigError(
            f"task {task!r} is already registered for another item set ({rows} rows, "
            f"{folder}); choose another name, or pass --replace to register {len(items)} rows "
            "under it")
    staging = staging_folder(folder)
    with open(staging / f"{task}_ids.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(REQUIRED_COLUMNS)
        writer.writerows(items)
    ids_csv = folder / f"{task}_ids.csv"  # where it lives once swapped in
    for suffix, base, scoring_path in (("", "_bbq_generative_yaml", "generative"),
                                       ("_loglik", "_bbq_loglik_yaml", "loglik")):
        (staging / f"{task}{suffix}.yaml").write_text(
            _registered_yaml(task + suffix, base, scoring_path, ids_csv, sha, len(rows)),
            encoding="utf-8")
    swap_in(staging, folder)
    return [folder / f"{task}.yaml", folder / f"{task}_loglik.yaml"]
