"""A mechanism's options as one frozen dataclass beside the mechanism, and the run.py flags made from it.

The dataclass (conventionally ``Options`` in the mechanism's module) holds each option as a field: its type,
its default, one line of help in ``metadata`` (:func:`option`), and its checks in ``__post_init__``, which
raise :class:`~rog.errors.ConfigError` naming the flag and the fix: the one place the values are checked.
:func:`add_option_flags` adds ``--<prefix>-<field>`` (dashes for underscores) for every field to a run.py
argument group, and :func:`options_from` reads them back from the parsed flags as the dataclass.  Its
``dataclasses.asdict`` is the mechanism's ``config.yaml`` entry; the mechanism's constructor takes those
fields by name.  Standard library and :mod:`rog.errors` only: every layer may use it.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

__all__ = ["option", "flag_of", "add_option_flags", "options_from"]

FLAG_TYPES = (float, int, str)  # field types a flag is made for (a new one needs its parser here)


def option(default: Any, help: str) -> Any:
    """A field of an options dataclass: its default and one line of help (the flag's, without the default)."""
    return dataclasses.field(default=default, metadata={"help": help})


def flag_of(prefix: str, name: str) -> str:
    """The run.py flag of option ``name`` of the mechanism ``prefix``: ``--<prefix>-<name with dashes>``."""
    return f"--{prefix}-{name.replace('_', '-')}"


def _fields(cls) -> list[tuple[dataclasses.Field, type]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if hints[f.name] not in FLAG_TYPES or "help" not in f.metadata:
            raise TypeError(f"{cls.__qualname__}.{f.name}: an option is a float, int or str field made with "
                            f"rog.options.option(default, help); got {hints[f.name]!r}")
        out.append((f, hints[f.name]))
    return out


def add_option_flags(group, cls, prefix: str, who: str) -> None:
    """Add one flag per field of the options dataclass ``cls`` to the argparse ``group``; ``who`` starts each
    help line (the system or mechanism the option belongs to)."""
    for f, kind in _fields(cls):
        group.add_argument(flag_of(prefix, f.name), type=kind, default=f.default,
                           help=f"{who}: {f.metadata['help']} (default {f.default:g})" if kind is not str
                           else f"{who}: {f.metadata['help']} (default {f.default})")


def options_from(a: argparse.Namespace, cls, prefix: str):
    """The ``cls`` of the flags parsed into ``a`` (its ``__post_init__`` checks them: ConfigError naming the flag)."""
    return cls(**{f.name: getattr(a, f"{prefix}_{f.name}") for f, _ in _fields(cls)})
