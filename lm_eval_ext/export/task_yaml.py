"""Our task YAML files read and written with their ``!function`` tags.

Read, a tag is kept as :class:`Function`; written, it points at the exported ``utils.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lm_eval_ext.paths import package_tasks_dir


class Function(str):
    """A ``!function module.name`` tag of a task YAML."""


class _TaskLoader(yaml.SafeLoader):
    pass


class _TaskDumper(yaml.SafeDumper):
    pass


_TaskLoader.add_constructor("!function", lambda loader, node: Function(loader.construct_scalar(node)))
_TaskDumper.add_representer(
    Function, lambda dumper, tag: dumper.represent_scalar(
        "!function", f"utils.{tag.rsplit('.', 1)[-1]}"))


def task_config(*relative: str) -> dict[str, Any]:
    """One of our task YAML files, ``!function`` tags kept as :class:`Function`."""
    path = package_tasks_dir().joinpath(*relative)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_TaskLoader)  # noqa: S506


def write_yaml(path: Path, config: dict[str, Any]) -> None:
    """``config`` as a task YAML file, its :class:`Function` values as ``!function utils.NAME``."""
    path.write_text(yaml.dump(config, Dumper=_TaskDumper, sort_keys=False, allow_unicode=True,
                              width=100), encoding="utf-8")
