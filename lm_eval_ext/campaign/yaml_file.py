"""Campaign and grid files: YAML read strictly, so no line of the file is dropped unseen.

YAML's own rule keeps the last of two equal keys in a mapping (PyYAML does so silently), so
two ``M0:`` conditions would run one. Here a repeated key is an error naming both lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lm_eval_ext.errors import ConfigError
from lm_eval_ext.files import not_valid_yaml, path_error
from lm_eval_ext.strict_yaml import UniqueKeyLoader


def read_yaml(path: str | Path, what: str = "campaign") -> Any:
    """A campaign or grid file's content, with errors that name the file."""
    path = Path(path)
    if path.is_dir():
        yamls = sorted(p.name for p in path.glob("*.y*ml"))[:3]
        raise ConfigError(f"{what} file {path} is a folder; pass the YAML file in it"
                          + (f" (it holds {', '.join(yamls)})" if yamls else ""))
    if not path.is_file():
        raise ConfigError(f"{what} file {path} does not exist")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)
    except (OSError, UnicodeDecodeError) as exc:
        raise path_error(path, exc, "read", not_text="save it as UTF-8") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} {not_valid_yaml(exc)}") from None
