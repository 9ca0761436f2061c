"""The campaign folder: what is done, what is in flight, and the manifest, all on disk.

Layout (documented in the README)::

    OUT/campaign.json            identity: name + every cell's resolved configuration
    OUT/campaign.yaml            the campaign as given (a preset written out)
    OUT/cells/<cell_id>/         a finished cell: lm-eval's output folder, card.json, cell.json
    OUT/failed/<cell_id>.json    the last failure of a cell (+ .log); cleared when it succeeds
    OUT/.inflight/<cell_id>.<host>.<pid>/   a cell being written (renamed into cells/ when done)
    OUT/.locks/<cell_id>.lock    who runs a cell now (host, pid, start time)
    OUT/manifest.json            cell -> status, config, output path, versions, GPUs, times

A cell is done exactly when ``cells/<cell_id>/cell.json`` exists and holds its record, and
the lm-eval files it lists are there unchanged (SHA-256): the folder appears by one ``rename``
after lm-eval finished, so a kill loses at most the cell in flight; a damaged cell (its record
or files cut, edited or deleted) is run again. Every process rewrites ``manifest.json`` from the
folder's state, so shards never lose each other's cells.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lm_eval_ext.campaign.spec import CampaignSpec, Cell
from lm_eval_ext.data.store import sha256_of
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.files import pid_alive, probe_writable, write_text_atomic

if TYPE_CHECKING:
    import pandas as pd

HOST = socket.gethostname()
_LAYOUT = ("campaign.json", "campaign.yaml", "manifest.json", "cells", "failed", "analysis")


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON through a temporary file and a rename (readers never see half a file)."""
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> ``{"a.b.c": leaf}``."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Lines ``key: old -> new`` for every leaf that differs (added/removed as <absent>)."""
    a, b = flatten(old), flatten(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>") or (key in a) != (key in b):
            lines.append(f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
    return lines


@dataclass(frozen=True)
class CellLock:
    """A held claim on one cell (a file created exclusively)."""

    path: Path

    def release(self) -> None:
        """Give the cell up."""
        self.path.unlink(missing_ok=True)


class CampaignFolder:
    """One campaign's output folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.cells_dir = self.root / "cells"
        self.failed_dir = self.root / "failed"
        self.inflight_dir = self.root / ".inflight"
        self.locks_dir = self.root / ".locks"
        self.identity_path = self.root / "campaign.json"
        self.manifest_path = self.root / "manifest.json"
        self._digests: dict[tuple[str, int, int], str] = {}

    # -- identity -------------------------------------------------------------------------
    def check(self, spec: CampaignSpec) -> None:
        """Refuse a folder that holds other files, another campaign, or cannot be written.

        Writes nothing but a probe file, removed at once.

        Raises:
            ConfigError: Foreign files, or a campaign with a different configuration (every
                differing key listed).
        """
        if not self.identity_path.is_file():
            foreign = [p.name for p in self.root.iterdir() if p.name not in _LAYOUT
                       and not p.name.startswith(".")] if self.root.is_dir() else []
            if foreign:
                raise ConfigError(f"{self.root} exists and is not a campaign folder (it holds "
                                  f"{', '.join(sorted(foreign)[:3])}); choose an empty or new "
                                  "--out folder")
            probe_writable(self.root)  # a dry run meets an unwritable --out as the run would
            return
        fix = ("it names the campaign the folder holds: restore it from a copy, or use a new "
               "--out folder")
        try:
            stored = read_json_file(self.identity_path)
        except ConfigError as exc:
            raise ConfigError(f"{exc}; {fix}") from None
        if not isinstance(stored, dict) or not isinstance(stored.get("campaign"), dict):
            raise ConfigError(f"{self.identity_path} is damaged (it holds no campaign "
                              f"configuration); {fix}")
        differences = config_differences(stored.get("campaign", {}), spec.resolved())
        if differences:
            shown = "\n  ".join(differences[:20])
            more = f"\n  ... and {len(differences) - 20} more" if len(differences) > 20 else ""
            raise ConfigError(
                f"{self.root} holds a campaign with a different configuration:\n  {shown}{more}\n"
                "Nothing was run. Use a new --out folder for the changed campaign, or restore "
                "the original settings to finish this one.")

    def bind(self, spec: CampaignSpec, source_yaml: str) -> None:
        """Create the folder for ``spec``, or check that it already belongs to ``spec``.

        Raises:
            ConfigError: The folder holds a campaign with a different configuration; the
                message lists every differing key.
        """
        resolved = spec.resolved()
        self.check(spec)
        if not self.identity_path.is_file():
            self.root.mkdir(parents=True, exist_ok=True)
            # create-if-absent in one step, so that shards started together agree on one identity
            tmp = self.root / f".campaign.json.{HOST}.{os.getpid()}"
            tmp.write_text(json.dumps({"schema_version": 1, "campaign": resolved}, indent=2,
                                      sort_keys=True) + "\n", encoding="utf-8")
            try:
                os.link(tmp, self.identity_path)
                (self.root / "campaign.yaml").write_text(source_yaml, encoding="utf-8")
            except FileExistsError:
                pass  # another process created it first: compare below
            finally:
                tmp.unlink(missing_ok=True)
        self.check(spec)  # another process may have created it first
        # also when resuming from a copy that kept only the records (hidden folders dropped)
        for folder in (self.cells_dir, self.failed_dir, self.inflight_dir, self.locks_dir):
            folder.mkdir(parents=True, exist_ok=True)

    # -- cells ----------------------------------------------------------------------------
    def write_model_table(self, model: str, name: str, table: pd.DataFrame,
                          markdown: str) -> Path:
        """``analysis/<model>/<name>.csv`` and ``<name>.md``; the ``.md`` path."""
        out = self.root / "analysis" / model
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / f"{name}.csv", index=False)
        (out / f"{name}.md").write_text(markdown, encoding="utf-8")
        return out / f"{name}.md"

    def cell_dir(self, cell: Cell) -> Path:
        """Where a finished cell lives."""
        return self.cells_dir / cell.cell_id

    def record(self, cell: Cell) -> dict[str, Any] | None:
        """A finished cell's ``cell.json``, or None when it is not done (or damaged)."""
        record, damage = self.read_record(cell)
        return None if damage else record

    def read_record(self, cell: Cell) -> tuple[dict[str, Any] | None, str | None]:
        """``cell.json`` and what is damaged (None: nothing; a record of None: not done).

        Damaged: a record that is not one (cut, edited), or a file it lists (lm-eval's results
        and samples, the card) that is missing or changed since the cell finished (older records
        list only the results file, which must then still read as JSON).
        """
        return self.read_record_of(cell.cell_id)

    def read_record_of(self, cell_id: str) -> tuple[dict[str, Any] | None, str | None]:
        """:meth:`read_record` by cell id."""
        path = self.cells_dir / cell_id / "cell.json"
        if not path.is_file():
            return None, None
        try:
            record = read_json_file(path)
        except ConfigError as exc:
            return None, str(exc)
        if not isinstance(record, dict) or not isinstance(record.get("output_path"), str):
            return None, f"{path} holds no cell record"
        files = record.get("files") or {record["output_path"]: None}
        for relative, digest in files.items():
            lm_eval_file = self.root / relative
            if not lm_eval_file.is_file():
                return None, f"{lm_eval_file} is missing"
            if digest is None:
                try:
                    read_json_file(lm_eval_file)
                except ConfigError as exc:
                    return None, str(exc)
            elif self._sha256(lm_eval_file) != digest:
                return None, f"{lm_eval_file} changed since the cell finished (its SHA-256)"
        return record, None

    def _sha256(self, path: Path) -> str:
        """A file's SHA-256, hashed again only when its size or modification time changed."""
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._digests:
            self._digests[key] = sha256_of(path)
        return self._digests[key]

    def records(self, spec: CampaignSpec) -> dict[str, dict[str, Any]]:
        """Every finished cell's ``cell.json``, by cell id (each read once)."""
        found = {c.cell_id: self.record(c) for c in spec.cells}
        return {cell_id: record for cell_id, record in found.items() if record is not None}

    def results(self, records: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        """Each finished cell's lm-eval results file, by cell id."""
        return {cell_id: str(self.root / record["output_path"])
                for cell_id, record in records.items()}

    def holder(self, cell: Cell) -> dict[str, Any] | None:
        """Who claims a cell now: the lock's content plus ``alive`` (None: not claimed).

        ``alive`` is False when the holder ran on this host and its process is gone (killed);
        a holder on another host is taken to be alive.
        """
        path = self.locks_dir / f"{cell.cell_id}.lock"
        try:
            holder = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            holder = {}
        holder["alive"] = holder.get("host") != HOST or pid_alive(int(holder.get("pid", 0)))
        return holder

    def acquire(self, cell: Cell) -> CellLock | str:
        """Claim a cell; a string says who holds it (a dead holder's claim is taken over)."""
        path = self.locks_dir / f"{cell.cell_id}.lock"
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                holder = self.holder(cell) or {"alive": False}
                if not holder["alive"]:
                    path.unlink(missing_ok=True)  # its process died (killed): take over
                    continue
                if holder.get("host") == HOST:  # a live worker on this machine
                    return (f"running in process {holder.get('pid')} (another worker) since "
                            f"{holder.get('started')}")
                return (f"held by host {holder.get('host')} pid {holder.get('pid')} since "
                        f"{holder.get('started')}; if that job is dead, delete {path}")
            with os.fdopen(fd, "w") as handle:
                json.dump({"host": HOST, "pid": os.getpid(), "started": _now()}, handle)
            return CellLock(path)
        return f"could not claim {path}"

    def start(self, cell: Cell) -> Path:
        """A fresh in-flight folder for the cell (leftovers of killed attempts removed)."""
        for stale in self.inflight_dir.glob(f"{cell.cell_id}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        folder = self.inflight_dir / f"{cell.cell_id}.{HOST}.{os.getpid()}"
        folder.mkdir(parents=True)
        return folder

    def finish(self, cell: Cell, inflight: Path, record: Mapping[str, Any]) -> Path:
        """Write ``cell.json`` into the in-flight folder and rename it into ``cells/``."""
        write_json_atomic(inflight / "cell.json", dict(record))
        final = self.cell_dir(cell)
        if final.exists():  # an earlier, unrecorded copy (cannot normally happen)
            shutil.rmtree(final)
        os.rename(inflight, final)
        (self.failed_dir / f"{cell.cell_id}.json").unlink(missing_ok=True)
        (self.failed_dir / f"{cell.cell_id}.log").unlink(missing_ok=True)
        return final

    def fail(self, cell: Cell, inflight: Path, record: Mapping[str, Any], log: str) -> None:
        """Record a failed attempt (kept until the cell succeeds) and drop its partial output."""
        (self.failed_dir / f"{cell.cell_id}.log").write_text(log, encoding="utf-8")
        write_json_atomic(self.failed_dir / f"{cell.cell_id}.json", dict(record))
        shutil.rmtree(inflight, ignore_errors=True)

    # -- status ---------------------------------------------------------------------------
    def status(self, spec: CampaignSpec) -> list[dict[str, Any]]:
        """One row per cell: done / failed / running / interrupted / pending, with its record.

        ``interrupted``: claimed by a process of this host that no longer exists (killed); the
        next run of its shard redoes it.
        """
        rows = []
        for position, cell in enumerate(spec.cells):
            record, damage = self.read_record(cell)
            holder = self.holder(cell)
            failed = self.failed_dir / f"{cell.cell_id}.json"
            if record is not None:
                status = "done"
            elif holder is not None:
                status = "running" if holder["alive"] else "interrupted"
            elif damage is not None:
                status, record = "damaged", {"damage": damage}
            elif failed.is_file():
                status = "failed"
                try:
                    record = read_json_file(failed)
                except ConfigError as exc:
                    record = {"error": str(exc)}
                record = record if isinstance(record, dict) else {}
            else:
                status = "pending"
            rows.append({"position": position, "cell_id": cell.cell_id, "status": status,
                         "config": cell.config(), "config_sha256": cell.config_sha256(),
                         **({k: v for k, v in record.items() if k != "config"} if record else {})})
        return rows

    def write_manifest(self, spec: CampaignSpec) -> dict[str, Any]:
        """Rewrite ``manifest.json`` from the folder's state; return it."""
        rows = self.status(spec)
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        manifest = {"schema_version": 1, "campaign": spec.name, "updated": _now(),
                    "counts": counts, "complete": counts.get("done", 0) == len(rows),
                    "cells": rows}
        write_json_atomic(self.manifest_path, manifest)
        return manifest


def read_json_file(path: Path) -> Any:
    """A JSON file of the campaign folder; one line naming it when it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else f"not valid JSON: {exc}"
        raise ConfigError(f"{path} cannot be read ({reason})") from None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
