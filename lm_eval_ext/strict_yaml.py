"""YAML read strictly: PyYAML's safe loader, refusing a repeated key in a mapping.

YAML's own rule keeps the last of two equal keys (PyYAML does so silently), so a second
``limit:`` or ``M0:`` would replace the first unseen.
"""

from __future__ import annotations

from typing import Any

import yaml

from lm_eval_ext.errors import ConfigError


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that a mapping already holds."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Build the mapping; a repeated key raises one error with both line numbers."""
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in first:
                raise ConfigError(f"key {key!r} appears twice in one mapping (lines "
                                  f"{first[key]} and {line}); YAML would keep only the "
                                  "second: give each its own name, or remove one")
            first[key] = line
        return super().construct_mapping(node, deep=deep)
