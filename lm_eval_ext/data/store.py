"""Find, verify and (when online) download the pinned upstream benchmark files.

Resolution order for a benchmark ``b``:

1. ``$LM_EVAL_EXT_DATA/b/`` when ``LM_EVAL_EXT_DATA`` is set (a folder in the upstream
   layout, such as ``../shared/data``). Nothing is downloaded; a missing or altered file
   is an error that names the file.
2. Otherwise ``<cache>/data/b@<commit>/``, filled once from the pinned upstream URLs and
   checked against the pinned SHA-256 before it is used.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
import urllib.error
import urllib.request
from functools import lru_cache
from pathlib import Path

from lm_eval_ext.data.sources import Benchmark, PinnedFile, get_benchmark
from lm_eval_ext.errors import DataCorruptError, DataMissingError
from lm_eval_ext.paths import DATA_ENV, cache_dir

DOWNLOAD_TIMEOUT_S = 60


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def count_rows(path: Path, row_format: str) -> int:
    """Number of records in a file, parsed the way the loader parses it."""
    if row_format == "jsonl":
        with open(path, encoding="utf-8") as handle:
            return sum(1 for line in handle if line.strip())
    if row_format in ("csv", "csv_utf8_sig"):
        encoding = "utf-8-sig" if row_format == "csv_utf8_sig" else "utf-8"
        with open(path, encoding=encoding, newline="") as handle:
            return sum(1 for _ in csv.DictReader(handle))
    if row_format == "json_list":
        with open(path, encoding="utf-8") as handle:
            return len(json.load(handle))
    raise ValueError(f"unknown row_format {row_format!r}")


@lru_cache(maxsize=256)
def _verified(path_str: str, size: int, mtime_ns: int, sha256: str) -> bool:
    return sha256_of(Path(path_str)) == sha256


def verify_file(folder: Path, pinned: PinnedFile, *, setting_hint: str) -> Path:
    """Check one file against its pin; return its path or raise a message naming it."""
    path = folder / pinned.path
    if not path.is_file():
        raise DataMissingError(
            f"missing benchmark file {path} (expected {pinned.rows} rows, sha256 "
            f"{pinned.sha256[:16]}...). {setting_hint}"
        )
    stat = path.stat()
    if stat.st_size == pinned.size and _verified(
        str(path), stat.st_size, stat.st_mtime_ns, pinned.sha256
    ):
        return path
    try:
        rows = count_rows(path, pinned.row_format)
    except (UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        rows_note = f"it does not parse as {pinned.row_format} ({exc})"
    else:
        rows_note = (
            f"it has {rows} rows, expected {pinned.rows}"
            if rows != pinned.rows
            else f"its {rows} rows are right but their content differs"
        )
    raise DataCorruptError(
        f"corrupt benchmark file {path}: sha256/size do not match the pinned upstream file "
        f"({pinned.url}, {pinned.size} bytes, sha256 {pinned.sha256}); {rows_note}. "
        f"Replace it with the original upstream file. {setting_hint}"
    )


def _download(pinned: PinnedFile, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(
            pinned.url, timeout=DOWNLOAD_TIMEOUT_S
        ) as response:
            digest = hashlib.sha256()
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != pinned.sha256:
            raise DataCorruptError(
                f"download of {pinned.url} has sha256 {digest.hexdigest()}, expected "
                f"{pinned.sha256}; the upstream file changed or the transfer was altered. "
                f"Set {DATA_ENV} to a folder holding the original files instead."
            )
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)


def _offline_hint(benchmark: Benchmark) -> str:
    return (
        f"Set {DATA_ENV}=<folder> to a folder with the upstream layout "
        f"(<folder>/{benchmark.name}/...; e.g. ../shared/data), or go online so the pinned "
        f"files of {benchmark.repo}@{benchmark.commit[:10]} can be downloaded into "
        f"{cache_dir() / 'data'}."
    )


def benchmark_dir(name: str, paths: tuple[str, ...] | None = None) -> Path:
    """Folder of benchmark ``name`` with the requested pinned files verified.

    Args:
        name: Benchmark folder name, e.g. ``"bbq"``.
        paths: Relative paths to check (default: every required pinned file).

    Raises:
        DataMissingError: A file is missing (and could not be downloaded).
        DataCorruptError: A file's checksum or row count is wrong.
    """
    benchmark = get_benchmark(name)
    wanted = [benchmark.file(p) for p in paths] if paths else [
        f for f in benchmark.files if f.required
    ]
    explicit = os.environ.get(DATA_ENV)
    if explicit:
        folder = Path(explicit).expanduser() / benchmark.name
        where = Path(explicit).expanduser()
        shown = repr(explicit) if where.is_absolute() else (
            f"{explicit!r} ({where.resolve()} from the current folder {Path.cwd()})")
        hint = (
            f"{DATA_ENV} is set to {shown}: that folder must hold the upstream layout "
            f"of {benchmark.repo}@{benchmark.commit[:10]} under {benchmark.name}/ "
            f"(or, where the network reaches {benchmark.repo}, unset {DATA_ENV} to download "
            f"the pinned files instead)."
        )
        for pinned in wanted:
            verify_file(folder, pinned, setting_hint=hint)
        return folder

    folder = cache_dir() / "data" / f"{benchmark.name}@{benchmark.commit}"
    hint = _offline_hint(benchmark)
    for pinned in wanted:
        target = folder / pinned.path
        if not target.is_file():
            try:
                _download(pinned, target)
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                raise DataMissingError(
                    f"benchmark file {pinned.path} of {benchmark.name} is not available: "
                    f"{DATA_ENV} is not set and downloading {pinned.url} failed ({exc}). "
                    f"{hint}"
                ) from exc
        verify_file(folder, pinned, setting_hint=hint)
    return folder

