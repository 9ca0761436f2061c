"""Folders written beside their final place and swapped in whole (nothing half-written)."""

from __future__ import annotations

import shutil
from pathlib import Path


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
