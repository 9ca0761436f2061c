"""Files and folders written beside their final place and swapped in whole (nothing half-written)."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` through a temporary file and a rename (readers never see half a file).

    The temporary name carries the host and process, so writers on a shared file system never
    meet.
    """
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def staging_folder(target: Path) -> Path:
    """An empty hidden folder beside ``target`` to write the new content into."""
    staging = target.with_name(f".{target.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def swap_in(staging: Path, target: Path) -> None:
    """Make ``staging`` the ``target`` folder; an earlier ``target`` is removed whole.

    A crash in between leaves the old folder (renamed aside) or the new one, never a mix.
    """
    if target.exists():
        retired = target.with_name(f".{target.name}.old")
        shutil.rmtree(retired, ignore_errors=True)
        target.rename(retired)
        staging.rename(target)
        shutil.rmtree(retired)
    else:
        staging.rename(target)
