"""Declared wire layouts: a message lists its fields once; packing, unpacking and every check follow.

A body is a little-endian header (one struct of its fields' codes) and at most one variable tail
after it: :class:`Text`, :class:`Data`, or an :class:`Array` whose u32 count ends the header.  A
message class sets ``FIELDS`` (wire order; the tail last) and gets ``_S`` (the header struct),
``MAX_BODY``, ``pack_body`` and ``unpack_body``.  Unpacking treats the bytes as hostile: the body
length is checked against the header and the tail's bounds, and a count against the bytes that
remain and its bound, before anything is read; each field checks its value; only struct and numpy
read the bytes (no pickle, no eval).  Decoded values that contradict each other are refused by the
message's :meth:`Message.check`, which runs before packing too (a sender never sends what its peer
refuses).
"""

from __future__ import annotations

import math
import struct
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

from .errors import ProtocolError

MAX_TEXT_BYTES = 512  # reason texts in Refuse / Error / Bye


def finite(v: float) -> bool:
    """True for a finite float."""
    return math.isfinite(v)


def positive(v: float) -> bool:
    """True for a finite float > 0."""
    return math.isfinite(v) and v > 0


# ----------------------------------------------------------------------------- header fields
class Field:
    """One named value at a fixed place in the header, packed with struct ``code``."""

    def __init__(self, name: str, code: str) -> None:
        self.name, self.code = name, code

    def to_wire(self, msg: "Message") -> Any:
        """The header value of ``msg``'s field."""
        return self.pack(getattr(msg, self.name))

    def from_wire(self, raw: Any, kw: dict, where: str) -> None:
        """Set the constructor argument(s) this header value stands for (``where``: the message, for refusals)."""
        kw[self.name] = self.unpack(raw, where)

    def pack(self, value: Any) -> Any:
        """The struct value of ``value``; ``ValueError`` where the layout cannot carry it."""
        return value

    def unpack(self, raw: Any, where: str) -> Any:
        """The value of struct value ``raw``; :class:`ProtocolError` where a peer may not send it."""
        return raw

    def pack_all(self, values: list) -> list:
        """:meth:`pack` of each element of an :class:`Array`."""
        return [self.pack(v) for v in values]

    def unpack_all(self, raws: tuple, where: str) -> list:
        """:meth:`unpack` of each element of an :class:`Array`."""
        return [self.unpack(r, where) for r in raws]


class U(Field):
    """An unsigned integer (code B, H, I or Q); ``mask``: keep the low bits of a wider value."""

    def __init__(self, name: str, code: str, mask: bool = False) -> None:
        super().__init__(name, code)
        self.top, self.mask = (1 << (8 * struct.calcsize(code))) - 1, mask

    def pack(self, value: int) -> int:
        if self.mask:
            return value & self.top
        if not 0 <= value <= self.top:
            raise ValueError(f"{self.name}={value} does not fit an unsigned {self.code} field")
        return value

    def pack_all(self, values: list) -> list:
        values = [int(v) for v in values]
        if values and (min(values) < 0 or max(values) > self.top):
            raise ValueError(f"{self.name} values must lie in [0, {self.top}], got {values[:8]}...")
        return values

    def unpack_all(self, raws: tuple, where: str) -> list:
        return list(raws)


class Choice(U):
    """A byte that must be one of ``allowed`` (``what`` names it in the refusal)."""

    def __init__(self, name: str, allowed: Iterable[int], what: str) -> None:
        super().__init__(name, "B")
        self.allowed, self.what = frozenset(allowed), what

    def pack(self, value: int) -> int:
        if value not in self.allowed:
            raise ValueError(f"{self.name} must be one of {sorted(self.allowed)}, got {value}")
        return value

    def unpack(self, raw: int, where: str) -> int:
        if raw not in self.allowed:
            raise ProtocolError(f"{where} carries an unknown {self.what} {raw}")
        return raw


class Flag(Field):
    """A bool in one byte; ``strict``: a byte other than 0 or 1 is refused (else any non-zero is True)."""

    def __init__(self, name: str, strict: bool = True) -> None:
        super().__init__(name, "B")
        self.strict = strict

    def pack(self, value: bool) -> int:
        return int(bool(value))

    def unpack(self, raw: int, where: str) -> bool:
        if self.strict and raw not in (0, 1):
            raise ProtocolError(f"{where} {self.name} flag must be 0 or 1, got {raw}")
        return bool(raw)


class Raw(Field):
    """``n`` bytes as they are (struct pads a shorter value with zeros, cuts a longer one)."""

    def __init__(self, name: str, n: int) -> None:
        super().__init__(name, f"{n}s")


class Name(Field):
    """An ASCII name of at most ``n`` bytes, zero-padded."""

    def __init__(self, name: str, n: int) -> None:
        super().__init__(name, f"{n}s")
        self.n = n

    def pack(self, value: str) -> bytes:
        raw = value.encode("ascii")
        if len(raw) > self.n:
            raise ValueError(f"{self.name} name {value!r} is longer than {self.n} bytes")
        return raw

    def unpack(self, raw: bytes, where: str) -> str:
        try:
            return raw.rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError:
            raise ProtocolError(f"{where} carries a non-ASCII {self.name} name") from None


class Micros(Field):
    """A duration in whole microseconds (code I or Q); the all-ones value stands for None (decoded as ``none_as``)."""

    def __init__(self, name: str, code: str, none_as: float | None = None) -> None:
        super().__init__(name, code)
        self.none, self.none_as = (1 << (8 * struct.calcsize(code))) - 1, none_as

    def pack(self, value: float | None) -> int:
        if value is None:
            return self.none
        if not value >= 0:  # also catches NaN
            raise ValueError(f"a duration must be >= 0 or None, got {value}")
        return min(int(round(value * 1e6)), self.none - 1)

    def unpack(self, raw: int, where: str) -> float | None:
        return self.none_as if raw == self.none else raw / 1e6


class Seconds(Field):
    """A duration as float64 seconds, NaN standing for None; ``optional=False``: None is refused."""

    def __init__(self, name: str, optional: bool = True) -> None:
        super().__init__(name, "d")
        self.optional = optional

    def pack(self, value: float | None) -> float:
        if value is None:
            return math.nan
        value = float(value)
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"a duration must be a finite number of seconds >= 0 or None, got {value!r}")
        return value

    def unpack(self, raw: float, where: str) -> float | None:
        if math.isnan(raw):
            if self.optional:
                return None
            raise ProtocolError(f"{self.name} must be a duration, got NaN")
        if not (raw >= 0 and math.isfinite(raw)):
            raise ProtocolError(f"{self.name} must be a finite duration >= 0, got {raw}")
        return raw


class Real(Field):
    """A float64 that ``ok`` accepts (``what`` says what it must be; ``label`` names it, else its name)."""

    def __init__(self, name: str, ok: Callable[[float], bool], what: str, label: str = "") -> None:
        super().__init__(name, "d")
        self.ok, self.what, self.label = ok, what, label or name

    def pack(self, value: float) -> float:
        value = float(value)
        if not self.ok(value):
            raise ValueError(f"{self.label} must be {self.what}, got {value!r}")
        return value

    def unpack(self, raw: float, where: str) -> float:
        if not self.ok(raw):
            raise ProtocolError(f"{where} {self.label} must be {self.what}, got {raw}")
        return raw


# ----------------------------------------------------------------------------- tails
class Tail:
    """The variable part after the header: ``max_bytes`` at most; ``count`` says whether a u32 count ends the header."""

    count = False

    def __init__(self, name: str, max_bytes: int) -> None:
        self.name, self.max_bytes = name, max_bytes


class Text(Tail):
    """A UTF-8 text filling the rest of the body, cut to ``max_bytes`` when packed (bad UTF-8 is replaced)."""

    def __init__(self, name: str, max_bytes: int = MAX_TEXT_BYTES) -> None:
        super().__init__(name, max_bytes)

    def pack(self, value: str) -> tuple[bytes, None]:
        return value.encode("utf-8", "replace")[: self.max_bytes], None

    def unpack(self, body: bytes, start: int, n: None, where: str) -> str:
        return bytes(body[start:]).decode("utf-8", "replace")


class Data(Tail):
    """Raw bytes filling the rest of the body: ``min_bytes`` to ``max_bytes``, a whole number of ``multiple``."""

    def __init__(self, name: str, max_bytes: int, min_bytes: int = 0, multiple: int = 1) -> None:
        super().__init__(name, max_bytes)
        self.min_bytes, self.multiple = min_bytes, multiple

    def _refuse(self, n: int) -> str | None:
        if not self.min_bytes <= n <= self.max_bytes or n % self.multiple:
            return (f"{self.name} of {n} bytes: needs {self.min_bytes} to {self.max_bytes} bytes"
                    + (f", a whole number of {self.multiple}-byte values" if self.multiple > 1 else ""))
        return None

    def pack(self, value: bytes) -> tuple[bytes, None]:
        raw = bytes(value)
        why = self._refuse(len(raw))
        if why:
            raise ValueError(why)
        return raw, None

    def unpack(self, body: bytes, start: int, n: None, where: str) -> bytes:
        why = self._refuse(len(body) - start)
        if why:
            raise ProtocolError(f"{where} body: {why}")
        return bytes(body[start:])


class Array(Tail):
    """``n`` elements after a u32 count, ``min_n <= n <= max_n``; an element is ``k`` values of struct code ``code``
    (``"4d"``: four float64), each checked by ``elem``; decoded as a tuple (of ``k``-tuples when ``k > 1``), or with
    ``numpy=True`` (code ``"I"`` only) as an int64 array."""

    count = True

    def __init__(self, name: str, code: str, max_n: int, label: str, min_n: int = 0, elem: Field | None = None,
                 numpy: bool = False) -> None:
        self.k, self.base = (int(code[:-1]), code[-1]) if code[:-1] else (1, code)
        self.elem_bytes = self.k * struct.calcsize(self.base)
        super().__init__(name, max_n * self.elem_bytes)
        self.max_n, self.min_n, self.label, self.numpy = max_n, min_n, label, numpy
        self.elem = elem or U(name, self.base)

    def _bounds(self, n: int) -> str | None:
        return None if self.min_n <= n <= self.max_n else f"{n} {self.label}, bounds {self.min_n} to {self.max_n}"

    def pack(self, value: Any) -> tuple[bytes, int]:
        if self.numpy:
            flat = np.asarray(value, dtype=np.int64).ravel()
            n = flat.size
        else:
            items = list(value)
            n = len(items)
            if self.k > 1 and any(len(x) != self.k for x in items):
                raise ValueError(f"every element of {self.name} is {self.k} values")
            flat = [v for x in items for v in x] if self.k > 1 else items
        why = self._bounds(n)
        if why:
            raise ValueError(f"{self.name} holds {why}")
        if self.numpy:
            if n and (flat.min() < 0 or flat.max() > self.elem.top):
                raise ValueError(f"{self.name} must be non-negative 32-bit values")
            return flat.astype("<u4").tobytes(), n
        return struct.pack(f"<{len(flat)}{self.base}", *self.elem.pack_all(flat)), n

    def unpack(self, body: bytes, start: int, n: int, where: str) -> Any:
        if len(body) - start != n * self.elem_bytes:
            raise ProtocolError(f"{where} announces {n} {self.label} but carries {len(body) - start} bytes")
        why = self._bounds(n)
        if why:
            raise ProtocolError(f"{where} body announces {why}")
        if self.numpy:
            return np.frombuffer(body, dtype="<u4", count=n, offset=start).astype(np.int64)
        flat = self.elem.unpack_all(struct.unpack_from(f"<{n * self.k}{self.base}", body, start), where)
        return tuple(flat) if self.k == 1 else tuple(tuple(flat[i:i + self.k]) for i in range(0, len(flat), self.k))


# ----------------------------------------------------------------------------- messages
class Message:
    """A typed message: a frozen dataclass whose ``FIELDS`` declare its wire layout (see the module text)."""

    TYPE: ClassVar[int]
    MAX_BODY: ClassVar[int]  # bound on body_len, checked before the body is buffered
    STABLE: ClassVar[bool] = False  # layout frozen across protocol versions (handshake messages)
    FIELDS: ClassVar[tuple] = ()
    _S: ClassVar[struct.Struct]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "FIELDS" not in cls.__dict__:
            return
        tail = cls.FIELDS[-1] if cls.FIELDS and isinstance(cls.FIELDS[-1], Tail) else None
        cls._head = tuple(f for f in cls.FIELDS if isinstance(f, Field))
        cls._tail = tail
        cls._S = struct.Struct("<" + "".join(f.code for f in cls._head) + ("I" if tail and tail.count else ""))
        cls.MAX_BODY = cls._S.size + (tail.max_bytes if tail else 0)

    def check(self) -> None:
        """Raise :class:`ProtocolError` where the values contradict each other (before packing, after unpacking)."""

    def pack_body(self) -> bytes:
        """The body bytes of this message."""
        self.check()
        head = [f.to_wire(self) for f in self._head]
        raw = b""
        if self._tail is not None:
            raw, n = self._tail.pack(getattr(self, self._tail.name))
            if n is not None:
                head.append(n)
        return self._S.pack(*head) + raw

    @classmethod
    def unpack_body(cls, body: bytes) -> "Message":
        """The message these body bytes hold; :class:`ProtocolError` if they break its layout or bounds."""
        where, size = cls.__name__, cls._S.size
        if cls._tail is None and len(body) != size:
            raise ProtocolError(f"{where} body is {len(body)} bytes, expected {size}")
        if len(body) < size:
            raise ProtocolError(f"{where} body is {len(body)} bytes, header needs {size}")
        raws = cls._S.unpack_from(body)
        kw: dict = {}
        for f, raw in zip(cls._head, raws):
            f.from_wire(raw, kw, where)
        if cls._tail is not None:
            kw[cls._tail.name] = cls._tail.unpack(body, size, raws[-1] if cls._tail.count else None, where)
        msg = cls(**kw)
        msg.check()
        return msg
