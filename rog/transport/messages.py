"""Control messages: small typed binary messages inside one fixed envelope.

Every byte on a transport connection belongs to a message::

    envelope 12 bytes  magic "RGMS", version u8, type u8, flags u16 (0), body_len u32
    body     body_len bytes, laid out by the message type (struct, little-endian)

A parser checks the magic, the version, the type and the body length against the type's bound
*before* it buffers the body, and never runs code from the bytes (no pickle, no eval).  The
chunk frames of :mod:`rog.wire` travel inside :class:`Piece` messages, cut into small pieces so
a sender can check its deadline between pieces and stop without desynchronising the stream.

Types live in :data:`MESSAGE_TYPES`; add one with the :func:`register` decorator (a frozen
dataclass with ``TYPE``, ``MAX_BODY``, ``pack_body`` and ``unpack_body``).  The envelope and
the layouts of :class:`Hello`, :class:`Challenge` and :class:`Refuse` are frozen across protocol
versions, so two ends of different versions can still tell each other why they disagree.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

import numpy as np

MAGIC = b"RGMS"
PROTOCOL_VERSION = 2  # 2: Join, JoinReply and Rejoin carry the starting model's digest; ModelPiece (the initial model handed out)
ENVELOPE = struct.Struct("<4sBBHI")
ENVELOPE_BYTES = ENVELOPE.size  # 12
NONCE_BYTES = 16
PROOF_BYTES = 32  # HMAC-SHA256
MAX_TEXT_BYTES = 512  # reason texts in Refuse / Error / Bye
MAX_PIECE_DATA = 1 << 20  # bytes of frame data one Piece may carry
MAX_FRAME_BYTES = (1 << 32) - 1  # a frame length must fit the u32 field
MAX_ROW_IDS = 1 << 21  # row ids one PullReply may list (ConvMLP-M has 33,307 rows)
_NONE_U64 = (1 << 64) - 1  # "no deadline" / "no budget"
_NONE_U32 = (1 << 32) - 1  # "not measured"


class TransportError(Exception):
    """Base class of every transport failure."""


class ProtocolError(TransportError, ValueError):
    """The peer sent bytes that break the protocol; the connection cannot be trusted any more."""


class HandshakeError(TransportError):
    """Connection setup was refused (wrong secret, wrong version, wrong role) or timed out."""


class LinkClosed(TransportError, ConnectionError):
    """The connection ended (peer closed it, reset it, or said bye)."""


class TransportTimeout(TransportError, TimeoutError):
    """Nothing arrived within the allowed time."""


class Role(IntEnum):
    """Which end of a connection: workers connect, the parameter server listens."""

    WORKER = 1
    PS = 2


class Direction(IntEnum):
    """Which way a transmission goes."""

    PUSH = 1  # worker -> PS (gradients)
    PULL = 2  # PS -> worker (averaged update)


class RefuseReason(IntEnum):
    """Why a handshake was refused."""

    VERSION = 1
    AUTH = 2
    ROLE = 3
    WORKER_ID = 4
    BUSY = 5
    PROTOCOL = 6


class AckStatus(IntEnum):
    """How a receiver judged a transmission (anything but OK means some frames were not applied)."""

    OK = 0
    BAD_FRAME = 1  # a frame failed its checks (checksum, bounds, codec, iteration/seq)
    BAD_SEQUENCE = 2  # a frame out of order, duplicated, or a piece that does not continue its frame
    OVERSIZE = 3  # a frame longer than the receiver's bound
    REPLAYED = 4  # a transmission id that is not newer than the last one
    STALE = 5  # an iteration that is not newer than the last one in this direction
    WRONG_DIRECTION = 6  # a push sent to a worker or a pull sent to the PS
    TOO_MANY = 7  # more frames than the transmission announced


MESSAGE_TYPES: dict[int, type["Message"]] = {}


def register(cls: type["Message"]) -> type["Message"]:
    """Class decorator: add a message type to :data:`MESSAGE_TYPES` (type ids are unique, 1..255)."""
    t = cls.TYPE
    if not 1 <= t <= 255:
        raise ValueError(f"{cls.__name__}.TYPE={t} must lie in [1, 255]")
    if t in MESSAGE_TYPES and MESSAGE_TYPES[t] is not cls:
        raise ValueError(f"message type {t} already registered by {MESSAGE_TYPES[t].__name__}")
    MESSAGE_TYPES[t] = cls
    return cls


class Message:
    """A typed message: subclasses are frozen dataclasses with a fixed binary layout."""

    TYPE: ClassVar[int]
    MAX_BODY: ClassVar[int]  # bound on body_len, checked before the body is buffered
    STABLE: ClassVar[bool] = False  # layout frozen across protocol versions (handshake messages)

    def pack_body(self) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def unpack_body(cls, body: bytes) -> "Message":  # pragma: no cover - abstract
        raise NotImplementedError


def encode_message(msg: Message, version: int = PROTOCOL_VERSION) -> bytes:
    """Envelope + body of one message."""
    body = msg.pack_body()
    if len(body) > msg.MAX_BODY:
        raise ValueError(f"{type(msg).__name__} body is {len(body)} bytes, bound {msg.MAX_BODY}")
    return ENVELOPE.pack(MAGIC, version, msg.TYPE, 0, len(body)) + body


# ----------------------------------------------------------------------------- helpers
def _fixed(st: struct.Struct, body: bytes, name: str) -> tuple:
    if len(body) != st.size:
        raise ProtocolError(f"{name} body is {len(body)} bytes, expected {st.size}")
    return st.unpack(body)


def _pack_text(text: str) -> bytes:
    raw = text.encode("utf-8", "replace")
    return raw[:MAX_TEXT_BYTES]


def _unpack_text(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "replace")


def _s_to_us(value: float | None, none: int) -> int:
    if value is None:
        return none
    if not value >= 0:  # also catches NaN
        raise ValueError(f"a duration must be >= 0 or None, got {value}")
    return min(int(round(value * 1e6)), none - 1)


def _us_to_s(value: int, none: int) -> float | None:
    return None if value == none else value / 1e6


def _check_u32(name: str, value: int) -> None:
    if not 0 <= value <= _NONE_U32:
        raise ValueError(f"{name}={value} does not fit an unsigned 32-bit field")


# ----------------------------------------------------------------------------- handshake
@register
@dataclass(frozen=True)
class Hello(Message):
    """Worker -> PS, first message: protocol version, role, worker id, the worker's nonce."""

    version: int
    role: int
    worker_id: int
    nonce: bytes
    TYPE: ClassVar[int] = 1
    _S: ClassVar[struct.Struct] = struct.Struct(f"<HBI{NONCE_BYTES}s")
    MAX_BODY: ClassVar[int] = _S.size
    STABLE: ClassVar[bool] = True

    def pack_body(self) -> bytes:
        return self._S.pack(self.version, self.role, self.worker_id, self.nonce)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Hello":
        return cls(*_fixed(cls._S, body, "Hello"))


@register
@dataclass(frozen=True)
class Challenge(Message):
    """PS -> worker: the PS's protocol version and nonce."""

    version: int
    nonce: bytes
    TYPE: ClassVar[int] = 2
    _S: ClassVar[struct.Struct] = struct.Struct(f"<H{NONCE_BYTES}s")
    MAX_BODY: ClassVar[int] = _S.size
    STABLE: ClassVar[bool] = True

    def pack_body(self) -> bytes:
        return self._S.pack(self.version, self.nonce)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Challenge":
        return cls(*_fixed(cls._S, body, "Challenge"))


@register
@dataclass(frozen=True)
class Auth(Message):
    """Worker -> PS: HMAC-SHA256 proof that the worker holds the shared secret."""

    proof: bytes
    TYPE: ClassVar[int] = 3
    _S: ClassVar[struct.Struct] = struct.Struct(f"<{PROOF_BYTES}s")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.proof)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Auth":
        return cls(*_fixed(cls._S, body, "Auth"))


@register
@dataclass(frozen=True)
class Welcome(Message):
    """PS -> worker: the PS's own HMAC proof; the connection is established."""

    proof: bytes
    TYPE: ClassVar[int] = 4
    _S: ClassVar[struct.Struct] = struct.Struct(f"<{PROOF_BYTES}s")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.proof)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Welcome":
        return cls(*_fixed(cls._S, body, "Welcome"))


@register
@dataclass(frozen=True)
class Refuse(Message):
    """Either end: the handshake is refused, with a reason code and a readable text."""

    reason: int
    text: str
    TYPE: ClassVar[int] = 5
    MAX_BODY: ClassVar[int] = 1 + MAX_TEXT_BYTES
    STABLE: ClassVar[bool] = True

    def pack_body(self) -> bytes:
        return bytes([self.reason & 0xFF]) + _pack_text(self.text)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Refuse":
        if len(body) < 1:
            raise ProtocolError("Refuse body is empty")
        return cls(body[0], _unpack_text(body[1:]))


# ----------------------------------------------------------------------------- transmissions
_MORE_FLAG = 0x80  # high bit of Begin's direction byte: more transmissions of its iteration follow
@register
@dataclass(frozen=True)
class Begin(Message):
    """Sender -> receiver: a transmission starts (what it plans, what is mandatory, its deadline)."""

    tid: int  # transmission id, strictly increasing per sender on one connection
    direction: int  # Direction
    iteration: int
    planned: int  # frames the sender plans to send
    mandatory: int  # the first `mandatory` frames are sent whatever the deadline
    deadline_s: float | None  # from the start of the transmission; None = no deadline
    more: bool = False  # more transmissions of this iteration follow (a layer-segmented push or pull)
    TYPE: ClassVar[int] = 16
    _S: ClassVar[struct.Struct] = struct.Struct("<IBIIIQ")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        for name in ("tid", "iteration", "planned", "mandatory"):
            _check_u32(name, getattr(self, name))
        flags = self.direction | (_MORE_FLAG if self.more else 0)
        return self._S.pack(
            self.tid, flags, self.iteration, self.planned, self.mandatory, _s_to_us(self.deadline_s, _NONE_U64)
        )

    @classmethod
    def unpack_body(cls, body: bytes) -> "Begin":
        tid, flags, iteration, planned, mandatory, deadline_us = _fixed(cls._S, body, "Begin")
        direction, more = flags & ~_MORE_FLAG, bool(flags & _MORE_FLAG)
        if direction not in (Direction.PUSH, Direction.PULL):
            raise ProtocolError(f"Begin carries unknown direction {direction}")
        if mandatory > planned:
            raise ProtocolError(f"Begin says {mandatory} mandatory frames of {planned} planned")
        return cls(tid, direction, iteration, planned, mandatory, _us_to_s(deadline_us, _NONE_U64), more)


PIECE_HEADER = struct.Struct("<IIII")  # tid, seq, offset, frame_len
PIECE_OVERHEAD = ENVELOPE_BYTES + PIECE_HEADER.size  # 28 bytes per piece on the wire


@register
@dataclass(frozen=True)
class Piece(Message):
    """Sender -> receiver: bytes ``[offset, offset + len(data))`` of frame ``seq`` (``frame_len`` bytes)."""

    tid: int
    seq: int
    offset: int
    frame_len: int
    data: bytes
    TYPE: ClassVar[int] = 17
    MAX_BODY: ClassVar[int] = PIECE_HEADER.size + MAX_PIECE_DATA

    def pack_body(self) -> bytes:
        return PIECE_HEADER.pack(self.tid, self.seq, self.offset, self.frame_len) + bytes(self.data)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Piece":
        if len(body) <= PIECE_HEADER.size:
            raise ProtocolError(f"Piece body is {len(body)} bytes; it needs a header and at least one data byte")
        tid, seq, offset, frame_len = PIECE_HEADER.unpack_from(body)
        data = body[PIECE_HEADER.size :]
        if offset + len(data) > frame_len:
            raise ProtocolError(f"Piece covers [{offset}, {offset + len(data)}) of a {frame_len}-byte frame")
        return cls(tid, seq, offset, frame_len, bytes(data))


def encode_piece(tid: int, seq: int, offset: int, frame_len: int, data: bytes, version: int = PROTOCOL_VERSION) -> bytes:
    """Fast path for :class:`Piece` (the one message sent in bulk)."""
    return (
        ENVELOPE.pack(MAGIC, version, Piece.TYPE, 0, PIECE_HEADER.size + len(data))
        + PIECE_HEADER.pack(tid, seq, offset, frame_len)
        + data
    )


@register
@dataclass(frozen=True)
class End(Message):
    """Sender -> receiver: the transmission is over; ``frames_sent`` complete frames were written."""

    tid: int
    frames_sent: int
    digest: int  # crc32 over the concatenated frames written
    cut: bool  # the deadline stopped it before every planned frame was sent
    TYPE: ClassVar[int] = 18
    _S: ClassVar[struct.Struct] = struct.Struct("<IIIB")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.tid, self.frames_sent, self.digest, int(self.cut))

    @classmethod
    def unpack_body(cls, body: bytes) -> "End":
        tid, n, digest, cut = _fixed(cls._S, body, "End")
        return cls(tid, n, digest, bool(cut))


@register
@dataclass(frozen=True)
class Ack(Message):
    """Receiver -> sender: the delivered set (the first ``delivered`` frames) and its digest.

    ``rx_mandatory_s`` / ``rx_last_s``: receiver-side times from the arrival of :class:`Begin`
    to the last mandatory frame complete and to the last data byte (None = did not happen).
    """

    tid: int
    delivered: int
    digest: int  # crc32 over the concatenated delivered frames
    status: int  # AckStatus
    rx_mandatory_s: float | None
    rx_last_s: float | None
    TYPE: ClassVar[int] = 19
    _S: ClassVar[struct.Struct] = struct.Struct("<IIIBII")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(
            self.tid,
            self.delivered,
            self.digest,
            self.status,
            _s_to_us(self.rx_mandatory_s, _NONE_U32),
            _s_to_us(self.rx_last_s, _NONE_U32),
        )

    @classmethod
    def unpack_body(cls, body: bytes) -> "Ack":
        tid, n, digest, status, m_us, l_us = _fixed(cls._S, body, "Ack")
        return cls(tid, n, digest, status, _us_to_s(m_us, _NONE_U32), _us_to_s(l_us, _NONE_U32))


# ----------------------------------------------------------------------------- push/pull cycle
@register
@dataclass(frozen=True)
class PullRequest(Message):
    """Worker -> PS: I pushed ``iteration``; send me my pull when the staleness gate allows."""

    iteration: int
    TYPE: ClassVar[int] = 32
    _S: ClassVar[struct.Struct] = struct.Struct("<I")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.iteration)

    @classmethod
    def unpack_body(cls, body: bytes) -> "PullRequest":
        return cls(*_fixed(cls._S, body, "PullRequest"))


@register
@dataclass(frozen=True, eq=False)  # holds an array: compare fields, not objects
class PullReply(Message):
    """PS -> worker, with a pull: the budget of the next push, a suggested compute sleep, rows the PS needs."""

    iteration: int
    budget_s: float | None  # deadline of the worker's next push; None = no deadline
    sleep_s: float  # compute homogenisation: suggested sleep before the next iteration
    required_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    TYPE: ClassVar[int] = 33
    _S: ClassVar[struct.Struct] = struct.Struct("<IQII")
    MAX_BODY: ClassVar[int] = _S.size + 4 * MAX_ROW_IDS

    def pack_body(self) -> bytes:
        rows = np.asarray(self.required_rows, dtype=np.int64)
        if rows.size > MAX_ROW_IDS:
            raise ValueError(f"required_rows lists {rows.size} rows, bound {MAX_ROW_IDS}")
        if rows.size and (rows.min() < 0 or rows.max() > _NONE_U32):
            raise ValueError("required_rows must be non-negative 32-bit row ids")
        head = self._S.pack(
            self.iteration, _s_to_us(self.budget_s, _NONE_U64), _s_to_us(self.sleep_s, _NONE_U32), rows.size
        )
        return head + rows.astype("<u4").tobytes()

    @classmethod
    def unpack_body(cls, body: bytes) -> "PullReply":
        if len(body) < cls._S.size:
            raise ProtocolError(f"PullReply body is {len(body)} bytes, header needs {cls._S.size}")
        iteration, budget_us, sleep_us, n = cls._S.unpack_from(body)
        if len(body) != cls._S.size + 4 * n:
            raise ProtocolError(f"PullReply announces {n} row ids but carries {len(body) - cls._S.size} bytes")
        rows = np.frombuffer(body, dtype="<u4", count=n, offset=cls._S.size).astype(np.int64)
        sleep_s = _us_to_s(sleep_us, _NONE_U32) or 0.0
        return cls(iteration, _us_to_s(budget_us, _NONE_U64), sleep_s, rows)


@register
@dataclass(frozen=True)
class Error(Message):
    """Either end: something went wrong; a code and a readable text."""

    code: int
    text: str
    TYPE: ClassVar[int] = 48
    _S: ClassVar[struct.Struct] = struct.Struct("<H")
    MAX_BODY: ClassVar[int] = 2 + MAX_TEXT_BYTES

    def pack_body(self) -> bytes:
        return self._S.pack(self.code & 0xFFFF) + _pack_text(self.text)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Error":
        if len(body) < 2:
            raise ProtocolError("Error body is shorter than its code")
        return cls(cls._S.unpack_from(body)[0], _unpack_text(body[2:]))


@register
@dataclass(frozen=True)
class Bye(Message):
    """Either end: orderly close, with a reason."""

    text: str = ""
    TYPE: ClassVar[int] = 49
    MAX_BODY: ClassVar[int] = MAX_TEXT_BYTES

    def pack_body(self) -> bytes:
        return _pack_text(self.text)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Bye":
        return cls(_unpack_text(body))


# ----------------------------------------------------------------------------- parsing
class MessageParser:
    """Incremental parser: bytes in, messages out; every bound is checked before buffering a body.

    ``version`` is the protocol version this end speaks; with ``handshake=True`` the
    version-stable handshake messages are also accepted from a peer of another version (so the
    handshake can say *why* it refuses).  After a :class:`ProtocolError` the stream is out of
    step and the parser refuses all further input.
    """

    def __init__(self, version: int = PROTOCOL_VERSION, handshake: bool = False) -> None:
        self.version = version
        self.handshake = handshake
        self._buf = bytearray()
        self._pos = 0
        self._need: tuple[type[Message], int] | None = None  # type and body length of the message in progress
        self.broken: str | None = None

    def feed(self, data: bytes) -> list[Message]:
        """Add received bytes; return the messages they complete (in order)."""
        if self.broken is not None:
            raise ProtocolError(f"stream already broken: {self.broken}")
        self._buf += data
        out: list[Message] = []
        try:
            while True:
                if self._need is None:
                    if len(self._buf) - self._pos < ENVELOPE_BYTES:
                        break
                    self._need = self._envelope()
                cls, n = self._need
                if len(self._buf) - self._pos < ENVELOPE_BYTES + n:
                    break
                start = self._pos + ENVELOPE_BYTES
                body = bytes(self._buf[start : start + n])
                self._pos = start + n
                self._need = None
                out.append(cls.unpack_body(body))
        except ProtocolError as e:
            self.broken = str(e)
            raise
        except (struct.error, ValueError) as e:  # a body a type could not read: never crash the reader
            self.broken = f"malformed message body: {e}"
            raise ProtocolError(self.broken) from None
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        return out

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete message."""
        return len(self._buf) - self._pos

    def _envelope(self) -> tuple[type[Message], int]:
        magic, version, mtype, flags, body_len = ENVELOPE.unpack_from(self._buf, self._pos)
        if magic != MAGIC:
            raise ProtocolError(f"not a ROG transport stream: bad magic {bytes(magic)!r} (expected {MAGIC!r})")
        cls = MESSAGE_TYPES.get(mtype)
        if cls is None:
            raise ProtocolError(f"unknown message type {mtype}")
        if version != self.version and not (self.handshake and cls.STABLE):
            raise ProtocolError(f"peer speaks protocol version {version}, this end speaks {self.version}")
        if flags != 0:
            raise ProtocolError(f"unknown envelope flags 0x{flags:04x}")
        if body_len > cls.MAX_BODY:
            raise ProtocolError(f"{cls.__name__} of {body_len} bytes exceeds its bound {cls.MAX_BODY}")
        return cls, body_len
