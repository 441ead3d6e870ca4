"""Codecs for row payloads: DEFSGDM 1-bit sign compression, and raw float32 (compression off).

DEFSGDM (Zheng, Huang and Kwok, NeurIPS 2019, block-wise SGD with momentum and error
feedback), as the original artifact used it: one block per tensor, ``scale = mean|d|`` over the
block, one sign bit per element, ``C(d) = scale * sign(d)`` where ``sign`` is the IEEE sign bit
(``-0.0`` decodes to ``-scale``, ``+0.0`` to ``+scale``).  Error feedback needs no separate
buffer here: the sender keeps one accumulator per destination (the worker's accumulated
gradient, the parameter server's per-worker pending update) and, when a chunk is acknowledged,
subtracts exactly the values the receiver reconstructs (:meth:`Codec.commit` runs the very
code of :meth:`Codec.decode_into` with ``weight=-1``, so both ends compute bit-identical
values).  What remains in the accumulator is the untransmitted rows plus the compression error
of the transmitted ones, so nothing is ever lost and nothing is applied twice.

Payload layout of one chunk: the values of its segments in table order, packed back to back
(sign bits: ``numpy.packbits`` order, first element = most significant bit, one zero-padded
byte at the end of the chunk; raw: little-endian float32).  The encoder merges touching
segments and lists segments shorter than :data:`~rog.rows.SHORT_SEGMENT_ELEMENTS` first,
sorted by row length, so that short rows move with one fancy index per row length and long
segments by slices (each at most one chunk, so every pass stays in cache); a decoder accepts
any order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..chunks import SMALL_TABLE, ChunkSpec, canonical_pairs, canonical_segments, check_segment_rows
from ..rows import SHORT_SEGMENT_ELEMENTS, RowPartition, ranges_index

# byte value -> its 8 bits as +1.0 (bit 0) / -1.0 (bit 1), most significant bit first (packbits order)
_SIGN_LUT = np.where(np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1) == 1, -1.0, 1.0).astype(
    np.float32
)
_SIGN_LUT.setflags(write=False)


@dataclass(frozen=True)
class EncodedChunk:
    """One chunk's payload: its segments, one scale per segment, and the packed data.

    ``segments`` is ``(k, 2)`` int64 ``(first_row, n_rows)`` in payload order; ``data`` is
    bytes-like (``bytes``, ``memoryview`` or a uint8 array).
    """

    segments: np.ndarray
    scales: np.ndarray  # (k,) float32: the segment's tensor scale (0 for the raw codec)
    data: bytes

    @property
    def n_rows(self) -> int:
        """Rows carried by this chunk."""
        return int(self.segments[:, 1].sum())

    def rows(self) -> np.ndarray:
        """The row ids this chunk carries, in payload order (what a receiver acknowledges)."""
        return ranges_index(self.segments[:, 0], self.segments[:, 1])


class _Layout:
    """Where a chunk's segments live in the flat buffer and in the payload, and how to move them.

    Long segments (at least :data:`~rog.rows.SHORT_SEGMENT_ELEMENTS` elements) are moved one
    slice each.  Short ones are moved row by row, vectorised: when they come first in the
    table, sorted by row length (as :func:`_payload_order` lays them out), each run of rows of
    one length is a *group* moved with one fancy index on :meth:`RowPartition.row_windows`;
    otherwise (a foreign encoder's order) with one element-level fancy index.  Tables of up to
    :data:`~rog.chunks.SMALL_TABLE` segments (the usual case) are walked in plain Python.
    """

    def __init__(self, partition: RowPartition, segments: np.ndarray, pairs: list | None = None) -> None:
        segs = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
        k = len(segs)
        if k <= SMALL_TABLE:
            self._small(partition, segs.tolist() if pairs is None else pairs)
        else:
            self._large(partition, segs)
        # short segments, if any: grouped by row length or, for a foreign order, element-indexed
        self.groups: list[tuple[int, int, int, int, int]] = []  # (row_len, row0, row1, payload0, payload1)
        self.grouped = False
        ks = self.n_short
        if ks == 0:
            return
        short_lens = self.lens_np[self.short_idx]
        count = segs[self.short_idx, 1]
        row_len = short_lens // count
        if self.short_idx[-1] == ks - 1 and (row_len[1:] >= row_len[:-1]).all():
            self.grouped = True
            self.row_start = partition.row_start[ranges_index(segs[:ks, 0], count)]  # (m,) short rows
            self.row_seg = np.repeat(np.arange(ks), count)  # (m,) table index of each short row
            heads = [0] + (np.flatnonzero(row_len[1:] != row_len[:-1]) + 1).tolist() + [ks]
            rows_before = [0] + np.cumsum(count).tolist()
            pos, lens, rl = self.pos, self.lens, row_len.tolist()
            for h0, h1 in zip(heads[:-1], heads[1:]):
                self.groups.append((rl[h0], rows_before[h0], rows_before[h1], pos[h0], pos[h1 - 1] + lens[h1 - 1]))

    def _small(self, partition: RowPartition, pairs: list) -> None:
        rs = partition.row_start_list
        start = [rs[f] for f, _ in pairs]
        lens = [rs[f + n] - a for (f, n), a in zip(pairs, start)]
        pos, p = [], 0
        for n in lens:
            pos.append(p)
            p += n
        self.start, self.lens, self.pos, self.total = start, lens, pos, p
        self.long_list = [(start[i], lens[i], pos[i], i) for i in range(len(lens)) if lens[i] >= SHORT_SEGMENT_ELEMENTS]
        short = [i for i in range(len(lens)) if lens[i] < SHORT_SEGMENT_ELEMENTS]
        self.n_short = len(short)
        self.short_elements = sum(lens[i] for i in short)
        if short:
            self.short_idx = np.array(short, dtype=np.int64)
            self.lens_np = np.array(lens, dtype=np.int64)
            self.start_np = np.array(start, dtype=np.int64)
            self.pos_np = np.array(pos, dtype=np.int64)

    def _large(self, partition: RowPartition, segs: np.ndarray) -> None:
        start, stop = partition.segment_elements(segs)
        lens = stop - start
        csum = np.cumsum(lens)
        pos = csum - lens
        self.total = int(csum[-1])
        short = lens < SHORT_SEGMENT_ELEMENTS
        li = np.flatnonzero(~short)
        self.long_list = list(zip(start[li].tolist(), lens[li].tolist(), pos[li].tolist(), li.tolist()))
        self.short_idx = np.flatnonzero(short)
        self.n_short = len(self.short_idx)
        self.short_elements = int(lens[short].sum())
        self.start_np, self.lens_np, self.pos_np = start, lens, pos
        self.pos, self.lens = pos.tolist(), lens.tolist()

    def short_flat_index(self) -> np.ndarray:
        """Ungrouped path: flat element indices of the short segments, in payload order."""
        return ranges_index(self.start_np[self.short_idx], self.lens_np[self.short_idx])

    def short_payload_index(self) -> np.ndarray:
        """Ungrouped path: payload element indices of the short segments."""
        return ranges_index(self.pos_np[self.short_idx], self.lens_np[self.short_idx])

    def short_element_scales(self, seg_scales: np.ndarray) -> np.ndarray:
        """Ungrouped path: each short element's scale, in payload order."""
        return np.repeat(seg_scales[self.short_idx], self.lens_np[self.short_idx])

    def longs(self) -> list[tuple[int, int, int, int]]:
        """``(flat_start, n_elements, payload_pos, table_index)`` of each long segment."""
        return self.long_list


def _outs_tuple(partition: RowPartition, outs) -> tuple[np.ndarray, ...]:
    outs = (outs,) if isinstance(outs, np.ndarray) else tuple(outs)
    for i, out in enumerate(outs):
        partition.check_flat(out, f"outs[{i}]")
    return outs


def _payload_order(partition: RowPartition, chunk: ChunkSpec) -> tuple[np.ndarray, list | None]:
    """The chunk's segments as an encoder lays them out: merged, short ones first by row length.

    Returns the ``(k, 2)`` table and, for small tables, the same as a list of pairs.
    """
    segs = np.asarray(chunk.segments)
    if len(segs) == 0:
        raise ValueError("cannot encode an empty chunk")
    if len(segs) <= SMALL_TABLE:
        pairs = canonical_pairs(partition, segs.tolist())
        rs = partition.row_start_list
        keyed = []
        for f, n in pairs:
            length = rs[f + n] - rs[f]
            keyed.append((0, length // n, f, n) if length < SHORT_SEGMENT_ELEMENTS else (1, 0, f, n))
        keyed.sort()  # shorts first by row length, then by row id; longs by row id
        pairs = [[f, n] for _, _, f, n in keyed]
        return np.array(pairs, dtype=np.int64), pairs
    segs = canonical_segments(partition, segs)
    start, stop = partition.segment_elements(segs)
    lens = stop - start
    short = lens < SHORT_SEGMENT_ELEMENTS
    if short.any():
        s = np.flatnonzero(short)
        s = s[np.argsort(lens[s] // segs[s, 1], kind="stable")]  # by row length, then row id
        segs = np.concatenate([segs[s], segs[~short]])
    return segs, None


def payload_order_many(partition: RowPartition, chunks) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_payload_order` of every chunk of a batch in one vectorised pass: the ``(K, 2)`` tables back to
    back (equal to concatenating each chunk's) and each chunk's number of segments."""
    segs_l = [np.asarray(ch.segments) for ch in chunks]
    if not segs_l:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
    for segs in segs_l:
        if segs.ndim != 2 or segs.shape[1] != 2 or not (segs.size == 0 or np.issubdtype(segs.dtype, np.integer)):
            raise ValueError(
                f"segments must be a (k, 2) integer array of (first_row, n_rows), got {segs.dtype} {segs.shape}")
        if len(segs) == 0:
            raise ValueError("cannot encode an empty chunk")
    counts = np.array([len(x) for x in segs_l], dtype=np.int64)
    segs = np.concatenate(segs_l).astype(np.int64, copy=False)
    chunk = np.repeat(np.arange(len(segs_l)), counts)
    o = np.lexsort((segs[:, 0], chunk))
    segs, chunk = segs[o], chunk[o]
    first, count = segs[:, 0], segs[:, 1]
    end = first + count
    tens = partition.row_tensor
    check_segment_rows(partition, first, count)
    same = chunk[1:] == chunk[:-1]
    if (same & (first[1:] < end[:-1])).any():
        raise ValueError("segments overlap: a chunk lists a row twice")
    cont = same & (first[1:] == end[:-1]) & (tens[first[1:]] == tens[end[:-1] - 1])
    if cont.any():  # merge runs that continue one another inside a chunk and a tensor
        heads = np.concatenate([[0], np.flatnonzero(~cont) + 1])
        segs = np.stack([first[heads], np.add.reduceat(count, heads)], axis=1)
        chunk = chunk[heads]
    start, stop = partition.segment_elements(segs)
    lens = stop - start
    long_ = lens >= SHORT_SEGMENT_ELEMENTS
    row_len = np.where(long_, 0, lens // segs[:, 1])
    o = np.lexsort((segs[:, 0], row_len, long_, chunk))  # per chunk: shorts by row length then row, longs by row
    return segs[o], np.bincount(chunk, minlength=len(segs_l)).astype(np.int64)


class Codec(ABC):
    """Turns rows of an accumulator into chunk payloads and back."""

    codec_id: int  # the value of the wire header's codec field
    name: str
    options: type | None = None  # its options' frozen dataclass (rog.options): run.py's flags, compression_options
    run_options: str | None = None  # the prefix of those flags, --<run_options>-<field> (Top-k "topk")
    options_group: str = "compression"  # the run.py --help group of those flags (rog.experiment.cli.CONCERNS)

    @abstractmethod
    def data_bytes(self, n_elements: int) -> int:
        """Payload bytes of a chunk carrying ``n_elements`` elements."""

    @abstractmethod
    def row_wire_bytes(self, partition: RowPartition) -> np.ndarray:
        """Data bytes per row (float64, may be fractional), used to cut chunks to size."""

    def check_data(self, data: bytes, n_elements: int) -> str | None:
        """Why a received payload of ``n_elements`` elements is invalid, or ``None`` if it is fine."""
        if len(data) != self.data_bytes(n_elements):
            return f"payload is {len(data)} bytes, {n_elements} elements need {self.data_bytes(n_elements)}"
        return None

    @abstractmethod
    def tensor_scales(self, partition: RowPartition, acc: np.ndarray, mean_abs: np.ndarray | None = None) -> np.ndarray:
        """Per-tensor scales of ``acc`` for one transmission (``(n_tensors,)`` float32); ``mean_abs``:
        :meth:`flat_mean_abs` of ``acc`` when the caller already has it."""

    @abstractmethod
    def encode(self, partition: RowPartition, acc: np.ndarray, scales: np.ndarray, chunk: ChunkSpec) -> EncodedChunk:
        """Encode the rows of ``chunk`` from ``acc`` (``scales`` from :meth:`tensor_scales`)."""

    @abstractmethod
    def decode_into(
        self, partition: RowPartition, chunk: EncodedChunk, outs: Sequence[np.ndarray], weight: float = 1.0
    ) -> None:
        """Add ``weight`` times the chunk's reconstructed values into every buffer of ``outs``."""

    def flat_mean_abs(self, partition: RowPartition, flat: np.ndarray) -> np.ndarray:
        """Per-tensor ``mean |x|`` (float64) of a flat buffer of this codec's kind (importance, scales)."""
        return partition.tensor_mean_abs(flat)

    def encode_many(self, partition: RowPartition, acc: np.ndarray, scales: np.ndarray, chunks) -> list:
        """:meth:`encode` every chunk of a transmission (a device codec does them in one batch)."""
        return [self.encode(partition, acc, scales, ch) for ch in chunks]

    def decode_many(self, partition: RowPartition, chunks: Sequence[EncodedChunk], outs: Sequence[np.ndarray],
                    weight: float = 1.0) -> None:
        """:meth:`decode_into` every chunk, in order (a device codec does them in one batch)."""
        for c in chunks:
            self.decode_into(partition, c, outs, weight)

    def commit(self, partition: RowPartition, acc: np.ndarray, chunk: EncodedChunk) -> None:
        """Remove a delivered chunk from the sender's accumulator (error feedback keeps the rest)."""
        self.decode_into(partition, chunk, (acc,), weight=-1.0)


class SignCodec(Codec):
    """DEFSGDM 1-bit compression: per-tensor scale ``mean|d|`` and packed sign bits."""

    codec_id = 1
    name = "sign"

    def data_bytes(self, n_elements: int) -> int:
        return (int(n_elements) + 7) // 8

    def row_wire_bytes(self, partition: RowPartition) -> np.ndarray:
        return partition.row_elements / 8.0

    def check_data(self, data: bytes, n_elements: int) -> str | None:
        err = super().check_data(data, n_elements)
        if err is None and n_elements % 8 and (data[-1] & (0xFF >> (n_elements % 8))):
            return "payload padding bits are not zero"
        return err

    def tensor_scales(self, partition: RowPartition, acc: np.ndarray, mean_abs: np.ndarray | None = None) -> np.ndarray:
        return (self.flat_mean_abs(partition, acc) if mean_abs is None else mean_abs).astype(np.float32)

    def encode(self, partition: RowPartition, acc: np.ndarray, scales: np.ndarray, chunk: ChunkSpec) -> EncodedChunk:
        partition.check_flat(acc, "acc")
        scales = _check_scales(partition, scales)
        segs, pairs = _payload_order(partition, chunk)
        lay = _Layout(partition, segs, pairs)
        bits = np.empty(lay.total, dtype=bool)
        for length, r0, r1, p0, p1 in lay.groups:
            rows = partition.row_windows(acc, length)[lay.row_start[r0:r1]]
            np.signbit(rows, out=bits[p0:p1].reshape(-1, length))
        for a, n, p, _ in lay.longs():
            np.signbit(acc[a : a + n], out=bits[p : p + n])
        return EncodedChunk(segs, scales[partition.row_tensor[segs[:, 0]]], np.packbits(bits).tobytes())

    def decode_into(
        self, partition: RowPartition, chunk: EncodedChunk, outs: Sequence[np.ndarray], weight: float = 1.0
    ) -> None:
        outs = _outs_tuple(partition, outs)
        lay = _Layout(partition, chunk.segments)
        data = np.frombuffer(chunk.data, dtype=np.uint8)
        # the one rounding step: float32(scale * weight); every value is then exactly +-that
        sw = (np.asarray(chunk.scales, dtype=np.float64) * float(weight)).astype(np.float32)
        if lay.grouped:
            signs = np.take(_SIGN_LUT, data[: (lay.short_elements + 7) >> 3], axis=0).reshape(-1)
            row_scale = sw[lay.row_seg]
            for length, r0, r1, p0, p1 in lay.groups:
                vals = signs[p0:p1].reshape(-1, length)
                vals = vals * row_scale[r0:r1, None]
                for out in outs:
                    win = partition.row_windows(out, length)
                    win[lay.row_start[r0:r1]] += vals
        elif lay.n_short:
            signs = np.take(_SIGN_LUT, data, axis=0).reshape(-1)[lay.short_payload_index()]
            vals = signs * lay.short_element_scales(sw)
            idx = lay.short_flat_index()
            for out in outs:
                out[idx] += vals
        for a, n, p, i in lay.longs():
            r = p & 7
            b0 = p >> 3
            lut = _SIGN_LUT * sw[i]
            vals = np.take(lut, data[b0 : b0 + ((r + n + 7) >> 3)], axis=0).reshape(-1)[r : r + n]
            for out in outs:
                o = out[a : a + n]
                o += vals


class RawCodec(Codec):
    """No compression: float32 values as they are (for conservation checks and fast links)."""

    codec_id = 0
    name = "none"

    def data_bytes(self, n_elements: int) -> int:
        return int(n_elements) * 4

    def row_wire_bytes(self, partition: RowPartition) -> np.ndarray:
        return partition.row_elements * 4.0

    def check_data(self, data: bytes, n_elements: int) -> str | None:
        err = super().check_data(data, n_elements)
        if err is None and not np.isfinite(np.frombuffer(data, dtype="<f4")).all():
            return "payload carries non-finite values"
        return err

    def tensor_scales(self, partition: RowPartition, acc: np.ndarray, mean_abs: np.ndarray | None = None) -> np.ndarray:
        return np.zeros(partition.n_tensors, dtype=np.float32)

    def encode(self, partition: RowPartition, acc: np.ndarray, scales: np.ndarray, chunk: ChunkSpec) -> EncodedChunk:
        partition.check_flat(acc, "acc")
        segs, pairs = _payload_order(partition, chunk)
        lay = _Layout(partition, segs, pairs)
        vals = np.empty(lay.total, dtype="<f4")
        for length, r0, r1, p0, p1 in lay.groups:
            vals[p0:p1].reshape(-1, length)[...] = partition.row_windows(acc, length)[lay.row_start[r0:r1]]
        for a, n, p, _ in lay.longs():
            vals[p : p + n] = acc[a : a + n]
        return EncodedChunk(segs, np.zeros(len(segs), dtype=np.float32), vals.tobytes())

    def decode_into(
        self, partition: RowPartition, chunk: EncodedChunk, outs: Sequence[np.ndarray], weight: float = 1.0
    ) -> None:
        outs = _outs_tuple(partition, outs)
        lay = _Layout(partition, chunk.segments)
        data = np.frombuffer(chunk.data, dtype="<f4")
        w = np.float32(weight)
        if lay.grouped:
            for length, r0, r1, p0, p1 in lay.groups:
                vals = data[p0:p1].reshape(-1, length)
                if w != 1:
                    vals = vals * w
                for out in outs:
                    win = partition.row_windows(out, length)
                    win[lay.row_start[r0:r1]] += vals
        elif lay.n_short:
            vals = data[lay.short_payload_index()]
            if w != 1:
                vals = vals * w
            idx = lay.short_flat_index()
            for out in outs:
                out[idx] += vals
        for a, n, p, _ in lay.longs():
            vals = data[p : p + n]
            if w != 1:
                vals = vals * w
            for out in outs:
                o = out[a : a + n]
                o += vals

    # commit() is the base class's: subtract exactly the values sent.  While the accumulator is
    # unchanged since encoding that leaves exact zeros; values added meanwhile (another worker's
    # push into a pending buffer) survive, which zeroing the rows would lose.


def _check_scales(partition: RowPartition, scales: np.ndarray) -> np.ndarray:
    scales = np.asarray(scales, dtype=np.float32)
    if scales.shape != (partition.n_tensors,):
        raise ValueError(f"scales must have shape ({partition.n_tensors},) (one per tensor), got {scales.shape}")
    if not (scales.min() >= 0 and scales.max() < np.inf):  # NaN fails both comparisons
        raise ValueError("scales must be finite and non-negative (a NaN/inf gradient reached the codec?)")
    return scales
