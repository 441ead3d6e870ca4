"""In-process transport: two connected :class:`Connection` ends in one process, no sockets.

The same message code, parser and transmissions run over an in-memory byte stream, so engine
code can be tested without the network.  Give each end a ``rate_mbit_at`` in its config to
model the link; with a :class:`VirtualClock` the modelled rate costs no real time and the
outcome of every deadline is deterministic.
"""

from __future__ import annotations

import threading
from collections import deque

from .config import TransportConfig
from .connection import Connection
from .messages import PROTOCOL_VERSION, LinkClosed, Role, TransportTimeout
from .ratelimit import Clock


class _ByteQueue:
    """One direction of an in-memory byte stream."""

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._cond = threading.Condition()
        self.closed = False

    def put(self, data: bytes) -> None:
        with self._cond:
            if self.closed:
                raise LinkClosed("in-process stream is closed")
            self._chunks.append(bytes(data))
            self._cond.notify_all()

    def get(self, timeout_s: float | None) -> bytes:
        with self._cond:
            if not self._cond.wait_for(lambda: self._chunks or self.closed, timeout_s):
                raise TransportTimeout(f"nothing arrived for {timeout_s} s")
            if self._chunks:
                return self._chunks.popleft()
            raise LinkClosed("peer closed the in-process stream")

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


class MemoryPipe:
    """A :class:`~rog.transport.connection.Pipe` over two in-memory queues (always writable)."""

    def __init__(self, tx: _ByteQueue, rx: _ByteQueue) -> None:
        self.tx, self.rx = tx, rx

    def write(self, data: bytes) -> None:
        self.tx.put(data)

    def wait_writable(self, until: float | None) -> bool:
        return True

    def read_some(self, timeout_s: float | None) -> bytes:
        return self.rx.get(timeout_s)

    def close(self) -> None:
        self.tx.close()
        self.rx.close()

    def abort(self) -> None:
        self.close()


def inproc_pair(
    worker_id: int = 0,
    *,
    worker_config: TransportConfig | None = None,
    ps_config: TransportConfig | None = None,
    clock: Clock | None = None,
) -> tuple[Connection, Connection]:
    """``(worker_end, ps_end)`` connected in memory; each config's ``rate_mbit_at`` shapes that end's writes."""
    a_to_b, b_to_a = _ByteQueue(), _ByteQueue()
    worker = Connection(
        MemoryPipe(a_to_b, b_to_a), role=Role.WORKER, worker_id=worker_id, config=worker_config, clock=clock,
        version=PROTOCOL_VERSION,
    )
    ps = Connection(
        MemoryPipe(b_to_a, a_to_b), role=Role.PS, worker_id=worker_id, config=ps_config, clock=clock,
        version=PROTOCOL_VERSION,
    )
    return worker, ps
