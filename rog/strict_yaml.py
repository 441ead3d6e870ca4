"""Strict YAML loading for configuration files: safe tags only, no key given twice, mapping lines kept.

PyYAML silently keeps the last of two equal keys; a config file with a key given twice is almost
always a mistake, so :func:`load_strict` rejects it, naming both lines.  Every mapping comes back as
a :class:`LineDict` (a plain ``dict`` plus the line it starts on) so validators can point at it.
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKeyError(ValueError):
    """A mapping gives one key twice (the message names both lines)."""


class LineDict(dict):
    """A mapping that remembers the (1-based) YAML line it started on."""

    line: int | None = None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice and records mapping lines."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> LineDict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise DuplicateKeyError(f"line {key_node.start_mark.line + 1}: field {key!r} is given twice "
                                    f"(first on line {seen[key]}); keep one")
        seen[key] = key_node.start_mark.line + 1
    out = LineDict(loader.construct_mapping(node, deep=True))
    out.line = node.start_mark.line + 1
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_strict(text: str) -> Any:
    """Parse YAML text safely; raises DuplicateKeyError or yaml.YAMLError."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def yaml_problem(e: yaml.YAMLError) -> str:
    """A one-line description of a YAML syntax error, with its line when known."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    return f"line {mark.line + 1}: {problem}" if mark is not None else problem
