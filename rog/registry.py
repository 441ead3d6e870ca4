"""One shape for every kind of mechanism a run can name: a :class:`Registry` maps a name to an entry.

Policies (``rog.policies.registry.POLICIES``), transfer schedules (``rog.schedules.SCHEDULES``), codecs
(``rog.codecs.codec_registry.CODECS``), workloads (``rog.workloads.registry.WORKLOADS``), power sources
(``rog.power.sources.POWER_SOURCES``) and evaluation items (``rog.experiment.items.ITEMS`` and
``MODULE_ITEMS``) are each one ``Registry``.  Adding a mechanism = its own module + one
:meth:`Registry.register` line (or one entry in the registry's list).  Looking up a name that is not
there raises :class:`UnknownEntryError` naming the kind, the name and the known names; registering a
name twice raises :class:`DuplicateEntryError`: never a silent skip or a silent replacement.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Callable

__all__ = ["Registry", "UnknownEntryError", "RefusedEntryError", "DuplicateEntryError", "check_module_path"]


class UnknownEntryError(KeyError, ValueError):
    """A name that is not registered (a ``KeyError`` for mapping code, a ``ValueError`` for callers
    that check user input); the message names the kind, the name and the known names."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RefusedEntryError(ValueError):
    """An entry its registry's check refuses (not a codec class, a module that is not in the tree, ...)."""


class DuplicateEntryError(RefusedEntryError):
    """A name registered twice, or a key that must be unique (e.g. a codec's wire id) already in use."""


class Registry(MutableMapping):
    """Name -> entry for one ``kind`` of mechanism, in registration order.

    A mapping (``name in r``, ``r[name]``, ``tuple(r)``, ``r.items()``, ``r == {...}``), so callers use it
    as they used a dict; ``r[name] = entry`` is :meth:`register` and ``del r[name]`` :meth:`unregister`.
    ``check(name, entry, registry)`` may refuse an entry (raise :class:`RefusedEntryError`);
    ``error`` is the class of the unknown-name error (a subclass of a layer's own error, if it has one).
    """

    def __init__(self, kind: str, entries: Iterable[tuple[str, Any]] = (), *,
                 check: Callable[[str, Any, "Registry"], None] | None = None,
                 error: type[Exception] = UnknownEntryError) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}
        self._check = check
        self._error = error
        for name, entry in entries:
            self.register(name, entry)

    def register(self, name: str, entry: Any) -> Any:
        """Add ``entry`` under ``name``; :class:`DuplicateEntryError` if the name is taken.  Returns ``entry``."""
        if not isinstance(name, str) or not name:
            raise RefusedEntryError(f"a {self.kind} needs a non-empty string name; got {name!r}")
        if name in self._entries:
            raise DuplicateEntryError(f"{self.kind} {name!r} is registered twice; pick another name "
                                      f"(registered: {', '.join(self._entries)})")
        if self._check is not None:
            self._check(name, entry, self)
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> Any:
        """Remove ``name`` (a test's throwaway entry) and return its entry; unknown names raise."""
        entry = self[name]
        del self._entries[name]
        return entry

    def unknown(self, name: object) -> Exception:
        """The error for ``name`` not being registered: ``unknown <kind> 'name'; choose one of a, b, c``."""
        return self._error(f"unknown {self.kind} {name!r}; choose one of {', '.join(map(str, self._entries))}")

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def lookup(self, name: str) -> Any:
        """The entry of ``name``; the registry's unknown-name error if there is none."""
        return self[name]

    def view(self, attribute: str) -> Mapping:
        """A read-only mapping name -> ``getattr(entry, attribute)``, always current."""
        return _AttributeView(self, attribute)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.unknown(name) from None

    def __setitem__(self, name: str, entry: Any) -> None:
        self.register(name, entry)

    def __delitem__(self, name: str) -> None:
        self.unregister(name)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries
        except TypeError:
            return False

    def get(self, name, default=None):
        """The entry of ``name``, or ``default`` (no error)."""
        return self._entries.get(name, default) if name in self else default

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"


def check_module_path(name: str, module: Any, registry: Registry) -> None:
    """A :class:`Registry` check for entries that are dotted module paths (resolved later with importlib):
    refuses a path that is not in the tree, so a missing module fails when the registry is built, never
    as a silent skip when it is used."""
    import importlib.util

    try:
        found = isinstance(module, str) and importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise RefusedEntryError(f"{registry.kind} {name!r}: module {module!r} is not in this tree; add it or drop the entry")


class _AttributeView(Mapping):
    """``registry.view(attr)``: name -> one attribute of each entry (e.g. a schedule's re-plan period)."""

    def __init__(self, registry: Registry, attribute: str) -> None:
        self._registry, self._attribute = registry, attribute

    def __getitem__(self, name: str) -> Any:
        return getattr(self._registry[name], self._attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry)

    def __len__(self) -> int:
        return len(self._registry)
