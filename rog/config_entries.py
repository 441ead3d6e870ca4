"""Typed entries of a configuration mapping (a ``config.yaml``, a launcher's JSON): one type check and one error
wording for every reader (:class:`rog.experiment.run_config.RunConfig`, :class:`rog.workloads.spec.WorkloadSpec`,
:class:`rog.inference.live_config.LiveConfig`, ScaDLES's ``RunEntries``).

``kind`` is a Python type (``bool``, ``int``, ``float``, ``str``, ``dict``, ``list``) or ``PATH`` (a string or an
``os.PathLike``); ``int`` and ``float`` refuse ``True``/``False``, ``float`` takes an integer too, ``dict`` any
mapping.  A wrong value raises :class:`~rog.errors.ConfigError` as ``<where>: expected <words>, got <value>``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rog.errors import ConfigError

__all__ = ["PATH", "KIND_WORDS", "check_kind", "entry", "require_mapping"]

PATH = "path"
KIND_WORDS = {dict: "a mapping", list: "a list", float: "a number", int: "an integer", bool: "true/false",
              str: "a string", PATH: "a path"}
_OK = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    dict: lambda v: isinstance(v, Mapping),
    list: lambda v: isinstance(v, list),
    PATH: lambda v: isinstance(v, (str, os.PathLike)),
}


def check_kind(value: Any, kind, where: str, words: str | None = None) -> Any:
    """``value`` unchanged when it is of ``kind``; else ConfigError naming ``where`` (``words``: the expected
    kind in words, default :data:`KIND_WORDS`)."""
    ok = _OK.get(kind)
    if ok is None or not ok(value):
        raise ConfigError(f"{where}: expected {words or KIND_WORDS.get(kind, str(kind))}, got {value!r}")
    return value


def entry(d: Mapping, key: str, kind, source: str, missing: str | None = None) -> Any:
    """``d[key]`` checked against ``kind`` (a number as ``float``, a path as ``str``); None when absent or null,
    unless ``missing`` is given: then ConfigError ``<source>: <key>: missing <missing>``."""
    value = d.get(key)
    if value is None:
        if missing is not None:
            raise ConfigError(f"{source}: {key}: missing {missing}")
        return None
    check_kind(value, kind, f"{source}: {key}")
    return float(value) if kind is float else str(value) if kind == PATH else value


def require_mapping(d: Any, source: str) -> Mapping:
    """``d`` when it is a mapping; else ConfigError naming ``source``."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"{source}: expected a mapping of configuration keys, got {type(d).__name__}")
    return d
