"""The parameter server's row state (Algorithm 2): what each worker has pushed and not yet pulled, row by row.

:class:`RowState` owns the arrays; the server holds one (``ps.state``) and changes it under its lock only.
A push's delivered chunks are added to every worker's pending buffer (and the running total) with weight
``1/W``; a pull subtracts exactly the chunks the worker acknowledged (never zeroes a buffer: pushes keep adding
while a pull is under way).
"""

from __future__ import annotations

import numpy as np

from ..codecs.compression import Codec
from ..policies.base import ServerView
from ..rows import RowPartition
from .worker import aligned_zeros, subtract_sent

__all__ = ["RowState"]


class RowState:
    """``pending[r]`` (the averaged update not yet sent to worker ``r``), ``total`` (the sum of every committed push,
    weighted ``1/W``), ``push_iter`` (W,), ``versions`` and ``updates_since_pull`` (W, n_rows), ``active`` (W,: counts
    in the staleness gates), ``requested`` (W, n_rows: lagging rows the PS asked for), and the rejoin exchange's
    counters ``push_seq``, ``last_push_delivered`` (frames applied of push number ``push_seq``), ``pull_seq``."""

    SAVED = ("push_iter", "versions", "updates_since_pull", "active", "push_seq", "last_push_delivered", "pull_seq")

    def __init__(self, partition: RowPartition, n_workers: int) -> None:
        W, n_rows = n_workers, partition.n_rows
        self.partition = partition
        self.pending = [aligned_zeros(partition.n_elements) for _ in range(W)]
        self.total = aligned_zeros(partition.n_elements)
        self.push_iter = np.zeros(W, dtype=np.int64)
        self.versions = np.zeros((W, n_rows), dtype=np.int64)
        self.updates_since_pull = np.zeros((W, n_rows), dtype=np.int64)
        self.active = np.ones(W, dtype=bool)
        self.requested = np.zeros((W, n_rows), dtype=bool)
        self.push_seq = np.zeros(W, dtype=np.int64)
        self.last_push_delivered = np.zeros(W, dtype=np.int64)
        self.pull_seq = np.zeros(W, dtype=np.int64)

    def view(self) -> ServerView:
        """A snapshot (copies) for a policy decision."""
        return ServerView(self.partition, self.push_iter.copy(), self.versions.copy(), self.updates_since_pull.copy(),
                          self.active.copy())

    def add_push(self, codec: Codec, chunks, weight: float) -> np.ndarray:
        """Add a push's chunks to every pending buffer and the total; returns the rows they hold."""
        targets = [*self.pending, self.total]
        for c in chunks:
            codec.decode_into(self.partition, c, targets, weight=weight)
        return np.concatenate([c.rows() for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)

    def subtract_pull(self, codec: Codec, r: int, chunks) -> np.ndarray:
        """Subtract the chunks worker ``r`` acknowledged from ``pending[r]``; returns the rows they hold."""
        for c in chunks:
            subtract_sent(codec, self.partition, self.pending[r], c)
        rows = np.concatenate([c.rows() for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
        self.updates_since_pull[r, rows] = 0
        return rows

    def restart(self, r: int) -> None:
        """Worker ``r`` restarted from the initial model: it is owed everything committed so far."""
        self.pending[r][:] = self.total
        self.versions[r, :] = self.push_iter[r]
        self.requested[r, :] = False

    def level_with_slowest(self, r: int) -> None:
        """Move worker ``r`` (back after an eviction) up to the slowest other active worker's iteration."""
        others = [o for o in np.flatnonzero(self.active).tolist() if o != r]
        if others:
            self.push_iter[r] = max(int(self.push_iter[r]), int(self.push_iter[others].min()))
            np.maximum(self.versions[r], self.push_iter[r], out=self.versions[r])

    def arrays(self) -> dict[str, np.ndarray]:
        """Copies of everything a restarted PS needs (``pending`` stacked)."""
        return dict(pending=np.stack(self.pending), total=self.total.copy(),
                    **{name: getattr(self, name).copy() for name in self.SAVED})

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore from :meth:`arrays` (shapes checked by the caller)."""
        for r, buf in enumerate(self.pending):
            buf[:] = arrays["pending"][r]
        self.total[:] = arrays["total"]
        for name in self.SAVED:
            getattr(self, name)[...] = arrays[name]
