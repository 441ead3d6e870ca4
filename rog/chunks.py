"""Cutting an ordered row sequence into chunks: the unit a transmission delivers or drops.

A transmission sends rows in the policy's order.  The deadline is checked once per chunk
(docs/design.md#transport-deadlines: a per-row check costs as much as sending a row), and a receiver applies only
complete chunks, so the delivered row set is always a prefix of the chunk list.  A chunk
boundary is always placed right after the mandatory prefix (the MTA rows), so "the mandatory
part was delivered" is a whole number of chunks.

Each chunk is a short list of segments (runs of consecutive rows inside one tensor, see
:mod:`rog.rows`), which is also how its row index travels on the wire: 12 bytes per segment
instead of 4 bytes per row.  Inside one chunk the order of rows carries no meaning (a chunk
is applied whole or not at all), so a codec may reorder and merge a chunk's segments
(:func:`canonical_segments`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rows import RowPartition, _row_ids

DEFAULT_CHUNK_BYTES = 32 * 1024  # target payload bytes per chunk (data only, before headers)
# The original artifact's logged runs cut transmissions into chunks of 1,000 of ConvMLP-M's 33,307 rows
# (docs/design.md#artifact-choices: the delivered share moved in steps of 3 %).  A fixed byte size does not keep that
# granularity across models: the quick model's whole 1-bit payload (26 KB) fits one 32 KB chunk, so
# a cut transmission delivered its mandatory prefix and then all or none of the rest.
ARTIFACT_CHUNK_SHARE = 1000 / 33307


def chunk_bytes_for_share(row_wire_bytes: np.ndarray, share: float | None) -> int:
    """Chunk size (payload bytes) that cuts a full transmission into chunks of ``share`` of its data:
    ``ceil(share * sum(row_wire_bytes))``, at least 1 byte (a row larger than that gets its own chunk);
    ``share=None`` gives the fixed :data:`DEFAULT_CHUNK_BYTES` (configs older than the share).

    ``row_wire_bytes`` is a codec's per-row data size (:meth:`rog.codecs.compression.Codec.row_wire_bytes`);
    ``share`` lies in (0, 1].  Every sender of a run computes the same size from the same model."""
    if share is None:
        return DEFAULT_CHUNK_BYTES
    share = float(share)
    if not 0 < share <= 1:
        raise ValueError(f"chunk share must lie in (0, 1] (a fraction of the model's payload), got {share!r}")
    total = float(np.asarray(row_wire_bytes, dtype=np.float64).sum())
    if not np.isfinite(total) or total < 0:
        raise ValueError("row_wire_bytes must be finite and non-negative")
    return max(1, int(np.ceil(share * total)))


@dataclass(frozen=True)
class ChunkSpec:
    """Which rows one chunk carries: ``segments`` is ``(k, 2)`` int64 ``(first_row, n_rows)``."""

    segments: np.ndarray

    @property
    def n_rows(self) -> int:
        """Rows carried by this chunk."""
        return int(self.segments[:, 1].sum())

    def rows(self) -> np.ndarray:
        """The row ids of this chunk in send order (vectorised)."""
        first, count = self.segments[:, 0], self.segments[:, 1]
        base = np.repeat(first - (np.cumsum(count) - count), count)
        return base + np.arange(int(count.sum()), dtype=np.int64)


@dataclass(frozen=True)
class ChunkPlan:
    """An ordered transmission: its chunks and how many of them are mandatory."""

    chunks: tuple[ChunkSpec, ...]
    mandatory_chunks: int
    n_rows: int  # rows over all chunks

    @property
    def n_chunks(self) -> int:
        """Number of chunks."""
        return len(self.chunks)

    def rows(self, n_chunks: int | None = None) -> np.ndarray:
        """Row ids carried by the first ``n_chunks`` chunks (all by default), in send order."""
        chosen = self.chunks if n_chunks is None else self.chunks[:n_chunks]
        if not chosen:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([c.rows() for c in chosen])

    def rows_in(self, n_chunks: int) -> int:
        """How many rows the first ``n_chunks`` chunks carry."""
        return sum(c.n_rows for c in self.chunks[:n_chunks])


def plan_chunks(
    partition: RowPartition,
    order: np.ndarray,
    mandatory_rows: int,
    row_wire_bytes: np.ndarray,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> ChunkPlan:
    """Cut ``order`` into chunks of about ``chunk_bytes`` of data each.

    ``row_wire_bytes`` gives each row's data size on the wire in bytes, by row id, possibly
    fractional (a codec's :meth:`row_wire_bytes`: 1/8 byte per element for sign bits).  A
    chunk is closed before the row that would take it past ``chunk_bytes``; a row larger than
    ``chunk_bytes`` gets a chunk of its own; rows are never split.  The first
    ``mandatory_rows`` rows of ``order`` end on a chunk boundary.
    """
    order = _row_ids(order, partition.n_rows, "order")
    if int(chunk_bytes) != chunk_bytes or chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
    if isinstance(mandatory_rows, bool) or int(mandatory_rows) != mandatory_rows:
        raise ValueError(f"mandatory_rows must be an integer, got {mandatory_rows!r}")
    mandatory_rows = int(mandatory_rows)
    if not 0 <= mandatory_rows <= order.size:
        raise ValueError(f"mandatory_rows={mandatory_rows} outside [0, {order.size}] (the order's length)")
    row_wire_bytes = np.asarray(row_wire_bytes)
    if row_wire_bytes.shape != (partition.n_rows,):
        raise ValueError(f"row_wire_bytes must have shape ({partition.n_rows},), got {row_wire_bytes.shape}")
    if order.size and np.bincount(order, minlength=partition.n_rows).max() > 1:
        dup = int(np.flatnonzero(np.bincount(order) > 1)[0])
        raise ValueError(f"order lists row {dup} twice; a transmission sends each row at most once")
    size_all = row_wire_bytes[order].astype(np.float64)
    if size_all.size and not (size_all.min() >= 0 and np.isfinite(size_all).all()):
        raise ValueError("row_wire_bytes must be finite and non-negative")
    boundaries: list[np.ndarray] = []
    for lo, hi in ((0, mandatory_rows), (mandatory_rows, order.size)):
        if hi > lo:
            boundaries.append(_cut(size_all[lo:hi], int(chunk_bytes)) + lo)
    if not boundaries:
        return ChunkPlan((), 0, 0)
    chunk_starts = np.concatenate(boundaries)
    chunk_ends = np.concatenate([chunk_starts[1:], [order.size]])
    # segments of the whole order, with extra breaks at chunk boundaries
    tens = partition.row_tensor[order]
    brk = (np.diff(order) != 1) | (np.diff(tens) != 0)
    brk[chunk_starts[1:] - 1] = True
    seg_starts = np.concatenate([[0], np.flatnonzero(brk) + 1])
    seg_lens = np.diff(np.concatenate([seg_starts, [order.size]]))
    seg_table = np.stack([order[seg_starts], seg_lens], axis=1)
    # which segments belong to which chunk (segment starts are sorted, chunk starts are a subset)
    first_seg = np.searchsorted(seg_starts, chunk_starts)
    last_seg = np.searchsorted(seg_starts, chunk_ends)
    chunks = tuple(ChunkSpec(seg_table[a:b]) for a, b in zip(first_seg.tolist(), last_seg.tolist()))
    n_mandatory = int(np.searchsorted(chunk_starts, mandatory_rows)) if mandatory_rows else 0
    return ChunkPlan(chunks, n_mandatory, int(order.size))


def _cut(size: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """Start positions of greedy chunks over rows of ``size`` bytes (a chunk closes before overflowing).

    Where a chunk starting at each row would end is found for all rows at once (one
    ``searchsorted``); the Python loop then only hops from chunk to chunk.
    """
    n = size.size
    cum = np.concatenate([[0], np.cumsum(size)])  # cum[i] = bytes before row i
    # end[i]: the largest j with cum[j] - cum[i] <= chunk_bytes, i.e. a chunk from row i holds rows i..j-1
    end = np.searchsorted(cum, cum[:-1] + chunk_bytes, side="right") - 1
    end = np.maximum(end, np.arange(1, n + 1))  # at least one row per chunk (a big row alone)
    starts = []
    i = 0
    while i < n:  # one step per chunk (tens to hundreds), not per row
        starts.append(i)
        i = int(end[i])
    return np.asarray(starts, dtype=np.int64)


SMALL_TABLE = 24  # segment tables up to this size are handled with Python ints: numpy calls would cost more


def canonical_segments(partition: RowPartition, segments: np.ndarray) -> np.ndarray:
    """The same row set as ``segments``, sorted by row id, with touching runs in one tensor merged.

    A chunk is applied whole, so its internal order is free; sorting and merging gives the
    fewest segments (a smaller row index, fewer slices to move).  Cost: ``O(k log k)`` in the
    number of segments, not rows.  Raises ValueError for segments outside the model, crossing
    a tensor boundary or overlapping.
    """
    segs = np.asarray(segments)
    if segs.ndim != 2 or segs.shape[1] != 2 or not (segs.size == 0 or np.issubdtype(segs.dtype, np.integer)):
        raise ValueError(
            f"segments must be a (k, 2) integer array of (first_row, n_rows), got {segs.dtype} {segs.shape}"
        )
    if len(segs) <= SMALL_TABLE:
        return np.array(canonical_pairs(partition, segs.tolist()), dtype=np.int64).reshape(-1, 2)
    segs = segs.astype(np.int64, copy=False)
    segs = segs[np.argsort(segs[:, 0], kind="stable")]
    first, count = segs[:, 0], segs[:, 1]
    end = first + count
    tens = partition.row_tensor
    check_segment_rows(partition, first, count)
    if (first[1:] < end[:-1]).any():
        raise ValueError("segments overlap: a chunk lists a row twice")
    # segment i + 1 continues segment i if it starts where i ends, inside the same tensor
    cont = (first[1:] == end[:-1]) & (tens[first[1:]] == tens[end[:-1] - 1])
    if not cont.any():
        return segs
    heads = np.concatenate([[0], np.flatnonzero(~cont) + 1])
    merged_count = np.add.reduceat(count, heads)
    return np.stack([first[heads], merged_count], axis=1)


def check_segment_rows(partition: RowPartition, first: np.ndarray, count: np.ndarray) -> None:
    """ValueError unless every segment ``(first, count)`` names at least one row inside the model and stays
    inside one tensor (int64 arrays, at least one segment)."""
    end = first + count
    if count.min() < 1 or first.min() < 0 or end.max() > partition.n_rows:
        raise ValueError(f"segments must name at least one row each, inside [0, {partition.n_rows})")
    tens = partition.row_tensor
    if (tens[first] != tens[end - 1]).any():
        raise ValueError("a segment crosses a tensor boundary; cut segments with RowPartition.segments")


def canonical_pairs(partition: RowPartition, pairs: list) -> list[list[int]]:
    """:func:`canonical_segments` for a short list of ``[first_row, n_rows]`` pairs, in plain Python."""
    tens = partition.row_tensor_list
    n_rows = partition.n_rows
    out: list[list[int]] = []
    prev_end = -1
    for f, n in sorted(pairs):
        if n < 1 or f < 0 or f + n > n_rows:
            raise ValueError(f"segments must name at least one row each, inside [0, {n_rows})")
        if tens[f] != tens[f + n - 1]:
            raise ValueError("a segment crosses a tensor boundary; cut segments with RowPartition.segments")
        if f < prev_end:
            raise ValueError("segments overlap: a chunk lists a row twice")
        if f == prev_end and tens[f] == tens[f - 1]:
            out[-1][1] += n
        else:
            out.append([f, n])
        prev_end = f + n
    return out
