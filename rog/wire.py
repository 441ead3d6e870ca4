"""The chunk frame: a self-delimiting, checksummed binary encoding of one :class:`EncodedChunk`.

Layout (little-endian)::

    header   28 bytes  magic "RGCK", version u8, codec u8, flags u16,
                       iteration u32, seq u32, n_segments u32, data_len u32, crc32 u32
    segments 12 bytes each: first_row u32, n_rows u32, scale f32
    data     data_len bytes (the codec's payload, see :mod:`rog.codecs.compression`)

``crc32`` covers the first 24 header bytes, the segment table and the data, so any damage to a
frame (up to a 32-bit burst, i.e. every single-byte error) is detected.  Decoding checks every
length against the row partition and the codec *before* allocating or slicing, and never runs
code from the bytes (no pickle).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from .chunks import SMALL_TABLE
from .codecs.codec_registry import CODEC_BY_ID
from .codecs.compression import Codec, EncodedChunk
from .rows import RowPartition

MAGIC = b"RGCK"
VERSION = 1
HEADER = struct.Struct("<4sBBHIIIII")
HEADER_BYTES = HEADER.size  # 28
_CRC_COVERED_HEADER = HEADER_BYTES - 4  # the crc field itself is last
SEGMENT_DTYPE = np.dtype([("row", "<u4"), ("n", "<u4"), ("scale", "<f4")])
SEGMENT_BYTES = SEGMENT_DTYPE.itemsize  # 12
_U32 = 0xFFFFFFFF


class FrameError(ValueError):
    """A chunk frame is malformed, damaged or does not fit the model; it must not be applied."""


@dataclass(frozen=True)
class ChunkHeader:
    """The fixed header of a chunk frame."""

    codec_id: int
    iteration: int
    seq: int
    n_segments: int
    data_len: int
    crc32: int
    crc_seed: int = 0  # crc32 of the covered header bytes: the running crc the body continues

    @property
    def body_len(self) -> int:
        """Bytes that follow the header."""
        return self.n_segments * SEGMENT_BYTES + self.data_len


def frame_head(codec_id: int, iteration: int, seq: int, segments, scales, data_len: int) -> tuple[bytes, bytes, int]:
    """A frame's parts before its data: the checksummed 24 header bytes (crc field excluded), the segment
    table's bytes, and the running crc32 over both, which the data's crc continues (``zlib.crc32(data, seed)``
    is the frame's crc).  ``iteration`` is stored modulo 2**32."""
    if not 0 <= seq <= _U32:
        raise ValueError(f"seq must fit in 32 bits, got {seq}")
    segs = np.asarray(segments)
    if segs.ndim != 2 or segs.shape[1] != 2 or len(segs) == 0 or len(scales) != len(segs):
        raise ValueError("chunk must have a (k, 2) segment table with k >= 1 and one scale per segment")
    return frame_heads(codec_id, iteration, segs, scales, [len(segs)], [data_len], seq)[0]


def frame_heads(codec_id: int, iteration: int, segments: np.ndarray, scales, counts, data_lens, first_seq: int = 0
                ) -> list[tuple[bytes, bytes, int]]:
    """:func:`frame_head` of consecutive chunks (seq ``first_seq``, ``first_seq + 1``, ...) whose segment tables lie
    back to back in ``segments`` ``(K, 2)`` and ``scales`` ``(K,)``, chunk ``i`` holding ``counts[i]`` of them:
    one table for the batch, cut per chunk."""
    table = np.empty(len(segments), dtype=SEGMENT_DTYPE)
    table["row"] = segments[:, 0]
    table["n"] = segments[:, 1]
    table["scale"] = scales
    raw = table.tobytes()
    out, at = [], 0
    for i, (k, n) in enumerate(zip(np.asarray(counts).tolist(), np.asarray(data_lens).tolist())):
        table_bytes = raw[at * SEGMENT_BYTES : (at + k) * SEGMENT_BYTES]
        at += k
        head = HEADER.pack(MAGIC, VERSION, codec_id, 0, iteration & _U32, first_seq + i, k, n, 0)[:_CRC_COVERED_HEADER]
        out.append((head, table_bytes, zlib.crc32(table_bytes, zlib.crc32(head))))
    return out


def join_frame(head: bytes, crc: int, table_bytes: bytes, data) -> bytes:
    """The frame's bytes from :func:`frame_head`'s parts, the frame's crc32 and the data (bytes-like)."""
    return b"".join((head, struct.pack("<I", crc), table_bytes, data))


def encode_frame(chunk: EncodedChunk, codec: Codec, iteration: int, seq: int) -> bytes:
    """Serialise one chunk into a frame (``iteration`` is stored modulo 2**32)."""
    data = chunk.data
    head, table_bytes, seed = frame_head(codec.codec_id, iteration, seq, chunk.segments, chunk.scales, len(data))
    return join_frame(head, zlib.crc32(data, seed), table_bytes, data)


def encode_frames(codec: Codec, partition: RowPartition, acc, scales, chunks, iteration: int
                  ) -> tuple[list[EncodedChunk], list[bytes]]:
    """Encode ``chunks`` of ``acc`` and frame them as one transmission (seq 0, 1, ...): the codec's own
    ``encode_framed`` where it has one (the device codec computes the frames' crc32 where the payload is),
    else ``encode_many`` and :func:`encode_frame`; the frames are the same bytes either way."""
    own = getattr(codec, "encode_framed", None)
    if own is not None:
        got = own(partition, acc, scales, chunks, iteration)
        if got is not None:
            return got
    encoded = codec.encode_many(partition, acc, scales, chunks)
    return encoded, [encode_frame(c, codec, iteration, i) for i, c in enumerate(encoded)]


def frame_bytes(n_segments: int, data_len: int) -> int:
    """Size of a frame with this many segments and data bytes."""
    return HEADER_BYTES + n_segments * SEGMENT_BYTES + data_len


def parse_header(buf: bytes, partition: RowPartition, max_data_len: int | None = None) -> ChunkHeader:
    """Parse and bound-check a frame header (the first :data:`HEADER_BYTES` bytes of ``buf``).

    The body length it returns is bounded by the model (at most ``n_rows`` segments and the
    codec's payload for the whole model, or ``max_data_len`` if smaller), so a reader may
    allocate it.
    """
    if len(buf) < HEADER_BYTES:
        raise FrameError(f"frame header truncated: {len(buf)} of {HEADER_BYTES} bytes")
    magic, version, codec_id, flags, iteration, seq, n_seg, data_len, crc = HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise FrameError(f"bad frame magic {magic!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise FrameError(f"frame version {version} not supported (this build speaks {VERSION})")
    if codec_id not in CODEC_BY_ID:
        raise FrameError(f"unknown codec id {codec_id} (known: {sorted(CODEC_BY_ID)})")
    if flags != 0:
        raise FrameError(f"unknown frame flags 0x{flags:04x}")
    if n_seg == 0 or n_seg > partition.n_rows:
        raise FrameError(f"segment count {n_seg} outside [1, {partition.n_rows}]")
    limit = CODEC_BY_ID[codec_id]().data_bytes(partition.n_elements)
    if max_data_len is not None:
        limit = min(limit, int(max_data_len))
    if data_len > limit:
        raise FrameError(f"data length {data_len} exceeds the bound {limit}")
    seed = zlib.crc32(memoryview(buf)[:_CRC_COVERED_HEADER])
    return ChunkHeader(codec_id, iteration, seq, n_seg, data_len, crc, seed)


def decode_body(header: ChunkHeader, body: bytes, partition: RowPartition, codec: Codec) -> EncodedChunk:
    """Check a frame body against its header, the codec and the partition; return the chunk.

    The returned chunk's ``data`` is a view into ``body`` (no copy).
    """
    if header.codec_id != codec.codec_id:
        raise FrameError(f"frame uses codec {header.codec_id}, this run uses {codec.codec_id} ({codec.name})")
    if len(body) != header.body_len:
        raise FrameError(f"frame body is {len(body)} bytes, header says {header.body_len}")
    if zlib.crc32(body, header.crc_seed) != header.crc32:
        raise FrameError("frame checksum mismatch")
    table = np.frombuffer(body, dtype=SEGMENT_DTYPE, count=header.n_segments)
    if header.n_segments <= SMALL_TABLE:
        segments, n_elements = _check_small_table(table, partition)
    else:
        segments, n_elements = _check_table(table, partition)
    scales = table["scale"].astype(np.float32)
    if not (scales.min() >= 0 and scales.max() < np.inf):  # NaN fails both comparisons
        raise FrameError("frame carries a negative or non-finite scale")
    data = memoryview(body)[header.n_segments * SEGMENT_BYTES :]
    err = codec.check_data(data, n_elements)
    if err is not None:
        raise FrameError(f"frame data: {err}")
    return EncodedChunk(segments, scales, data)


def _check_table(table: np.ndarray, partition: RowPartition) -> tuple[np.ndarray, int]:
    """Validate a segment table (vectorised); return its ``(k, 2)`` segments and element count."""
    first = table["row"].astype(np.int64)
    count = table["n"].astype(np.int64)
    end = first + count  # one past each segment's last row
    if count.min() == 0 or end.max() > partition.n_rows:
        raise FrameError("frame names rows outside the model")
    row_tensor = partition.row_tensor
    if (row_tensor[first] != row_tensor[end - 1]).any():
        raise FrameError("a segment crosses a tensor boundary")
    # no row may appear twice in one chunk: sorted by first row, each segment ends before the next starts
    o = first.argsort(kind="stable")
    if (first[o[1:]] < end[o[:-1]]).any():
        raise FrameError("frame lists a row twice")
    n_elements = int((partition.row_start[end] - partition.row_start[first]).sum())
    segments = np.empty((len(first), 2), dtype=np.int64)
    segments[:, 0] = first
    segments[:, 1] = count
    return segments, n_elements


def _check_small_table(table: np.ndarray, partition: RowPartition) -> tuple[np.ndarray, int]:
    """:func:`_check_table` for a short table, in plain Python (the same checks, same messages)."""
    pairs = [(int(f), int(n)) for f, n in zip(table["row"].tolist(), table["n"].tolist())]
    tens, rs, n_rows = partition.row_tensor_list, partition.row_start_list, partition.n_rows
    n_elements = 0
    for f, n in pairs:
        if n == 0 or f + n > n_rows:
            raise FrameError("frame names rows outside the model")
        if tens[f] != tens[f + n - 1]:
            raise FrameError("a segment crosses a tensor boundary")
        n_elements += rs[f + n] - rs[f]
    prev_end = 0
    for f, n in sorted(pairs):
        if f < prev_end:
            raise FrameError("frame lists a row twice")
        prev_end = f + n
    return np.array(pairs, dtype=np.int64).reshape(-1, 2), n_elements


def decode_frame(
    buf: bytes, partition: RowPartition, codec: Codec, max_data_len: int | None = None
) -> tuple[ChunkHeader, EncodedChunk]:
    """Decode one complete frame (header + body, nothing more)."""
    header = parse_header(buf, partition, max_data_len)
    if len(buf) != HEADER_BYTES + header.body_len:
        raise FrameError(f"frame is {len(buf)} bytes, header says {HEADER_BYTES + header.body_len}")
    return header, decode_body(header, memoryview(buf)[HEADER_BYTES:], partition, codec)
