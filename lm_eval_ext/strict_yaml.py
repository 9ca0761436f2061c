"""YAML read strictly: PyYAML's safe loader, refusing what YAML 1.1 reads otherwise than meant.

YAML's own rule keeps the last of two equal keys (PyYAML does so silently), so a second
``limit:`` or ``M0:`` would replace the first unseen; ``010`` is octal 8, ``1:30`` the
sexagesimal 90, and ``yes`` or ``no`` (a key or a value) the boolean true or false.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from lm_eval_ext.errors import ConfigError

#: a number in exponent form that YAML 1.1 resolves as text (no dot, or an unsigned exponent)
_EXPONENT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _as_number(text: str) -> str:
    """How to write ``text`` (a number in exponent form) for YAML 1.1 to read it as one.

    A whole number of at most 15 digits as digits (1e1 -> 10: a count takes no other form),
    else with a dot and a signed exponent (5e-324 -> 5.0e-324).
    """
    value = float(text)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    mantissa, _, exponent = text.lower().partition("e")
    mantissa = mantissa if "." in mantissa else f"{mantissa}.0"
    return f"{mantissa}e{exponent if exponent[0] in '+-' else '+' + exponent}"


class NoRepeatedKeysLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that a mapping already holds (else as YAML reads).

    For files another program reads as plain YAML (lm-eval's task files).
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Build the mapping; a repeated key raises one error with both line numbers."""
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be
                continue  # overridden here (PyYAML's flatten_mapping merges them)
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            self.check_key(key, key_node, line)
            if key in first:
                raise ConfigError(f"key {key!r} appears twice in one mapping (lines "
                                  f"{first[key]} and {line}); YAML would keep only the "
                                  "second: give each its own name, or remove one")
            first[key] = line
        return super().construct_mapping(node, deep=deep)

    def check_key(self, key: Any, key_node: yaml.Node, line: int) -> None:
        """A key read otherwise than written raises here (none does in plain YAML)."""


class UniqueKeyLoader(NoRepeatedKeysLoader):
    """The package's own files: no repeated key, and nothing YAML 1.1 reads otherwise."""

    def check_key(self, key: Any, key_node: yaml.Node, line: int) -> None:
        """An unquoted ``yes``/``no`` key is a boolean to YAML 1.1: refused."""
        if isinstance(key, bool) and key_node.style is None:
            raise ConfigError(f"key {key_node.value} (line {line}) is read by YAML as "
                              f"{str(key).lower()}, not as a name: quote it "
                              f"(\"{key_node.value}\": ...)")

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> bool:
        """A boolean written true or false: YAML 1.1's ``yes``/``no``/``on``/``off`` refused.

        (A condition named ``no`` in a list of names would be false.)
        """
        value = super().construct_yaml_bool(node)
        if str(node.value).lower() not in ("true", "false"):
            raise ConfigError(f"{node.value} (line {node.start_mark.line + 1}) is read by YAML "
                              f"as {str(value).lower()}, not as written: quote it "
                              f"(\"{node.value}\") for a name, or write {str(value).lower()} "
                              "for a switch")
        return value

    def construct_yaml_str(self, node: yaml.ScalarNode) -> str:
        """Text as written: an unquoted exponent-form number YAML 1.1 reads as text, refused.

        (``1e1``, ``5e-324``: YAML 1.1's floats need a dot and a signed exponent.)
        """
        value = super().construct_yaml_str(node)
        if node.style is None and _EXPONENT_TEXT.fullmatch(value):
            raise ConfigError(f"{value} (line {node.start_mark.line + 1}) is read by YAML as "
                              f"text, not a number: write {_as_number(value)}, or quote it for "
                              "text")
        return value

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An integer as written: YAML 1.1's octal ``010`` and sexagesimal ``1:30`` refused."""
        text = str(node.value).replace("_", "")
        value = super().construct_yaml_int(node)
        if re.fullmatch(r"[-+]?0[0-9]+", text) or ":" in text:
            raise ConfigError(f"{node.value} (line {node.start_mark.line + 1}) is read by YAML "
                              f"as {value}, not as written: write the number without a leading "
                              "zero or a colon, or quote it for text")
        return value


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", UniqueKeyLoader.construct_yaml_int)
UniqueKeyLoader.add_constructor("tag:yaml.org,2002:bool", UniqueKeyLoader.construct_yaml_bool)
UniqueKeyLoader.add_constructor("tag:yaml.org,2002:str", UniqueKeyLoader.construct_yaml_str)
