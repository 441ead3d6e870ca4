"""Control messages and the message parser: round trips, bounds checked before buffering, garbage rejected."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples

from rog.transport import messages as m

SAMPLES = [
    m.Hello(1, 1, 7, b"n" * 16),
    m.Challenge(1, b"c" * 16),
    m.Auth(b"p" * 32),
    m.Welcome(b"q" * 32),
    m.Refuse(2, "wrong shared secret"),
    m.Begin(3, 1, 12, 40, 9, 0.25),
    m.Begin(4, 2, 13, 40, 40, None),
    m.Piece(3, 5, 16, 100, b"xyz"),
    m.End(3, 17, 0xDEADBEEF, True),
    m.Ack(3, 15, 0x12345678, 0, 0.125, None),
    m.PullRequest(12),
    m.PullReply(12, 0.5, 0.0, np.array([0, 5, 33306], dtype=np.int64)),
    m.PullReply(13, None, 0.25),
    m.Error(9, "boom"),
    m.Bye("done"),
]


def _same(a: m.Message, b: m.Message) -> bool:
    if type(a) is not type(b):
        return False
    for k, v in vars(a).items():
        w = getattr(b, k)
        if isinstance(v, np.ndarray):
            if not np.array_equal(v, w):
                return False
        elif v != w:
            return False
    return True


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda x: type(x).__name__)
def test_round_trip(msg):
    got = m.MessageParser().feed(m.encode_message(msg))
    assert len(got) == 1 and _same(got[0], msg)


def test_stream_split_at_every_byte_yields_the_same_messages():
    stream = b"".join(m.encode_message(x) for x in SAMPLES)
    for cut in range(0, len(stream), 7):
        p = m.MessageParser()
        got = p.feed(stream[:cut]) + p.feed(stream[cut:])
        assert len(got) == len(SAMPLES) and all(_same(a, b) for a, b in zip(got, SAMPLES))
        assert p.buffered == 0


def test_fast_piece_encoder_matches_the_dataclass():
    assert m.encode_piece(3, 5, 16, 100, b"xyz") == m.encode_message(m.Piece(3, 5, 16, 100, b"xyz"))
    assert len(m.encode_piece(1, 0, 0, 10, b"a" * 10)) == m.PIECE_OVERHEAD + 10


def test_oversized_body_rejected_from_the_envelope_alone():
    # a PullReply claiming a huge body: refused after 12 bytes, nothing else buffered
    env = m.ENVELOPE.pack(m.MAGIC, m.PROTOCOL_VERSION, m.PullReply.TYPE, 0, m.PullReply.MAX_BODY + 1)
    with pytest.raises(m.ProtocolError, match="exceeds its bound"):
        m.MessageParser().feed(env)
    env = m.ENVELOPE.pack(m.MAGIC, m.PROTOCOL_VERSION, m.Piece.TYPE, 0, 0xFFFFFFFF)
    with pytest.raises(m.ProtocolError, match="exceeds its bound"):
        m.MessageParser().feed(env)


@pytest.mark.parametrize(
    "envelope, match",
    [
        ((b"XXXX", 1, 16, 0, 0), "bad magic"),
        ((m.MAGIC, m.PROTOCOL_VERSION, 250, 0, 0), "unknown message type"),
        ((m.MAGIC, 9, m.Begin.TYPE, 0, 0), "protocol version 9"),
        ((m.MAGIC, m.PROTOCOL_VERSION, m.Begin.TYPE, 4, 0), "flags"),
    ],
)
def test_bad_envelopes(envelope, match):
    p = m.MessageParser()
    with pytest.raises(m.ProtocolError, match=match):
        p.feed(m.ENVELOPE.pack(*envelope))
    with pytest.raises(m.ProtocolError, match="already broken"):
        p.feed(m.encode_message(m.Bye("")))


def test_handshake_mode_reads_stable_messages_of_another_version_only():
    hello_v9 = m.encode_message(m.Hello(9, 1, 0, b"n" * 16), version=9)
    assert m.MessageParser(handshake=True).feed(hello_v9)[0].version == 9
    with pytest.raises(m.ProtocolError):
        m.MessageParser(handshake=False).feed(hello_v9)
    with pytest.raises(m.ProtocolError):
        m.MessageParser(handshake=True).feed(m.encode_message(m.Auth(b"p" * 32), version=9))


def test_inconsistent_bodies():
    p = m.MessageParser()
    bad_reply = struct.pack("<IQII", 1, 0, 0, 5) + b"\0" * 8  # announces 5 row ids, carries 2
    with pytest.raises(m.ProtocolError, match="announces 5"):
        p.feed(m.ENVELOPE.pack(m.MAGIC, m.PROTOCOL_VERSION, m.PullReply.TYPE, 0, len(bad_reply)) + bad_reply)
    bad_piece = m.PIECE_HEADER.pack(1, 0, 8, 10) + b"abc"  # bytes [8, 11) of a 10-byte frame
    with pytest.raises(m.ProtocolError, match="covers"):
        m.MessageParser().feed(m.ENVELOPE.pack(m.MAGIC, m.PROTOCOL_VERSION, m.Piece.TYPE, 0, len(bad_piece)) + bad_piece)
    bad_begin = m.Begin._S.pack(1, 1, 1, 3, 4, 0)  # 4 mandatory of 3 planned
    with pytest.raises(m.ProtocolError, match="mandatory"):
        m.MessageParser().feed(m.ENVELOPE.pack(m.MAGIC, m.PROTOCOL_VERSION, m.Begin.TYPE, 0, len(bad_begin)) + bad_begin)


def test_register_refuses_a_taken_type():
    class Clash(m.Message):
        TYPE = m.Begin.TYPE
        MAX_BODY = 0

    with pytest.raises(ValueError, match="already registered"):
        m.register(Clash)


@pytest.mark.property
@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash_the_parser(data):
    p = m.MessageParser()
    try:
        got = p.feed(data)
    except m.ProtocolError:
        return
    assert all(type(x) in m.MESSAGE_TYPES.values() for x in got)


@pytest.mark.property
@settings(max_examples=examples(300), deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 255))
def test_a_garbled_stream_parses_or_fails_cleanly(pos, xor):
    """One byte flipped: the messages before it still parse exactly; a flip in an envelope's magic or
    flags is refused; whatever else parses is a registered message type (never a crash, never code)."""
    encoded = [m.encode_message(x) for x in SAMPLES]
    stream = bytearray(b"".join(encoded))
    pos %= len(stream)
    stream[pos] ^= xor
    starts = np.cumsum([0] + [len(e) for e in encoded])
    k = int(np.searchsorted(starts, pos, side="right")) - 1  # the message holding the flipped byte
    offset = pos - int(starts[k])
    parser, got, refused = m.MessageParser(), [], False
    for i in range(len(SAMPLES)):  # fed one original message span at a time, as a socket might deliver it
        try:
            got += parser.feed(bytes(stream[starts[i]:starts[i + 1]]))
        except m.ProtocolError:
            refused = True
            break
    assert len(got) >= k and all(_same(a, b) for a, b in zip(got[:k], SAMPLES[:k]))
    assert all(type(x) in m.MESSAGE_TYPES.values() for x in got)
    if offset < 4 or offset in (6, 7):  # magic "RGMS" or the flags field (always 0)
        assert refused and len(got) == k
