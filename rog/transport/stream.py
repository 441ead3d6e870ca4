"""Speculative transmissions with deadlines that hold (docs/design.md#transport-deadlines).

A transmission is ``Begin``, the frames cut into ``Piece`` messages, ``End``; the receiver
answers with an ``Ack`` naming the delivered set.  Rules:

* Frames go in order; the first ``mandatory`` frames are always sent.  After them, the sender
  checks the deadline before every piece (never per row) and stops at the first piece it cannot
  start by the deadline (or whose rate-limiter tokens are not there by then); the frame in
  flight is dropped.  Frames are produced lazily: one never sent is never encoded.
* The receiver applies only complete frames that pass every check (length bound before
  allocation, checksum, the model's partition and codec via :class:`WireFrames`, the
  transmission's iteration, ``seq`` equal to the frame's position).  The first frame that fails
  ends application for the rest of the transmission, so the delivered set is always a prefix:
  the first ``delivered`` frames.  A duplicated, reordered or replayed frame is never applied.
* The receiver acknowledges ``delivered`` and a digest (crc32 of the delivered frames,
  concatenated); the sender checks the digest against what it sent and both ends commit
  exactly those frames.
* A transmission that delivered fewer than its ``mandatory`` frames (a frame was rejected) leaves
  its iteration open: the sender may retransmit the missing frames in a new transmission (new id,
  same iteration).  So does one whose Begin says ``more`` (a layer-segmented push or pull: one
  transmission per segment).  Any other transmission closes its iteration (a later one of it is STALE).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from ..chunks import ChunkSpec
from ..codecs.compression import Codec, EncodedChunk
from ..rows import RowPartition
from ..wire import HEADER_BYTES, SEGMENT_BYTES, ChunkHeader, FrameError, decode_frame, encode_frame
from .messages import (
    MAX_FRAME_BYTES,
    Ack,
    AckStatus,
    Begin,
    Bye,
    End,
    Error,
    LinkClosed,
    Piece,
    ProtocolError,
    TransportError,
    encode_piece,
)

if TYPE_CHECKING:  # the connection calls these functions: an import at run time would close a cycle
    from .connection import Connection

FrameProducer = Callable[[int], bytes]


@dataclass(frozen=True)
class SendResult:
    """What one sent transmission measured (times in seconds from its start, sender's clock)."""

    tid: int
    iteration: int
    planned: int  # frames planned
    mandatory: int  # frames that had to go
    encoded: int  # frames the producer was asked for (the rest were never encoded)
    sent: int  # frames written completely
    delivered: int  # frames the receiver acknowledged: commit exactly these (the first `delivered`)
    bytes_delivered: int  # frame bytes of the delivered frames
    wire_bytes: int  # every byte written for this transmission (envelopes, pieces of a dropped frame)
    mandatory_s: float | None  # the mandatory frames were written (None: nothing mandatory)
    send_s: float  # the last byte was written (End)
    duration_s: float  # the acknowledgement arrived
    cut: bool  # the deadline stopped it before every planned frame was sent
    status: AckStatus  # the receiver's verdict
    rx_mandatory_s: float | None  # receiver: from Begin's arrival to the last mandatory frame
    rx_last_s: float | None  # receiver: from Begin's arrival to the last data byte
    started_at: float  # clock time the transmission started (the deadline counts from here)


@dataclass(frozen=True)
class RecvResult:
    """What one received transmission delivered (clock times of this end)."""

    begin: Begin
    frames: list  # the validator's output for each delivered frame, in order
    delivered: int
    digest: int
    bytes_delivered: int
    status: AckStatus
    reason: str | None  # why frames were not applied (None if status is OK)
    cut: bool  # the sender reports its deadline stopped it
    frames_sent: int  # frames the sender says it wrote completely
    begin_at: float  # Begin arrived
    mandatory_at: float | None  # the last mandatory frame was complete
    last_byte_at: float | None  # the last data byte arrived
    end_at: float  # End arrived


class WireFrames:
    """Validator for :mod:`rog.wire` chunk frames of one model and codec: ``(header, chunk)`` or FrameError."""

    def __init__(self, partition: RowPartition, codec: Codec) -> None:
        self.partition = partition
        self.codec = codec
        self.max_frame_bytes = HEADER_BYTES + partition.n_rows * SEGMENT_BYTES + partition.n_elements * 4

    def __call__(self, frame: bytes, iteration: int, seq: int) -> tuple[ChunkHeader, EncodedChunk]:
        header, chunk = decode_frame(frame, self.partition, self.codec)
        if header.iteration != iteration & 0xFFFFFFFF:
            raise FrameError(f"frame of iteration {header.iteration} inside a transmission of iteration {iteration}")
        if header.seq != seq:
            raise FrameError(f"frame seq {header.seq} at position {seq}")
        return header, chunk


class LazyFrames:
    """Frame producer for a chunk plan: encodes chunk ``i`` only when the transport asks for frame ``i``.

    ``encoded`` keeps the chunks produced, so the sender can commit exactly the delivered ones
    (:meth:`commit`) without encoding twice.
    """

    def __init__(
        self,
        partition: RowPartition,
        codec: Codec,
        acc: np.ndarray,
        scales: np.ndarray,
        chunks: Sequence[ChunkSpec],
        iteration: int,
    ) -> None:
        self.partition, self.codec, self.acc, self.scales = partition, codec, acc, scales
        self.chunks = chunks
        self.iteration = iteration
        self.encoded: list[EncodedChunk] = []

    def __len__(self) -> int:
        return len(self.chunks)

    def __call__(self, i: int) -> bytes:
        if i != len(self.encoded):
            raise ValueError(f"frames are produced in order: asked for {i}, next is {len(self.encoded)}")
        chunk = self.codec.encode(self.partition, self.acc, self.scales, self.chunks[i])
        self.encoded.append(chunk)
        return encode_frame(chunk, self.codec, self.iteration, i)

    def commit(self, delivered: int) -> None:
        """Remove the first ``delivered`` chunks from the accumulator (error feedback keeps the rest)."""
        if delivered > len(self.encoded):
            raise ValueError(f"delivered={delivered} but only {len(self.encoded)} frames were encoded")
        for chunk in self.encoded[:delivered]:
            self.codec.commit(self.partition, self.acc, chunk)


def _producer(frames: Iterable[bytes] | FrameProducer, n_frames: int) -> FrameProducer:
    if callable(frames):
        return frames
    it = iter(frames)

    def take(i: int) -> bytes:
        try:
            return next(it)
        except StopIteration:
            raise ValueError(f"frames ran out after {i} of n_frames={n_frames}") from None

    return take


def send_transmission(
    conn: Connection,
    frames: Iterable[bytes] | FrameProducer,
    *,
    n_frames: int,
    iteration: int,
    mandatory: int,
    deadline_s: float | None,
    more: bool = False,
) -> SendResult:
    """Send up to ``n_frames`` frames; the first ``mandatory`` always, the rest until ``deadline_s``.

    ``frames`` is an iterable of encoded frames or a callable ``i -> frame`` (called in order,
    only for frames about to be sent).  Returns once the receiver acknowledged; commit exactly
    ``result.delivered`` frames.  If it raises (producer error, broken connection, no ack in
    ``io_timeout_s``), the connection is aborted and nothing should be committed.  Transmissions
    on one connection take turns: do not send while the peer is sending.  ``more``: further
    transmissions of ``iteration`` follow (the receiver keeps the iteration open).  With
    ``config.link_delay_s`` the Begin leaves that long after the start (an emulated per-transfer latency,
    counted in ``duration_s`` and against the deadline).
    """
    if n_frames < 0 or n_frames > 0xFFFFFFFF:
        raise ValueError(f"n_frames must lie in [0, 2^32), got {n_frames}")
    if not 0 <= mandatory <= n_frames:
        raise ValueError(f"mandatory={mandatory} outside [0, n_frames={n_frames}]")
    if deadline_s is not None and not deadline_s >= 0:
        raise ValueError(f"deadline_s must be >= 0 or None, got {deadline_s}")
    if not 0 <= iteration <= 0xFFFFFFFF:
        raise ValueError(f"iteration must fit 32 bits, got {iteration}")
    produce = _producer(frames, n_frames)
    try:
        return _send(conn, produce, n_frames, iteration, mandatory, deadline_s, more)
    except BaseException:
        conn.abort()  # the receiver sees the stream end and discards the transmission: nothing delivered
        raise


def _send(conn: Connection, produce: FrameProducer, n_frames: int, iteration: int, mandatory: int, deadline_s,
          more: bool = False):
    clock, piece, version = conn.clock, conn.config.piece_bytes, conn.version
    tid = conn.take_tid()
    t0 = clock.now()
    due = None if deadline_s is None else t0 + deadline_s
    if conn.config.link_delay_s > 0:
        clock.sleep(conn.config.link_delay_s)
    wire = conn.bytes_written
    conn.send(Begin(tid, conn.send_direction, iteration, n_frames, mandatory, deadline_s, more))
    digests = [0]
    sizes = [0]  # cumulative frame bytes
    mandatory_at = t0 if mandatory == 0 else None
    encoded = 0
    cut = False
    for i in range(n_frames):
        until = None if i < mandatory else due
        if until is not None and clock.now() >= until:
            cut = True
            break
        frame = produce(i)
        encoded += 1
        if not isinstance(frame, (bytes, bytearray, memoryview)) or not 0 < len(frame) <= MAX_FRAME_BYTES:
            raise ValueError(f"frame {i} must be non-empty bytes of at most {MAX_FRAME_BYTES}")
        frame = bytes(frame)
        n = len(frame)
        complete = True
        for off in range(0, n, piece):
            if until is not None and clock.now() >= until:
                complete = False
                break
            if not conn.write_raw(encode_piece(tid, i, off, n, frame[off : off + piece], version), until):
                complete = False
                break
        if not complete:
            cut = True
            break
        digests.append(zlib.crc32(frame, digests[-1]))
        sizes.append(sizes[-1] + n)
        if i + 1 == mandatory:
            mandatory_at = clock.now()
    sent = len(digests) - 1
    conn.send(End(tid, sent, digests[-1], cut))
    t_end = clock.now()
    wire = conn.bytes_written - wire
    ack, t_ack = conn.await_ack(tid, conn.config.io_timeout_s)
    if ack.delivered > sent:
        raise ProtocolError(f"receiver acknowledged {ack.delivered} frames of transmission {tid}; {sent} were sent")
    if ack.digest != digests[ack.delivered]:
        raise ProtocolError(f"acknowledged digest of transmission {tid} does not match the first {ack.delivered} frames sent")
    try:
        status = AckStatus(ack.status)
    except ValueError:
        raise ProtocolError(f"unknown acknowledgement status {ack.status}") from None
    return SendResult(
        tid=tid,
        iteration=iteration,
        planned=n_frames,
        mandatory=mandatory,
        encoded=encoded,
        sent=sent,
        delivered=ack.delivered,
        bytes_delivered=sizes[ack.delivered],
        wire_bytes=wire,
        mandatory_s=None if mandatory == 0 else (None if mandatory_at is None else mandatory_at - t0),
        send_s=t_end - t0,
        duration_s=t_ack - t0,
        cut=cut,
        status=status,
        rx_mandatory_s=ack.rx_mandatory_s,
        rx_last_s=ack.rx_last_s,
        started_at=t0,
    )


def receive_transmission(
    conn: Connection,
    begin: Begin,
    validator: Callable[[bytes, int, int], Any],
    on_frame: Callable[[Any], None] | None = None,
    begin_at: float | None = None,
) -> RecvResult:
    """Receive the transmission ``begin`` announced (``begin`` as returned by ``conn.recv()``).

    ``validator(frame, iteration, seq)`` checks and decodes one complete frame (raise
    :class:`rog.wire.FrameError` / ValueError to reject it); e.g. :class:`WireFrames`.  Its
    results are returned in ``frames`` and, if given, passed to ``on_frame`` as each frame is
    accepted; they are provisional until this function returns (it returns after the Ack is
    written; if it raises, the transmission delivered nothing and the sender commits nothing).
    ``begin_at`` is when ``begin`` arrived (default: its arrival if ``conn.recv`` just returned
    it, else now).  A stream that breaks the protocol mid-transmission gets an Error message, the
    connection is closed and ProtocolError raised.
    """
    clock = conn.clock
    if begin_at is None:
        begin_at = conn.last_message_at if conn.last_message is begin else clock.now()
    try:
        return _receive(conn, begin, validator, on_frame, begin_at)
    except ProtocolError as e:
        try:
            conn.send(Error(1, f"protocol error: {e}"))
        except (TransportError, OSError):
            pass
        conn.abort()
        raise


def _receive(conn: Connection, begin: Begin, validator, on_frame, t_begin: float) -> RecvResult:
    max_frame = min(conn.config.max_frame_bytes, getattr(validator, "max_frame_bytes", MAX_FRAME_BYTES))
    status, reason = AckStatus.OK, None

    def reject(st: AckStatus, why: str) -> None:
        nonlocal status, reason
        if status == AckStatus.OK:
            status, reason = st, why

    if begin.direction != conn.receive_direction:
        reject(AckStatus.WRONG_DIRECTION, f"a {conn.role.name} end does not receive direction {begin.direction}")
    elif begin.tid <= conn.last_rx_tid:
        reject(AckStatus.REPLAYED, f"transmission id {begin.tid} is not newer than {conn.last_rx_tid}")
    elif begin.iteration <= conn.last_rx_iteration:
        reject(AckStatus.STALE, f"iteration {begin.iteration} is not newer than {conn.last_rx_iteration}")
    conn.last_rx_tid = max(conn.last_rx_tid, begin.tid)

    out: list = []
    digest = 0
    nbytes = 0
    buf: bytearray | None = None  # the frame being reassembled
    filled = 0
    mandatory_at = t_begin if begin.mandatory == 0 else None
    last_byte_at = None
    while True:
        msg, t = conn.recv_timed(conn.config.io_timeout_s)
        if isinstance(msg, Piece):
            if msg.tid != begin.tid:
                raise ProtocolError(f"piece of transmission {msg.tid} inside transmission {begin.tid}")
            last_byte_at = t
            if status != AckStatus.OK:
                continue  # keep reading to stay in step; apply nothing more
            seq = len(out)
            if msg.offset == 0:
                if buf is not None:
                    reject(AckStatus.BAD_SEQUENCE, f"frame {seq} restarted before it was complete")
                    continue
                if msg.seq != seq:
                    reject(AckStatus.BAD_SEQUENCE, f"frame seq {msg.seq} where {seq} was due (duplicate or reordered)")
                    continue
                if seq >= begin.planned:
                    reject(AckStatus.TOO_MANY, f"more than the {begin.planned} frames announced")
                    continue
                if msg.frame_len > max_frame:
                    reject(AckStatus.OVERSIZE, f"frame of {msg.frame_len} bytes exceeds the bound {max_frame}")
                    continue
                buf, filled = bytearray(msg.frame_len), 0
            elif buf is None or msg.seq != seq or msg.offset != filled or msg.frame_len != len(buf):
                reject(AckStatus.BAD_SEQUENCE, f"piece [{msg.offset}, +{len(msg.data)}) of frame {msg.seq} does not continue frame {seq}")
                continue
            buf[filled : filled + len(msg.data)] = msg.data
            filled += len(msg.data)
            if filled < len(buf):
                continue
            frame = bytes(buf)
            buf = None
            try:
                value = validator(frame, begin.iteration, seq)
            except Exception as e:  # noqa: BLE001 - any failure rejects the frame and keeps the stream in step
                reject(AckStatus.BAD_FRAME, f"frame {seq}: {type(e).__name__}: {e}")
                continue
            out.append(value)
            digest = zlib.crc32(frame, digest)
            nbytes += len(frame)
            if len(out) == begin.mandatory:
                mandatory_at = t
            if on_frame is not None:
                on_frame(value)
        elif isinstance(msg, End):
            if msg.tid != begin.tid:
                raise ProtocolError(f"end of transmission {msg.tid} inside transmission {begin.tid}")
            end_at = t
            break
        elif isinstance(msg, Bye):
            raise LinkClosed(f"peer said bye inside transmission {begin.tid}: {msg.text}")
        elif isinstance(msg, Error):
            raise TransportError(f"peer reported error {msg.code} inside transmission {begin.tid}: {msg.text}")
        else:
            raise ProtocolError(f"{type(msg).__name__} inside transmission {begin.tid}")
    if not begin.more and (status == AckStatus.OK or len(out) >= max(1, begin.mandatory)):
        conn.last_rx_iteration = max(conn.last_rx_iteration, begin.iteration)  # else its iteration stays open for a retry
    rel = lambda t: None if t is None else max(0.0, t - t_begin)  # noqa: E731
    conn.send(Ack(begin.tid, len(out), digest, int(status), rel(mandatory_at), rel(last_byte_at)))
    return RecvResult(
        begin=begin,
        frames=out,
        delivered=len(out),
        digest=digest,
        bytes_delivered=nbytes,
        status=status,
        reason=reason,
        cut=msg.cut,
        frames_sent=msg.frames_sent,
        begin_at=t_begin,
        mandatory_at=mandatory_at,
        last_byte_at=last_byte_at,
        end_at=end_at,
    )
