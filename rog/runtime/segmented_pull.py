"""The parameter server's pull frames (:class:`PendingFrames`), and a pull sent as one transmission
per layer segment (the worker's ``PullSegments``), for the layer-segment schedules
(:mod:`rog.schedules`): each segment is its own transfer (Begin, frames, End, Ack), so it pays the
per-transfer cost; every transmission but the last says ``more``.

Only whole-model pulls (every row mandatory, no deadline: BSP, SSP) can be segmented.
"""

from __future__ import annotations

import numpy as np

from ..chunks import plan_chunks
from ..codecs.compression import EncodedChunk
from ..transport import ProtocolError
from ..wire import encode_frame
from .worker import merge_attempts


class PendingFrames:
    """Frame producer for a pull: encodes chunk ``i`` of ``pending[r]`` under the lock, when it is sent."""

    def __init__(self, server, r: int, chunks, scales: np.ndarray, iteration: int) -> None:
        self.server, self.r, self.chunks, self.scales, self.iteration = server, r, chunks, scales, iteration
        self.encoded: list[EncodedChunk] = []

    def __call__(self, i: int) -> bytes:
        s = self.server
        with s.cond:
            chunk = s.codec.encode(s.partition, s.state.pending[self.r], self.scales, self.chunks[i])
        self.encoded.append(chunk)
        return encode_frame(chunk, s.codec, self.iteration, i)


def segment_order(partition, order: np.ndarray, seg_of_tensor) -> list[np.ndarray]:
    """``order``'s rows split by segment (each keeps ``order``'s order), segments in pull order."""
    segs = np.asarray(seg_of_tensor, dtype=np.int64)
    if segs.shape != (len(partition.shapes),):
        raise ProtocolError(f"PullSegments names {segs.size} tensors; the model has {len(partition.shapes)}")
    order = np.asarray(order, dtype=np.int64)
    seg_of_row = segs[partition.row_tensor[order]]
    return [order[seg_of_row == s] for s in range(int(segs.max()) + 1)]


def send_segmented_pull(conn, partition, plan, seg_of_tensor, make_frames, row_wire_bytes, chunk_bytes: int,
                        iteration: int):
    """Send ``plan`` (a whole-model pull plan) in segments; ``make_frames(chunks)`` builds a frame producer
    with an ``encoded`` list.  Returns ``(merged SendResult, delivered chunks, chunks planned)``."""
    if plan.deadline_s is not None or plan.mandatory_rows < len(plan.order):
        raise ProtocolError("a segmented pull needs a whole-model policy (every row mandatory, no deadline)")
    parts = segment_order(partition, plan.order, seg_of_tensor)
    merged, delivered, planned = None, [], 0
    for s, rows in enumerate(parts):
        cp = plan_chunks(partition, rows, int(rows.size), row_wire_bytes, chunk_bytes)
        frames = make_frames(cp.chunks)
        res = conn.send_transmission(frames, n_frames=cp.n_chunks, iteration=iteration, mandatory=cp.n_chunks,
                                     deadline_s=None, more=s < len(parts) - 1)
        delivered.extend(frames.encoded[: res.delivered])
        planned += cp.n_chunks
        merged = res if merged is None else merge_attempts(merged, res)
        if res.delivered < cp.n_chunks:
            break  # a rejected frame: the rest is not sent (the worker sees fewer segments and fails)
    return merged, delivered, planned
