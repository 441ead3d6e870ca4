"""Byte-level fuzzing of the wire format, the message parser and received transmissions.

Three targets, each driven by hypothesis with an oracle computed independently of the decoder:

* **frames** (:mod:`rog.wire`): a valid chunk frame is truncated, extended, bit-flipped, given a
  huge length field, spliced, or rewritten by a forger who also recomputes the checksum (reordered
  or duplicated segment entries).  Oracle: an unforged frame that differs from the original must
  raise :class:`~rog.wire.FrameError` (crc32 detects every error of up to 3 bits and every burst of
  up to 32 bits in frames this size); a forged one is either rejected or decodes to a chunk that
  names each row once, inside the model, and writes only those rows.  No other exception.
* **parser** (:class:`~rog.transport.messages.MessageParser`): a stream of every message type,
  mutated the same way and fed in random slices.  Oracle: the unmutated stream round-trips;
  otherwise only :class:`ProtocolError`; bytes buffered never exceed one envelope plus the
  largest body bound.
* **transmissions** (:func:`~rog.transport.stream.receive_transmission` on an in-process pair):
  a transmission's messages are duplicated, dropped, swapped, bit-flipped, given a foreign
  transmission id or a huge frame length, truncated, or replayed.  Oracle: the receiver returns
  or raises a :class:`TransportError`; the frames it delivers are exactly a prefix of the frames
  sent (so never a damaged, duplicated or reordered frame), with a matching digest.

Peak memory is measured with :mod:`tracemalloc` for every case and compared with a bound derived
from the frame limits (the model's largest frame, the largest message body).
"""

from __future__ import annotations

import struct
import time
import tracemalloc
import zlib
from dataclasses import dataclass

import numpy as np

from rog.chunks import plan_chunks
from rog.codecs.compression import RawCodec, SignCodec
from rog.rows import RowPartition
from rog.transport import inproc_pair
from rog.transport.config import TransportConfig
from rog.transport.messages import (
    ENVELOPE_BYTES,
    MESSAGE_TYPES,
    NONCE_BYTES,
    PROOF_BYTES,
    Ack,
    Auth,
    Begin,
    Bye,
    Challenge,
    Direction,
    End,
    Error,
    Hello,
    MessageParser,
    Piece,
    ProtocolError,
    PullReply,
    PullRequest,
    Refuse,
    TransportError,
    Welcome,
    encode_message,
    encode_piece,
)
from rog.transport.stream import WireFrames, receive_transmission
from rog.wire import HEADER, HEADER_BYTES, SEGMENT_BYTES, FrameError, decode_frame, encode_frame
from .conservation import lost_rows
from .registry import ScenarioContext, result

# the runtime's own messages travel on the same connections: fuzz them too
from rog.runtime import messages as _runtime_messages  # noqa: F401  (registers Join, PullStart, ...)

PARTITION = RowPartition.from_shapes([("a", (20, 50)), ("b", (50,)), ("c", (25, 40)), ("d", (7,)), ("e", (3, 400))])
CODECS = {"raw": RawCodec(), "sign": SignCodec()}
CHUNK_BYTES = {"raw": 600, "sign": 48}  # small chunks: many frames, several segments each
MAX_FRAME_BYTES = HEADER_BYTES + PARTITION.n_rows * SEGMENT_BYTES + PARTITION.n_elements * 4  # WireFrames' bound
MAX_BODY_BYTES = max(cls.MAX_BODY for cls in MESSAGE_TYPES.values())
# memory bounds (bytes above what the case's input already holds), derived from the limits above
FRAME_PEAK_BOUND = 3 * MAX_FRAME_BYTES + 64 * 1024
PARSER_PEAK_BOUND = 3 * (ENVELOPE_BYTES + MAX_BODY_BYTES) + 64 * 1024
RECV_PEAK_BOUND = 4 * MAX_FRAME_BYTES + 256 * 1024


class FuzzViolation(AssertionError):
    """The code under fuzzing broke its contract (crash, wrong acceptance, unbounded memory)."""


@dataclass
class Sample:
    """Encoded frames of one push: frame bytes, and the chunks they carry."""

    codec: str
    iteration: int
    frames: list[bytes]
    chunks: list  # EncodedChunk per frame


_SAMPLES: dict[tuple[str, int], Sample] = {}


def sample(codec: str, seed: int, iteration: int = 7) -> Sample:
    """Frames of a push of random values over :data:`PARTITION`, every row once, in a seeded random order."""
    key = (codec, seed)
    if key not in _SAMPLES:
        rng = np.random.default_rng(seed)
        c = CODECS[codec]
        acc = rng.standard_normal(PARTITION.n_elements).astype(np.float32)
        order = rng.permutation(PARTITION.n_rows).astype(np.int64)
        plan = plan_chunks(PARTITION, order, 0, c.row_wire_bytes(PARTITION), CHUNK_BYTES[codec])
        scales = c.tensor_scales(PARTITION, acc)
        chunks = [c.encode(PARTITION, acc, scales, ch) for ch in plan.chunks]
        frames = [encode_frame(ch, c, iteration, i) for i, ch in enumerate(chunks)]
        _SAMPLES[key] = Sample(codec, iteration, frames, chunks)
    return _SAMPLES[key]


def _same_chunk(a, b) -> bool:
    return (np.array_equal(np.asarray(a.segments), np.asarray(b.segments))
            and np.array_equal(np.asarray(a.scales, dtype=np.float32), np.asarray(b.scales, dtype=np.float32))
            and bytes(a.data) == bytes(b.data))


def _recrc(frame: bytearray) -> None:
    """What a forger does: recompute the frame's checksum after editing it."""
    crc = zlib.crc32(bytes(frame[HEADER_BYTES:]), zlib.crc32(bytes(frame[: HEADER_BYTES - 4])))
    frame[HEADER_BYTES - 4 : HEADER_BYTES] = struct.pack("<I", crc)


# ----------------------------------------------------------------------------- mutations (plain data)
def mutate_bytes(data: bytes, kind: str, a: int, b: int, flips: list[int]) -> bytes:
    """One byte-level mutation of ``data``; ``a``/``b`` are positions or values, ``flips`` bit indexes."""
    n = len(data)
    if kind == "none":
        return data
    if kind == "truncate":
        return data[: a % n]
    if kind == "extend":
        return data + bytes([b & 0xFF]) * (1 + a % 64)
    if kind == "flip":
        out = bytearray(data)
        for f in flips:
            f %= 8 * n
            out[f // 8] ^= 1 << (f % 8)
        return bytes(out)
    if kind == "burst":  # up to 32 consecutive bits inverted
        out = bytearray(data)
        start, length = a % (8 * n), 1 + b % 32
        for f in range(start, min(start + length, 8 * n)):
            out[f // 8] ^= 1 << (f % 8)
        return bytes(out)
    if kind == "delete":
        i = a % n
        return data[:i] + data[i + 1 + b % 16 :]
    if kind == "insert":
        i = a % (n + 1)
        return data[:i] + bytes([b & 0xFF]) * (1 + b % 7) + data[i:]
    if kind == "splice":  # the frame twice (a duplicate glued on)
        return data + data
    raise ValueError(f"unknown mutation {kind!r}")


BYTE_KINDS = ("none", "truncate", "extend", "flip", "burst", "delete", "insert", "splice")
FIELD_KINDS = ("n_segments", "data_len", "version", "codec", "magic")
FORGE_KINDS = ("swap_segments", "duplicate_segment", "huge_row", "zero_rows", "cross_tensor", "nan_scale")


def _fields(frame: bytes) -> list:
    return list(HEADER.unpack_from(frame))


def mutate_field(frame: bytes, kind: str, value: int, fix_crc: bool) -> bytes:
    """Overwrite one header field (e.g. a huge length), optionally with a recomputed checksum."""
    f = _fields(frame)
    idx = {"magic": 0, "version": 1, "codec": 2, "n_segments": 6, "data_len": 7}[kind]
    if kind == "magic":
        f[0] = bytes([value & 0xFF]) + f[0][1:]
    elif kind in ("version", "codec"):
        f[idx] = value & 0xFF
    else:
        f[idx] = value & 0xFFFFFFFF
    out = bytearray(HEADER.pack(*f) + frame[HEADER_BYTES:])
    if fix_crc:
        _recrc(out)
    return bytes(out)


def forge(frame: bytes, kind: str, a: int, b: int) -> bytes:
    """A frame edited by someone who recomputes the checksum (structurally plausible, semantically wrong)."""
    n_seg = _fields(frame)[6]
    out = bytearray(frame)
    table = HEADER_BYTES

    def seg(i: int) -> slice:
        return slice(table + i * SEGMENT_BYTES, table + (i + 1) * SEGMENT_BYTES)

    i, j = a % n_seg, b % n_seg
    if kind == "swap_segments":
        out[seg(i)], out[seg(j)] = bytes(out[seg(j)]), bytes(out[seg(i)])
    elif kind == "duplicate_segment":
        out[seg((i + 1) % n_seg)] = bytes(out[seg(i)])  # one row range listed twice (a no-op if n_seg == 1)
    elif kind == "huge_row":
        struct.pack_into("<I", out, seg(i).start, 0xFFFFFFFF - (b & 0xFF))
    elif kind == "zero_rows":
        struct.pack_into("<I", out, seg(i).start + 4, 0)
    elif kind == "cross_tensor":  # stretch a segment by a few rows (into the next tensor, or past the end)
        first, cnt = struct.unpack_from("<II", out, seg(i).start)
        struct.pack_into("<I", out, seg(i).start + 4, cnt + 1 + b % 60)
    elif kind == "nan_scale":
        struct.pack_into("<f", out, seg(i).start + 8, float("nan") if b % 2 else -1.0)
    else:
        raise ValueError(f"unknown forgery {kind!r}")
    _recrc(out)
    return bytes(out)


# ----------------------------------------------------------------------------- oracles
def _peak_during(fn):
    """Run ``fn``; return (its value or exception, peak bytes it had allocated at once).

    Tracing runs only around ``fn`` (hypothesis's own bookkeeping is slow under tracemalloc).
    """
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    else:
        tracemalloc.start()
        base = 0
    try:
        value = fn()
    except BaseException as e:  # noqa: BLE001 - returned to the oracle
        value = e
    peak = tracemalloc.get_traced_memory()[1] - base
    if not tracing:
        tracemalloc.stop()
    return value, peak


def check_frame_case(codec: str, seed: int, index: int, mode: str, kind: str, a: int, b: int,
                     flips: list[int], fix_crc: bool, stats: dict) -> None:
    """One frame case; raises :class:`FuzzViolation` if the decoder breaks its contract."""
    s = sample(codec, seed)
    c = CODECS[codec]
    original = s.frames[index % len(s.frames)]
    orig_chunk = s.chunks[index % len(s.frames)]
    if mode == "bytes":
        data = mutate_bytes(original, kind, a, b, flips)
        forged = False
    elif mode == "field":
        data = mutate_field(original, kind, a, fix_crc)
        forged = fix_crc
    else:
        data = forge(original, kind, a, b)
        forged = True
    out, peak = _peak_during(lambda: decode_frame(data, PARTITION, c))
    stats["peak_bytes"] = max(stats.get("peak_bytes", 0), peak)
    stats["cases"] = stats.get("cases", 0) + 1
    if peak > FRAME_PEAK_BOUND:
        raise FuzzViolation(f"decoding a {len(data)}-byte frame ({mode}/{kind}) allocated {peak} bytes > bound {FRAME_PEAK_BOUND}")
    if isinstance(out, BaseException):
        if not isinstance(out, FrameError):
            raise FuzzViolation(f"{mode}/{kind}: decoder raised {type(out).__name__}: {out} (only FrameError is allowed)")
        if data == original:
            raise FuzzViolation(f"{mode}/{kind}: an intact frame was rejected: {out}")
        stats["rejected"] = stats.get("rejected", 0) + 1
        return
    _, chunk = out
    if data == original:
        if not _same_chunk(chunk, orig_chunk):
            raise FuzzViolation("an intact frame decoded to a different chunk")
        stats["intact"] = stats.get("intact", 0) + 1
        return
    if not forged:
        raise FuzzViolation(f"{mode}/{kind}: a damaged frame ({len(data)} bytes, original {len(original)}) was accepted")
    # a forged frame that passed: it must still be safe to apply
    rows = chunk.rows()
    if rows.size == 0 or rows.min() < 0 or rows.max() >= PARTITION.n_rows or np.unique(rows).size != rows.size:
        raise FuzzViolation(f"forged frame ({kind}) accepted with rows outside the model or listed twice")
    buf = np.zeros(PARTITION.n_elements, dtype=np.float32)
    c.decode_into(PARTITION, chunk, (buf,), weight=1.0)
    touched = np.zeros(PARTITION.n_elements, dtype=bool)
    for r in rows.tolist():
        touched[PARTITION.row_start_list[r] : PARTITION.row_start_list[r + 1]] = True
    if np.any(buf[~touched] != 0) or not np.all(np.isfinite(buf)):
        raise FuzzViolation(f"forged frame ({kind}) wrote outside its rows or non-finite values")
    stats["forged_accepted"] = stats.get("forged_accepted", 0) + 1


def message_stream(seed: int) -> tuple[list, bytes]:
    """Every message type once or more, with seeded contents: (messages, their encoded bytes)."""
    rng = np.random.default_rng(seed)
    nonce = lambda: bytes(rng.integers(0, 256, NONCE_BYTES, dtype=np.uint8))  # noqa: E731
    msgs = [
        Hello(1, 1, int(rng.integers(0, 8)), nonce()), Challenge(1, nonce()),
        Auth(bytes(rng.integers(0, 256, PROOF_BYTES, dtype=np.uint8))),
        Welcome(bytes(rng.integers(0, 256, PROOF_BYTES, dtype=np.uint8))), Refuse(2, "wrong secret \u00e9"),
        Begin(3, int(Direction.PUSH), 9, 4, 2, 0.25), Piece(3, 0, 0, 300, bytes(range(200))),
        End(3, 1, 12345, True), Ack(3, 1, 12345, 0, 0.01, None), PullRequest(9),
        PullReply(9, 0.5, 0.0, rng.integers(0, 500, int(rng.integers(0, 40))).astype(np.int64)),
        Error(7, "boom"), Bye("done"),
    ]
    from rog.runtime.messages import AdmitGrant, AdmitRequest, Flush, Join, JoinReply, PullStart, PushDone
    msgs += [Join(1000, 47, 1, "ROG", 4, bytes(32)), JoinReply(3), AdmitRequest(9), AdmitGrant(9, 0.1),
             PushDone(9, 47, 0.2, None), PullStart(9, 0.0, 0.01, 47), Flush(10)]
    order = rng.permutation(len(msgs))
    msgs = [msgs[i] for i in order]
    return msgs, b"".join(encode_message(m) for m in msgs)


def _msg_equal(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, PullReply):
        return (a.iteration, a.budget_s, a.sleep_s) == (b.iteration, b.budget_s, b.sleep_s) and np.array_equal(
            a.required_rows, b.required_rows)
    return a == b


def check_parser_case(seed: int, kind: str, a: int, b: int, flips: list[int], cuts: list[int], huge: int | None,
                      stats: dict) -> None:
    """One parser case: a mutated message stream fed in slices."""
    msgs, data = message_stream(seed)
    if huge is not None:  # a huge body length in the envelope of message a
        starts = [0]
        for m in msgs:
            starts.append(starts[-1] + ENVELOPE_BYTES + len(m.pack_body()))
        pos = starts[a % len(msgs)] + 8
        data = data[:pos] + struct.pack("<I", huge) + data[pos + 4 :]
    else:
        data = mutate_bytes(data, kind, a, b, flips)
    bounds = sorted({0, len(data), *[c % (len(data) + 1) for c in cuts]})
    parser = MessageParser()
    got: list = []
    peak_max = 0
    err = None
    stats["cases"] = stats.get("cases", 0) + 1
    for lo, hi in zip(bounds, bounds[1:]):
        out, peak = _peak_during(lambda: parser.feed(data[lo:hi]))
        peak_max = max(peak_max, peak)
        if isinstance(out, BaseException):
            if not isinstance(out, ProtocolError):
                raise FuzzViolation(f"parser raised {type(out).__name__}: {out} (only ProtocolError is allowed)")
            err = out
            break
        got += out
        if parser.buffered > ENVELOPE_BYTES + MAX_BODY_BYTES:
            raise FuzzViolation(f"parser buffers {parser.buffered} bytes > one message bound {ENVELOPE_BYTES + MAX_BODY_BYTES}")
    stats["peak_bytes"] = max(stats.get("peak_bytes", 0), peak_max)
    if peak_max > PARSER_PEAK_BOUND + 2 * len(data):
        raise FuzzViolation(f"parser allocated {peak_max} bytes > bound {PARSER_PEAK_BOUND + 2 * len(data)}")
    if err is not None:
        try:
            parser.feed(b"RGMS")
        except ProtocolError:
            pass
        else:
            raise FuzzViolation("a broken parser accepted more input")
        stats["rejected"] = stats.get("rejected", 0) + 1
    if kind == "none" and huge is None:
        if err is not None or len(got) != len(msgs) or not all(_msg_equal(x, y) for x, y in zip(got, msgs)):
            raise FuzzViolation(f"an intact stream did not round-trip (error {err})")


# ----------------------------------------------------------------------------- transmissions
TX_KINDS = ("none", "dup_piece", "dup_frame", "drop_piece", "swap_pieces", "swap_frames", "flip_data",
            "foreign_tid", "huge_frame_len", "wrong_seq", "truncate", "foreign_message", "replayed_tid",
            "stale_iteration", "wrong_direction", "extra_frame", "restart_frame")


@dataclass
class TxMessage:
    """One message of a transmission as sent: its bytes and, for pieces, (frame, offset, length)."""

    raw: bytes
    frame: int | None = None
    offset: int = 0
    n: int = 0


def transmission(s: Sample, tid: int, piece_bytes: int, direction: Direction = Direction.PUSH,
                 iteration: int | None = None, planned: int | None = None) -> list[TxMessage]:
    """The messages of a complete transmission of ``s.frames`` (no deadline, all mandatory)."""
    it = s.iteration if iteration is None else iteration
    n = len(s.frames)
    out = [TxMessage(encode_message(Begin(tid, int(direction), it, n if planned is None else planned, 0, None)))]
    digest = 0
    for i, fr in enumerate(s.frames):
        for off in range(0, len(fr), piece_bytes):
            part = fr[off : off + piece_bytes]
            out.append(TxMessage(encode_piece(tid, i, off, len(fr), part), i, off, len(part)))
        digest = zlib.crc32(fr, digest)
    out.append(TxMessage(encode_message(End(tid, n, digest, False))))
    return out


def _pieces(msgs: list[TxMessage]) -> list[int]:
    return [i for i, m in enumerate(msgs) if m.frame is not None]


def mutate_transmission(msgs: list[TxMessage], kind: str, a: int, b: int, flips: list[int]) -> tuple[list[TxMessage], int | None]:
    """Apply one message-level mutation; returns the messages and the first frame index it can affect."""
    ps = _pieces(msgs)
    i = ps[a % len(ps)]
    m = msgs[i]
    first = m.frame
    out = list(msgs)
    if kind == "none":
        return out, None
    if kind == "dup_piece":
        out.insert(i + 1, m)
        if m.offset + m.n == struct.unpack_from("<I", m.raw, ENVELOPE_BYTES + 12)[0]:
            first = m.frame + 1  # the frame's last piece: the frame itself is complete and intact
    elif kind == "dup_frame":
        same = [k for k in ps if msgs[k].frame == m.frame]
        out[same[-1] + 1 : same[-1] + 1] = [msgs[k] for k in same]
        first = m.frame + 1  # the frame itself arrived intact once
    elif kind == "drop_piece":
        del out[i]
    elif kind == "swap_pieces":
        j = ps[b % len(ps)]
        out[i], out[j] = out[j], out[i]
        first = min(m.frame, msgs[j].frame) if out[i].raw != out[j].raw else None
    elif kind == "swap_frames":
        f1, f2 = m.frame, msgs[ps[b % len(ps)]].frame
        if f1 == f2:
            return out, None
        lo, hi = min(f1, f2), max(f1, f2)
        a_idx = [k for k in ps if msgs[k].frame == lo]
        b_idx = [k for k in ps if msgs[k].frame == hi]
        seq = [msgs[k] for k in range(a_idx[0], b_idx[-1] + 1)]
        seq_a = [x for x in seq if x.frame == lo]
        seq_b = [x for x in seq if x.frame == hi]
        middle = [x for x in seq if x.frame not in (lo, hi)]
        out[a_idx[0] : b_idx[-1] + 1] = seq_b + middle + seq_a
        first = lo
    elif kind == "flip_data":  # damage the frame bytes inside a well-formed piece (its envelope intact)
        body = bytearray(m.raw)
        data_start = ENVELOPE_BYTES + 16
        for f in flips or [0]:
            f %= 8 * (len(body) - data_start)
            body[data_start + f // 8] ^= 1 << (f % 8)
        if bytes(body) == m.raw:  # the flips cancelled out (the same bit twice): nothing was damaged
            return out, None
        out[i] = TxMessage(bytes(body), m.frame, m.offset, m.n)
    elif kind in ("foreign_tid", "huge_frame_len", "wrong_seq", "restart_frame"):
        tid, seq, off, flen = struct.unpack_from("<IIII", m.raw, ENVELOPE_BYTES)
        data = m.raw[ENVELOPE_BYTES + 16 :]
        if kind == "foreign_tid":
            tid = tid + 1 + b % 5
        elif kind == "huge_frame_len":
            flen = 0xFFFFFFFF - (b & 0xFFFF)
            off = 0
        elif kind == "wrong_seq":
            seq = seq + 1 + b % 3
        else:  # a piece that claims offset 0 in the middle of a frame
            if off == 0:
                return out, None  # already the frame's first piece: nothing to change
            off = 0
        out[i] = TxMessage(encode_piece(tid, seq, off, max(flen, off + len(data)), data), m.frame, off, len(data))
    elif kind == "truncate":
        out = out[: i + 1]  # the stream ends inside the transmission (no End)
    elif kind == "foreign_message":
        out.insert(i, TxMessage(encode_message(PullRequest(3))))
    elif kind == "extra_frame":  # one more frame than Begin announced
        fr = b"\x00" * 40
        out.insert(len(out) - 1, TxMessage(encode_piece(_tid_of(msgs), len(ps) + 1000, 0, len(fr), fr), 10**6, 0, len(fr)))
        first = None
    else:
        raise ValueError(f"unknown transmission mutation {kind!r}")
    return out, first


def _tid_of(msgs: list[TxMessage]) -> int:
    return struct.unpack_from("<I", msgs[0].raw, ENVELOPE_BYTES)[0]


def check_transmission_case(codec: str, seed: int, kind: str, a: int, b: int, flips: list[int], piece_bytes: int,
                            stats: dict) -> None:
    """One received transmission; raises :class:`FuzzViolation` if a damaged/duplicate frame is delivered."""
    s = sample(codec, seed)
    tid = 5
    direction, iteration, last_tid, last_it = Direction.PUSH, s.iteration, 0, 0
    if kind == "replayed_tid":
        last_tid = tid  # this connection already received transmission `tid`
    elif kind == "stale_iteration":
        last_it = s.iteration
    elif kind == "wrong_direction":
        direction = Direction.PULL
    msgs = transmission(s, tid, piece_bytes, direction, iteration)
    msgs, first_bad = mutate_transmission(msgs, kind if kind not in ("replayed_tid", "stale_iteration",
                                                                        "wrong_direction") else "none", a, b, flips)
    refused_whole = kind in ("replayed_tid", "stale_iteration", "wrong_direction")
    worker, ps = inproc_pair(0, ps_config=TransportConfig(io_timeout_s=5.0))
    ps.last_rx_tid, ps.last_rx_iteration = last_tid, last_it
    stream = b"".join(m.raw for m in msgs)
    worker.pipe.tx.put(stream)
    worker.pipe.tx.close()  # the sender is gone after these bytes
    validator = WireFrames(PARTITION, CODECS[codec])

    def receive():
        begin = ps.recv(5.0)
        if not isinstance(begin, Begin):
            raise ProtocolError(f"stream starts with {type(begin).__name__}")
        return receive_transmission(ps, begin, validator)

    stats["cases"] = stats.get("cases", 0) + 1
    out, peak = _peak_during(receive)
    stats["peak_bytes"] = max(stats.get("peak_bytes", 0), peak)
    if peak > RECV_PEAK_BOUND:
        raise FuzzViolation(f"receiving ({kind}) allocated {peak} bytes > bound {RECV_PEAK_BOUND}")
    if isinstance(out, BaseException):
        if not isinstance(out, TransportError):
            raise FuzzViolation(f"{kind}: receiver raised {type(out).__name__}: {out} (only TransportError is allowed)")
        if kind == "none":
            raise FuzzViolation(f"an intact transmission failed: {out}")
        stats["raised"] = stats.get("raised", 0) + 1
        return
    res = out
    n = res.delivered
    if n > len(s.frames):
        raise FuzzViolation(f"{kind}: delivered {n} frames of {len(s.frames)}")
    for k, (_, chunk) in enumerate(res.frames):
        if not _same_chunk(chunk, s.chunks[k]):
            raise FuzzViolation(f"{kind}: delivered frame {k} is not the frame sent at position {k} (damaged, duplicated or reordered)")
    digest = 0
    for fr in s.frames[:n]:
        digest = zlib.crc32(fr, digest)
    if res.digest != digest:
        raise FuzzViolation(f"{kind}: acknowledged digest does not match the delivered prefix")
    if refused_whole and n:
        raise FuzzViolation(f"{kind}: a refused transmission delivered {n} frames")
    if first_bad is not None and n > first_bad:
        raise FuzzViolation(f"{kind}: delivered {n} frames although frame {first_bad} was damaged or out of order")
    if kind == "none" and n != len(s.frames):
        raise FuzzViolation(f"an intact transmission delivered {n} of {len(s.frames)} frames ({res.reason})")
    stats["delivered_frames"] = stats.get("delivered_frames", 0) + n
    if n < len(s.frames):
        stats["cut_short"] = stats.get("cut_short", 0) + 1


# ----------------------------------------------------------------------------- hypothesis drivers
def fuzz(target: str, n_cases: int, seed: int = 0) -> dict:
    """Run ``n_cases`` hypothesis cases against ``target`` (frames, parser, transmissions); returns stats.

    Raises :class:`FuzzViolation` (with hypothesis's minimal falsifying case) on a contract breach.
    """
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    stats: dict = {}
    flips = st.lists(st.integers(0, 1 << 20), min_size=1, max_size=3)
    u32 = st.integers(0, 0xFFFFFFFF)
    common = dict(max_examples=n_cases, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), print_blob=False)
    if target == "frames":
        mode_kind = st.one_of(
            st.tuples(st.just("bytes"), st.sampled_from(BYTE_KINDS)),
            st.tuples(st.just("field"), st.sampled_from(FIELD_KINDS)),
            st.tuples(st.just("forge"), st.sampled_from(FORGE_KINDS)),
        )

        @hseed(seed)
        @settings(**common)
        @given(st.sampled_from(sorted(CODECS)), st.integers(0, 2), st.integers(0, 1000), mode_kind,
               st.one_of(u32, st.integers(0, 4096)), u32, flips, st.booleans())
        def run(codec, sseed, index, mk, a, b, fl, fix):
            check_frame_case(codec, sseed, index, mk[0], mk[1], a, b, fl, fix, stats)
    elif target == "parser":
        @hseed(seed)
        @settings(**common)
        @given(st.integers(0, 3), st.sampled_from(BYTE_KINDS), st.integers(0, 1 << 16), u32, flips,
               st.lists(st.integers(0, 1 << 16), max_size=8), st.one_of(st.none(), u32))
        def run(sseed, kind, a, b, fl, cuts, huge):
            check_parser_case(sseed, kind, a, b, fl, cuts, huge, stats)
    elif target == "transmissions":
        @hseed(seed)
        @settings(**common)
        @given(st.sampled_from(sorted(CODECS)), st.integers(0, 2), st.sampled_from(TX_KINDS), st.integers(0, 1 << 16),
               u32, flips, st.sampled_from([64, 200, 700, 4096]))
        def run(codec, sseed, kind, a, b, fl, piece):
            check_transmission_case(codec, sseed, kind, a, b, fl, piece, stats)
    else:
        raise ValueError(f"unknown fuzz target {target!r} (frames, parser, transmissions)")
    run()
    return stats


TARGETS = ("frames", "parser", "transmissions")


def wire_fuzz(ctx: ScenarioContext) -> dict:
    """Scenario: >= 10,000 fuzz cases over frames, the parser and received transmissions (quick: 600)."""
    per_target = {"frames": 5000, "parser": 3000, "transmissions": 3000}
    if ctx.quick:
        per_target = {k: 200 for k in per_target}
    details: dict = {"bounds_bytes": {"frame": FRAME_PEAK_BOUND, "parser": PARSER_PEAK_BOUND, "receive": RECV_PEAK_BOUND,
                                      "max_frame": MAX_FRAME_BYTES}}
    total = 0
    for target, n in per_target.items():
        t0 = time.monotonic()
        try:
            stats = fuzz(target, n, ctx.seed)
        except FuzzViolation as e:
            return result("wire_fuzz", False, details, error=f"{target}: {e}")
        except Exception as e:  # noqa: BLE001 - hypothesis re-raises the falsifying case's own error
            return result("wire_fuzz", False, details, error=f"{target}: {type(e).__name__}: {e}")
        stats["duration_s"] = round(time.monotonic() - t0, 2)
        details[target] = stats
        total += stats.get("cases", 0)
    details["cases"] = total
    details["peak_bytes"] = max(details[t].get("peak_bytes", 0) for t in TARGETS)
    need = 600 if ctx.quick else 10_000
    if total < need:
        return result("wire_fuzz", False, details, error=f"only {total} cases ran (need {need})")
    return result("wire_fuzz", True, details)




# ----------------------------------------------------------------------------- runtime level: a tampering link
class TamperPipe:
    """A byte pipe that damages one side's transmissions on purpose (a faulty middlebox).

    Every write of a :class:`~rog.transport.Connection` is one encoded message, so the pipe sees
    messages whole.  In a transmission of an iteration listed in ``iterations`` it
    ``dup_frame`` (sends frame 1, or 0, twice), ``swap_frames`` (frames 0 and 1 change places),
    ``flip`` (one bit of frame 0's data) or, once, ``replay`` (the whole transmission is sent again
    right before the next transmission starts).  ``fired`` counts the damage done.  The damage is
    transient (only the first transmission of each listed iteration: a retransmission gets through)
    unless ``persistent`` (every transmission of a listed iteration).
    """

    MODES = ("dup_frame", "swap_frames", "flip", "replay")

    def __init__(self, inner, mode: str, iterations: set[int], persistent: bool = False) -> None:
        if mode not in self.MODES:
            raise ValueError(f"unknown tamper mode {mode!r} ({', '.join(self.MODES)})")
        self.inner, self.mode, self.iterations = inner, mode, set(iterations)
        self.persistent = bool(persistent)
        self.fired = 0
        self._active = False
        self._frames: dict[int, list[bytes]] = {}  # seq -> pieces written so far
        self._held: list[bytes] = []
        self._recording: list[bytes] | None = None
        self._replay: list[bytes] | None = None

    def _out(self, data: bytes) -> None:
        self.inner.write(data)
        if self._recording is not None:
            self._recording.append(data)

    def write(self, data: bytes) -> None:
        mtype = data[5]
        if mtype == Begin.TYPE:
            begin = Begin.unpack_body(data[ENVELOPE_BYTES:])
            if self._replay is not None:  # inject the recorded transmission before this one
                for raw in self._replay:
                    self.inner.write(raw)
                self._replay = None
                self.fired += 1
            self._active = begin.iteration in self.iterations
            if self._active and not self.persistent:
                self.iterations.discard(begin.iteration)
            self._frames, self._held = {}, []
            if self._active and self.mode == "replay" and self.fired == 0:
                self._recording = []
                self.iterations = set()  # once
            self._out(data)
            return
        if mtype == End.TYPE:
            for raw in self._held:
                self._out(raw)
            self._held = []
            self._out(data)
            if self._recording is not None:
                self._replay, self._recording = self._recording, None
            self._active = False
            return
        if mtype != Piece.TYPE or not self._active or self.mode == "replay":
            self._out(data)
            return
        tid, seq, off, flen = struct.unpack_from("<IIII", data, ENVELOPE_BYTES)
        n = len(data) - ENVELOPE_BYTES - 16
        self._frames.setdefault(seq, []).append(data)
        complete = off + n == flen
        if self.mode == "flip" and seq == 0 and off == 0:
            body = bytearray(data)
            body[-1] ^= 0x10
            self.fired += 1
            self._out(bytes(body))
            return
        if self.mode == "swap_frames" and seq == 0:
            self._held.append(data)
            return
        self._out(data)
        if complete and self.mode == "swap_frames" and seq == 1 and self._held:
            for raw in self._held:
                self._out(raw)
            self._held = []
            self.fired += 1
        if complete and self.mode == "dup_frame" and seq == 0:
            for raw in self._frames[seq]:
                self._out(raw)
            self.fired += 1

    def wait_writable(self, until):
        return self.inner.wait_writable(until)

    def read_some(self, timeout_s):
        return self.inner.read_some(timeout_s)

    def close(self) -> None:
        self.inner.close()

    def abort(self) -> None:
        self.inner.abort()


def tampered_run(mode: str, side: str, *, policy: str = "ROG", n_workers: int = 2, iterations: int = 6,
                 seed: int = 0, timeout_s: float = 60.0, tamper_iterations: tuple[int, ...] = (2, 4),
                 persistent: bool = False) -> dict:
    """One PS and ``n_workers`` worker threads over in-process links, worker 0's ``side`` ("push" or
    "pull") tampered with by ``mode`` in ``tamper_iterations`` (see :class:`TamperPipe` for
    ``persistent``); compression off.

    Returns what happened: errors, how often the damage fired, the transmissions the receivers cut
    short, and the conservation check (every worker must hold ``w0 - sum(updates) / W`` after the
    flush): ``rows_lost`` counts rows where some worker's parameters differ from that reference.
    """
    import threading

    from rog.local_update import LocalUpdate, LocalUpdateConfig
    from rog.policies import make_policy
    from rog.runtime import ParameterServer, WorkerEngine, aligned_zeros

    codec = RawCodec()
    cfg = TransportConfig(piece_bytes=256, io_timeout_s=timeout_s)
    pairs = [inproc_pair(r, worker_config=cfg, ps_config=cfg) for r in range(n_workers)]
    target = pairs[0][0] if side == "push" else pairs[0][1]
    tamper = TamperPipe(target.pipe, mode, set(tamper_iterations), persistent)
    target.pipe = tamper
    ps = ParameterServer(PARTITION, n_workers, make_policy(policy, 2), codec, chunk_bytes=CHUNK_BYTES["raw"],
                         wait_timeout_s=timeout_s, join_timeout_s=timeout_s)
    rule = LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, milestones=())
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(PARTITION.n_elements).astype(np.float32)
    targets = rng.standard_normal((n_workers, PARTITION.n_elements)).astype(np.float32)
    updates: list[list[np.ndarray]] = [[] for _ in range(n_workers)]
    params: list = [None] * n_workers
    engines: list = [None] * n_workers
    errors: dict[int, str] = {}

    class Recording(LocalUpdate):
        def __init__(self, r):
            super().__init__(PARTITION.n_elements, rule)
            self.r = r

        def step(self, grad, p, it, out=None):
            u = super().step(grad, p, it, out)
            updates[self.r].append(u.copy())
            return u

    def worker(r: int) -> None:
        try:
            p = aligned_zeros(PARTITION.n_elements)
            p[:] = w0
            params[r] = p
            eng = WorkerEngine(pairs[r][0], PARTITION, p, make_policy(policy, 2), codec, Recording(r),
                               chunk_bytes=CHUNK_BYTES["raw"], wait_timeout_s=timeout_s)
            engines[r] = eng
            eng.join(timeout_s)
            for n in range(1, iterations + 1):
                eng.step((p - targets[r]) + np.float32(0.01) * np.float32(n))
            eng.flush()
            eng.close()
        except BaseException as e:  # noqa: BLE001 - reported in the result
            errors[r] = f"{type(e).__name__}: {e}"
            pairs[r][0].abort()

    ps_thread = ps.start([p[1] for p in pairs])
    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    ps_thread.join(timeout_s)
    hung = any(t.is_alive() for t in threads) or ps_thread.is_alive()
    if hung:
        ps.stop()
        for w, p in pairs:
            w.abort()
            p.abort()
    cons = lost_rows(params, w0, (u for ups in updates for u in ups), n_workers, PARTITION.row_start)
    cut = [rep for rep in ps.reports if rep.rows_delivered < rep.rows_planned]
    return {
        "mode": mode, "side": side, "policy": policy, "fired": tamper.fired, "hung": hung,
        "worker_errors": errors, "ps_errors": [f"worker {r}: {type(e).__name__}: {e}" for r, e in ps.errors],
        "transmissions_cut": len(cut), "rows_lost": cons["rows_lost"],
        "max_error_over_bound": cons["max_error_over_bound"], "push_retries": sum(e.push_retries for e in engines if e is not None),
    }


TAMPER_CASES = (  # (policy, side, mode): damage the run must survive with every committed row conserved
    [(pol, side, mode) for pol in ("SSP", "ROG") for side in ("push", "pull") for mode in ("dup_frame", "swap_frames", "flip")]
)
REPLAY_CASES = (("SSP", "push"), ("SSP", "pull"))  # a replayed transmission: refused loudly, nothing applied
QUICK_TAMPER = (("SSP", "push", "flip"), ("ROG", "pull", "dup_frame"), ("ROG", "push", "dup_frame"))


def wire_tamper(ctx: ScenarioContext) -> dict:
    """Scenario: a link that duplicates, reorders or damages frames of a real PS/worker run (in-process).

    Damage must never be applied: the receiver delivers a prefix, both ends commit exactly it, and
    after the flush every worker holds ``w0 - sum(updates) / W`` (``rows_lost`` counts rows that do
    not).  A replayed transmission must make the run fail loudly (ProtocolError), never hang.
    """
    cases = QUICK_TAMPER if ctx.quick else TAMPER_CASES
    runs, problems, lost = [], [], 0
    for pol, side, mode in cases:
        out = tampered_run(mode, side, policy=pol, seed=ctx.seed, timeout_s=15.0)
        runs.append(out)
        lost += out["rows_lost"]
        what = f"{pol} {side} {mode}"
        if out["fired"] == 0:
            problems.append(f"{what}: the damage never happened")
        elif out["hung"]:
            problems.append(f"{what}: the run stalled (no progress within 15 s)")
        elif out["worker_errors"] or out["ps_errors"]:
            problems.append(f"{what}: the run failed: {out['worker_errors'] or out['ps_errors']}")
        elif out["rows_lost"]:
            problems.append(f"{what}: {out['rows_lost']} rows differ from w0 - sum(updates)/W")
    for pol, side in (() if ctx.quick else REPLAY_CASES):
        out = tampered_run("replay", side, policy=pol, seed=ctx.seed, timeout_s=15.0)
        out.pop("rows_lost")  # the run is refused: conservation does not apply
        runs.append(out)
        errs = " ".join(out["worker_errors"].values())
        if out["fired"] == 0 or out["hung"] or "ProtocolError" not in errs:
            problems.append(f"{pol} {side} replay: expected a loud ProtocolError, got hung={out['hung']} errors={errs!r}")
    details = {"runs": runs, "cases": len(runs)}
    if problems:
        return result("wire_tamper", False, details, rows_lost=lost, error="; ".join(problems))
    return result("wire_tamper", True, details, rows_lost=lost)


SCENARIOS = {"wire_fuzz": wire_fuzz, "wire_tamper": wire_tamper}
