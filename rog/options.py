"""A mechanism's options as one frozen dataclass beside the mechanism, and the run.py flags made from it.

The dataclass (conventionally ``Options`` in the mechanism's module) holds each option as a field: its type,
its default, one line of help in ``metadata`` (:func:`option`), and its checks in ``__post_init__``, which
raise :class:`~rog.errors.ConfigError` naming the flag and the fix: the one place the values are checked
(:func:`check_choices` does a ``choices`` field's check there).  :func:`add_option_flags` adds
``--<prefix>-<field>`` (dashes for underscores; a field's ``flag`` keeps an older name; a bool field takes
``on``/``off``) for every field to a
run.py argument group, and :func:`options_from` reads them back from the parsed flags as the dataclass, the
fields marked ``scaled`` multiplied by the ``scale`` field (``--adsp-time-scale``).  Its ``dataclasses.asdict``
is the mechanism's ``config.yaml`` entry; the mechanism's constructor takes those fields by name.  Standard
library and :mod:`rog.errors` only: every layer may use it.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from rog.errors import ConfigError

__all__ = ["option", "flag_of", "field_flag", "add_option_flags", "options_from", "check_choices", "on_off",
           "add_entry_flags", "check_entry_options", "entry_options", "flag_text", "OptionValues", "option_values"]

FLAG_TYPES = (float, int, str, bool)  # field types a flag is made for (a new one needs its parser here), or Optional of one
ON_OFF = {"on": True, "off": False, "true": True, "false": False}  # a bool option's flag: on|off (true|false: as recorded)


def on_off(text: str) -> bool:
    """A bool option's flag value: ``on`` or ``off``."""
    try:
        return ON_OFF[str(text).strip().lower()]
    except KeyError:
        raise ValueError(text) from None


on_off.__name__ = "on|off value"  # argparse's message: "invalid on|off value: 'maybe'"


def option(default: Any, help: str, *, flag: str | None = None, choices: Sequence[str] | None = None,
           scaled: bool = False, scale: bool = False) -> Any:
    """A field of an options dataclass: its default and one line of help (the flag's, without the default).

    ``flag``: the flag's name when it is not ``--<prefix>-<field>`` (a name users already type);
    ``choices``: the values a str field takes (checked by :func:`check_choices`, shown in ``--help``);
    ``scale``: this field multiplies every field marked ``scaled`` when read from the flags."""
    meta = {"help": help, "flag": flag, "choices": tuple(choices) if choices else None, "scaled": scaled,
            "scale": scale}
    return dataclasses.field(default=default, metadata=meta)


def flag_of(prefix: str, name: str) -> str:
    """The run.py flag of option ``name`` of the mechanism ``prefix``: ``--<prefix>-<name with dashes>``."""
    return f"--{prefix}-{name.replace('_', '-')}"


def _flag(f: dataclasses.Field, prefix: str) -> str:
    return f.metadata.get("flag") or flag_of(prefix, f.name)


def field_flag(cls, name: str, prefix: str) -> str:
    """The run.py flag of field ``name`` of the options dataclass ``cls`` (its ``flag``, else ``--<prefix>-...``)."""
    return _flag({f.name: f for f in dataclasses.fields(cls)}[name], prefix)


def _kind(hint) -> tuple[type, bool] | None:
    """``(parser type, optional)`` of a field's annotation, or None when no flag can be made for it."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union and len(args) == 2 and type(None) in args:
        inner = args[0] if args[1] is type(None) else args[1]
        return (inner, True) if inner in FLAG_TYPES else None
    return (hint, False) if hint in FLAG_TYPES else None


def _fields(cls) -> list[tuple[dataclasses.Field, type]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind = _kind(hints[f.name])
        if kind is None or "help" not in f.metadata:
            raise TypeError(f"{cls.__qualname__}.{f.name}: an option is a float, int, str or bool field (or Optional of "
                            f"one) made with rog.options.option(default, help); got {hints[f.name]!r}")
        out.append((f, kind[0]))
    return out


def _help(who: str, f: dataclasses.Field, kind: type) -> str:
    if f.default is None:  # an Optional option's help says what leaving it out means
        return f"{who}: {f.metadata['help']}"
    shown = ("on" if f.default else "off") if kind is bool else f"{f.default:g}" if kind is not str else f"{f.default}"
    return f"{who}: {f.metadata['help']} (default {shown})"


def add_option_flags(group, cls, prefix: str, who: str) -> None:
    """Add one flag per field of the options dataclass ``cls`` to the argparse ``group``; ``who`` starts each
    help line (the system or mechanism the option belongs to).  A ``choices`` field shows its choices but is
    checked by the dataclass, not by argparse: one place."""
    for f, kind in _fields(cls):
        choices = ("on", "off") if kind is bool else f.metadata.get("choices")
        group.add_argument(_flag(f, prefix), type=on_off if kind is bool else kind, default=f.default,
                           help=_help(who, f, kind), metavar="{" + ",".join(choices) + "}" if choices else None)


def options_from(a: argparse.Namespace, cls, prefix: str):
    """The ``cls`` of the flags parsed into ``a`` (its ``__post_init__`` checks them: ConfigError naming the flag);
    a ``scaled`` field is the flag's value times the ``scale`` field's."""
    return _scaled(cls, {f.name: getattr(a, _flag(f, prefix).lstrip("-").replace("-", "_")) for f, _ in _fields(cls)})


def _scaled(cls, values: dict[str, Any]):
    """``cls(**values)`` from the flags' values, every ``scaled`` field multiplied by the ``scale`` field's."""
    scale = [values[f.name] for f, _ in _fields(cls) if f.metadata.get("scale")]
    for f, _ in _fields(cls):
        if f.metadata.get("scaled") and scale and values[f.name] is not None:
            values[f.name] = values[f.name] * scale[0]
    return cls(**values)


def check_choices(opts, prefix: str) -> None:
    """``__post_init__``'s check of every ``choices`` field of ``opts``: ConfigError naming the flag and the choices."""
    for f in dataclasses.fields(opts):
        choices, value = f.metadata.get("choices"), getattr(opts, f.name)
        if choices and value is not None and value not in choices:  # None: an Optional option left out
            raise ConfigError(f"{_flag(f, prefix)} ({f.name}) must be one of {', '.join(choices)}, got {value!r}")


# A registry's entries (policies, codecs) that declare options: ``cls.options`` (the dataclass), ``cls.run_options``
# (the flags' prefix) and ``cls.options_group`` (the run.py --help group), as class attributes.
def _declaring(entries: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [(name, cls) for name, cls in entries if getattr(cls, "options", None) is not None]


def add_entry_flags(groups: Mapping[str, Any], entries: Iterable[tuple[str, Any]]) -> None:
    """The flags of every ``(name, class)`` of a registry whose class declares options, each in its group."""
    seen = set()
    for name, cls in _declaring(entries):
        if cls.options not in seen:  # a subclass that keeps its parent's options keeps its flags
            seen.add(cls.options)
            add_option_flags(groups[cls.options_group], cls.options, cls.run_options, name)


def check_entry_options(a: argparse.Namespace, entries: Iterable[tuple[str, Any]]) -> None:
    """Every declaring entry's options from the flags, checked by its dataclass (a bad value is refused even for
    an entry the run does not choose: the flag was given for nothing)."""
    for _, cls in _declaring(entries):
        options_from(a, cls.options, cls.run_options)


def entry_options(a: argparse.Namespace, cls) -> dict | None:
    """The ``config.yaml`` entry of the chosen class's options from the flags (None: it declares none)."""
    if cls is None or getattr(cls, "options", None) is None:
        return None
    return dataclasses.asdict(options_from(a, cls.options, cls.run_options))


def flag_text(value: Any) -> str:
    """A value as a flag takes it: a bool on/off, a float in its shortest form that parses back to it exactly
    (``1`` for 1.0, ``0.1``), a tuple comma-separated, anything else ``str``."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    if isinstance(value, tuple):
        return ",".join(flag_text(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class OptionValues:
    """Some options of one mechanism as its flags take them (a ``scaled`` field before the scale), for a planned
    run (:class:`rog.experiment.items.RunSpec`'s ``options``); made by :func:`option_values`, which checks them.
    :meth:`argv` is run.py's flags for them."""

    options: type  # the mechanism's options dataclass
    prefix: str  # its flags' prefix (``run_options``)
    values: tuple[tuple[str, Any], ...]  # (field, value) in the order given

    def get(self, name: str, default: Any = None) -> Any:
        """The value given for field ``name`` (``default`` when it was not given)."""
        return dict(self.values).get(name, default)

    def with_values(self, **changes: Any) -> "OptionValues":
        """The same options with ``changes`` made (checked as :func:`option_values` checks)."""
        return option_values((self.options, self.prefix), **{**dict(self.values), **changes})

    def argv(self) -> list[str]:
        """``--<flag> <value>`` for every value given (:func:`flag_text`)."""
        fields = {f.name: f for f in dataclasses.fields(self.options)}
        return [a for name, value in self.values for a in (_flag(fields[name], self.prefix), flag_text(value))]


def option_values(mechanism, **values: Any) -> OptionValues:
    """The options ``values`` of a registry entry that declares them (``mechanism.options``, ``.run_options``: a
    policy, a codec), e.g. ``option_values(ADSP, time_scale=0.1, fixed_rate=4)``; or of an options dataclass given
    as ``(Options, prefix)``.  A name the dataclass lacks or a value of the wrong type is a ValueError, a value
    its ``__post_init__`` refuses a ConfigError, both here, when the item is built."""
    cls, prefix = mechanism if isinstance(mechanism, tuple) else (mechanism.options, mechanism.run_options)
    where = f"{cls.__module__}.{cls.__qualname__}"
    hints = typing.get_type_hints(cls)
    kinds = {f.name: (kind, _kind(hints[f.name])[1]) for f, kind in _fields(cls)}  # (type, Optional)
    for name, value in values.items():
        if name not in kinds:
            raise ValueError(f"{where} has no option {name!r} (its options: {', '.join(kinds)})")
        kind, optional = kinds[name]
        ok = (value is None and optional) or (isinstance(value, bool) == (kind is bool) and isinstance(
            value, (int, float) if kind is float else kind))
        if not ok:
            raise ValueError(f"{where}.{name} takes {kind.__name__}{' or None' if optional else ''}, got {value!r}")
    _scaled(cls, {**{f.name: f.default for f, _ in _fields(cls)}, **values})  # its checks, the others at their defaults
    return OptionValues(cls, prefix, tuple(values.items()))
