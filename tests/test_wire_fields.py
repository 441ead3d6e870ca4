"""The declared wire layouts (rog/transport/fields.py) on a made-up message: the header struct and bound follow
from the fields, and hostile counts and lengths are refused before anything is read."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest

from rog.transport.fields import Array, Choice, Flag, Message, Micros, Name, Real, Seconds, Text, U, finite
from rog.transport.messages import ProtocolError


@dataclass(frozen=True)
class Probe(Message):  # not registered: a layout only
    n: int
    mode: int
    on: bool
    name: str
    wait_s: float | None
    gap_s: float | None
    x: float
    pairs: tuple
    TYPE = 250
    FIELDS = (U("n", "H"), Choice("mode", (0, 2), "mode"), Flag("on"), Name("name", 4), Micros("wait_s", "I"),
              Seconds("gap_s"), Real("x", finite, "finite"), Array("pairs", "2H", 3, "pairs", min_n=1))


@dataclass(frozen=True)
class Note(Message):
    text: str
    TYPE = 251
    FIELDS = (Text("text", max_bytes=8),)


GOOD = Probe(7, 2, True, "ab", 0.5, None, -1.5, ((1, 2), (3, 4)))
HEAD = "<HBB4sIdd" + "I"  # the fields' codes in order, then the array's count


def test_header_and_bound_follow_from_the_fields():
    assert Probe._S.format == HEAD
    assert Probe.MAX_BODY == struct.calcsize(HEAD) + 3 * 4  # three pairs of u16 at most
    body = GOOD.pack_body()
    assert body == struct.pack(HEAD, 7, 2, 1, b"ab", 500_000, float("nan"), -1.5, 2) + struct.pack("<4H", 1, 2, 3, 4)
    assert Probe.unpack_body(body) == GOOD
    assert Note.MAX_BODY == 8 and Note.unpack_body(Note("abcdefghij").pack_body()) == Note("abcdefgh")


def _with_count(n: int, extra: bytes = b"") -> bytes:
    return GOOD.pack_body()[: struct.calcsize(HEAD) - 4] + struct.pack("<I", n) + extra


@pytest.mark.parametrize("body, match", [
    (_with_count(0xFFFFFFFF), "announces 4294967295 pairs but carries 0 bytes"),  # a count past the buffer
    (_with_count(4, bytes(16)), "4 pairs, bounds 1 to 3"),  # consistent, but past its bound
    (_with_count(0), "0 pairs, bounds 1 to 3"),
    (_with_count(1, bytes(3)), "announces 1 pairs but carries 3 bytes"),
    (b"\0" * 5, "header needs"),
])
def test_hostile_counts_and_lengths_are_refused_before_reading(body, match):
    with pytest.raises(ProtocolError, match=match):
        Probe.unpack_body(body)


@pytest.mark.parametrize("field, raw, match", [(1, b"\x01", "unknown mode 1"), (2, b"\x02", "on flag must be 0 or 1"),
                                                (3, b"\xff\0\0\0", "non-ASCII name")])
def test_each_field_checks_its_value(field, raw, match):
    offsets = [0, 2, 3, 4]
    body = bytearray(GOOD.pack_body())
    body[offsets[field]:offsets[field] + len(raw)] = raw
    with pytest.raises(ProtocolError, match=match):
        Probe.unpack_body(bytes(body))


@pytest.mark.parametrize("bad", [dict(n=1 << 16), dict(mode=1), dict(name="abcde"), dict(wait_s=-1.0),
                                 dict(x=float("inf")), dict(pairs=()), dict(pairs=((1, 2, 3),)), dict(pairs=((1, 1 << 16),))])
def test_packing_refuses_what_the_layout_cannot_carry(bad):
    values = {**GOOD.__dict__, **bad}
    with pytest.raises(ValueError):
        Probe(**values).pack_body()
