"""Control messages: small typed binary messages inside one fixed envelope.

Every byte on a transport connection belongs to a message::

    envelope 12 bytes  magic "RGMS", version u8, type u8, flags u16 (0), body_len u32
    body     body_len bytes, laid out by the message type (struct, little-endian)

A parser checks the magic, the version, the type and the body length against the type's bound
*before* it buffers the body, and never runs code from the bytes (no pickle, no eval).  The
chunk frames of :mod:`rog.wire` travel inside :class:`Piece` messages, cut into small pieces so
a sender can check its deadline between pieces and stop without desynchronising the stream.

Types live in :data:`MESSAGE_TYPES`; add one with the :func:`register` decorator: a frozen
dataclass with a ``TYPE`` and its wire layout declared as ``FIELDS`` (:mod:`rog.transport.fields`
generates ``MAX_BODY``, ``pack_body``, ``unpack_body`` and their checks from it).  The envelope and
the layouts of :class:`Hello`, :class:`Challenge` and :class:`Refuse` are frozen across protocol
versions, so two ends of different versions can still tell each other why they disagree.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from .errors import HandshakeError, LinkClosed, ProtocolError, TransportError, TransportTimeout  # noqa: F401
from .fields import MAX_TEXT_BYTES, Array, Data, Field, Flag, Message, Micros, Raw, Text, U  # noqa: F401

MAGIC = b"RGMS"
PROTOCOL_VERSION = 2  # 2: Join, JoinReply and Rejoin carry the starting model's digest; ModelPiece (the initial model handed out)
ENVELOPE = struct.Struct("<4sBBHI")
ENVELOPE_BYTES = ENVELOPE.size  # 12
NONCE_BYTES = 16
PROOF_BYTES = 32  # HMAC-SHA256
MAX_PIECE_DATA = 1 << 20  # bytes of frame data one Piece may carry
MAX_FRAME_BYTES = (1 << 32) - 1  # a frame length must fit the u32 field
MAX_ROW_IDS = 1 << 21  # row ids one PullReply may list (ConvMLP-M has 33,307 rows)


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


def encode_message(msg: Message, version: int = PROTOCOL_VERSION) -> bytes:
    """Envelope + body of one message."""
    body = msg.pack_body()
    if len(body) > msg.MAX_BODY:
        raise ValueError(f"{type(msg).__name__} body is {len(body)} bytes, bound {msg.MAX_BODY}")
    return ENVELOPE.pack(MAGIC, version, msg.TYPE, 0, len(body)) + body


# ----------------------------------------------------------------------------- handshake
@register
@dataclass(frozen=True)
class Hello(Message):
    """Worker -> PS, first message: protocol version, role, worker id, the worker's nonce."""

    version: int
    role: int
    worker_id: int
    nonce: bytes
    TYPE, STABLE = 1, True
    FIELDS = (U("version", "H"), U("role", "B"), U("worker_id", "I"), Raw("nonce", NONCE_BYTES))


@register
@dataclass(frozen=True)
class Challenge(Message):
    """PS -> worker: the PS's protocol version and nonce."""

    version: int
    nonce: bytes
    TYPE, STABLE = 2, True
    FIELDS = (U("version", "H"), Raw("nonce", NONCE_BYTES))


@register
@dataclass(frozen=True)
class Auth(Message):
    """Worker -> PS: HMAC-SHA256 proof that the worker holds the shared secret."""

    proof: bytes
    TYPE = 3
    FIELDS = (Raw("proof", PROOF_BYTES),)


@register
@dataclass(frozen=True)
class Welcome(Message):
    """PS -> worker: the PS's own HMAC proof; the connection is established."""

    proof: bytes
    TYPE = 4
    FIELDS = (Raw("proof", PROOF_BYTES),)


@register
@dataclass(frozen=True)
class Refuse(Message):
    """Either end: the handshake is refused, with a reason code and a readable text."""

    reason: int
    text: str
    TYPE, STABLE = 5, True
    FIELDS = (U("reason", "B", mask=True), Text("text"))


# ----------------------------------------------------------------------------- transmissions
_MORE_FLAG = 0x80  # high bit of Begin's direction byte: more transmissions of its iteration follow


class _DirectionByte(Field):
    """Begin's direction, with :data:`_MORE_FLAG` set when more transmissions of its iteration follow."""

    def to_wire(self, msg: "Begin") -> int:
        return msg.direction | (_MORE_FLAG if msg.more else 0)

    def from_wire(self, raw: int, kw: dict, where: str) -> None:
        direction = raw & ~_MORE_FLAG
        if direction not in (Direction.PUSH, Direction.PULL):
            raise ProtocolError(f"{where} carries unknown direction {direction}")
        kw["direction"], kw["more"] = direction, bool(raw & _MORE_FLAG)


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
    TYPE = 16
    FIELDS = (U("tid", "I"), _DirectionByte("direction", "B"), U("iteration", "I"), U("planned", "I"),
              U("mandatory", "I"), Micros("deadline_s", "Q"))

    def check(self) -> None:
        if self.mandatory > self.planned:
            raise ProtocolError(f"Begin says {self.mandatory} mandatory frames of {self.planned} planned")


@register
@dataclass(frozen=True)
class Piece(Message):
    """Sender -> receiver: bytes ``[offset, offset + len(data))`` of frame ``seq`` (``frame_len`` bytes)."""

    tid: int
    seq: int
    offset: int
    frame_len: int
    data: bytes
    TYPE = 17
    FIELDS = (U("tid", "I"), U("seq", "I"), U("offset", "I"), U("frame_len", "I"), Data("data", MAX_PIECE_DATA, 1))

    def check(self) -> None:
        if self.offset + len(self.data) > self.frame_len:
            raise ProtocolError(f"Piece covers [{self.offset}, {self.offset + len(self.data)}) of a "
                                f"{self.frame_len}-byte frame")


PIECE_HEADER = Piece._S  # tid, seq, offset, frame_len
PIECE_OVERHEAD = ENVELOPE_BYTES + PIECE_HEADER.size  # 28 bytes per piece on the wire


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
    TYPE = 18
    FIELDS = (U("tid", "I"), U("frames_sent", "I"), U("digest", "I"), Flag("cut", strict=False))


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
    TYPE = 19
    FIELDS = (U("tid", "I"), U("delivered", "I"), U("digest", "I"), U("status", "B"), Micros("rx_mandatory_s", "I"),
              Micros("rx_last_s", "I"))


# ----------------------------------------------------------------------------- push/pull cycle
@register
@dataclass(frozen=True)
class PullRequest(Message):
    """Worker -> PS: I pushed ``iteration``; send me my pull when the staleness gate allows."""

    iteration: int
    TYPE = 32
    FIELDS = (U("iteration", "I"),)


@register
@dataclass(frozen=True, eq=False)  # holds an array: compare fields, not objects
class PullReply(Message):
    """PS -> worker, with a pull: the budget of the next push, a suggested compute sleep, rows the PS needs."""

    iteration: int
    budget_s: float | None  # deadline of the worker's next push; None = no deadline
    sleep_s: float  # compute homogenisation: suggested sleep before the next iteration
    required_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    TYPE = 33
    FIELDS = (U("iteration", "I"), Micros("budget_s", "Q"), Micros("sleep_s", "I", none_as=0.0),
              Array("required_rows", "I", MAX_ROW_IDS, "row ids", numpy=True))


@register
@dataclass(frozen=True)
class Error(Message):
    """Either end: something went wrong; a code and a readable text."""

    code: int
    text: str
    TYPE = 48
    FIELDS = (U("code", "H", mask=True), Text("text"))


@register
@dataclass(frozen=True)
class Bye(Message):
    """Either end: orderly close, with a reason."""

    text: str = ""
    TYPE = 49
    FIELDS = (Text("text"),)


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
