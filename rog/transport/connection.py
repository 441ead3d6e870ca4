"""One authenticated connection between a worker and the parameter server.

A :class:`Connection` moves typed messages (:mod:`.messages`) over a byte :class:`Pipe` (a TCP
socket, or an in-process buffer from :mod:`.inproc`), optionally shaped by a token bucket, and
runs transmissions (:mod:`.stream`).  One thread uses a connection at a time; ``close`` may be
called from anywhere.

Socket tuning (docs/design.md#transport-deadlines): ``TCP_NODELAY`` so a
piece leaves at once, a small ``SO_SNDBUF`` and ``TCP_NOTSENT_LOWAT`` so at most about
``2 * sndbuf_bytes`` (the kernel doubles the request) can still be queued when a deadline
passes, and a writability wait bounded by the deadline before every piece.  What is already
queued still has to cross the link, so a speculative piece is also refused when the queue's
measured drain rate (:mod:`.drain`, from ``SIOCOUTQNSD`` / ``SIOCOUTQ``) says it would arrive
after the deadline.
"""

from __future__ import annotations

import fcntl
import select
import socket
import struct
import termios
import threading
import time
from collections import deque
from typing import Callable, Iterable, Protocol

from .config import TransportConfig
from .drain import DrainMeter
from .messages import (
    PROTOCOL_VERSION,
    Ack,
    Begin,
    Bye,
    Direction,
    Error,
    LinkClosed,
    Message,
    MessageParser,
    ProtocolError,
    Role,
    TransportError,
    TransportTimeout,
    encode_message,
)
from .ratelimit import Clock, RealClock, TokenBucket


class Pipe(Protocol):
    """A reliable, ordered byte stream (what TCP gives)."""

    def write(self, data: bytes) -> None:
        """Write all of ``data`` (blocking)."""

    def wait_writable(self, until: float | None) -> bool:
        """Wait until a write would not queue much; False if clock time ``until`` came first."""

    def read_some(self, timeout_s: float | None) -> bytes:
        """Some bytes (never empty); LinkClosed at end of stream, TransportTimeout after ``timeout_s``."""

    def close(self) -> None:
        """Close the stream (idempotent)."""

    def abort(self) -> None:
        """Close and drop whatever is still queued for sending (idempotent)."""

    # Optional: ``send_queue() -> (unsent, unacknowledged) | None``, bytes written and not yet sent,
    # and not yet acknowledged by the peer (a pipe without it gets no drain-aware deadline check).


def tune_socket(sock: socket.socket, config: TransportConfig) -> None:
    """Per-piece latency and a bounded kernel send queue (see the module docstring)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, config.sndbuf_bytes)
    lowat = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if lowat is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, lowat, config.notsent_lowat_bytes)
        except OSError:  # pragma: no cover - kernels without it; SO_SNDBUF still bounds the queue
            pass


class SocketPipe:
    """A :class:`Pipe` over a connected TCP socket."""

    READ_BYTES = 256 * 1024

    def __init__(self, sock: socket.socket, io_timeout_s: float, clock: Clock | None = None) -> None:
        self.sock = sock
        self.io_timeout_s = io_timeout_s
        self.clock = clock if clock is not None else RealClock()
        self._closed = False
        try:
            self.peer = sock.getpeername()
        except OSError:
            self.peer = ("?", 0)

    def write(self, data: bytes) -> None:
        try:
            self.sock.settimeout(self.io_timeout_s)
            self.sock.sendall(data)
        except TimeoutError:
            raise TransportTimeout(f"peer {self.peer} accepted no data for {self.io_timeout_s} s") from None
        except OSError as e:
            raise LinkClosed(f"connection to {self.peer} failed while writing: {e}") from None

    def wait_writable(self, until: float | None) -> bool:
        if until is None:
            return True
        poller = select.poll()
        poller.register(self.sock, select.POLLOUT)
        while True:
            left = until - self.clock.now()
            if left <= 0:
                return bool(poller.poll(0))
            if poller.poll(max(1, int(left * 1000 + 0.999))):
                return True

    SIOCOUTQNSD = 0x894B  # Linux: bytes in the send queue not yet sent (no Python constant for it)

    def send_queue(self) -> tuple[int, int] | None:
        """``(unsent, unacknowledged)`` bytes of the kernel's send queue (SIOCOUTQNSD, SIOCOUTQ);
        None where the kernel cannot tell (not Linux, closed socket)."""
        if self._closed:
            return None
        try:
            fd = self.sock.fileno()
            unsent = struct.unpack("i", fcntl.ioctl(fd, self.SIOCOUTQNSD, b"\0\0\0\0"))[0]
            queued = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        except (OSError, ValueError):
            return None
        return unsent, queued

    def read_some(self, timeout_s: float | None) -> bytes:
        try:
            self.sock.settimeout(timeout_s)
            data = self.sock.recv(self.READ_BYTES)
        except TimeoutError:
            raise TransportTimeout(f"nothing from {self.peer} for {timeout_s} s") from None
        except OSError as e:
            raise LinkClosed(f"connection to {self.peer} failed while reading: {e}") from None
        if not data:
            raise LinkClosed(f"{self.peer} closed the connection")
        return data

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.sock.close()
            except OSError:  # pragma: no cover
                pass

    def abort(self) -> None:
        """SO_LINGER 0 then close: the kernel discards the send queue and resets the connection."""
        if not self._closed:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:  # pragma: no cover
                pass
            self.close()


class Connection:
    """Messages and transmissions between one worker and the parameter server.

    ``role`` is this end's role; ``worker_id`` identifies the worker of the connection (the
    handshake carries it, never the IP address).  ``config.rate_mbit_at`` shapes this end's
    writes with a :class:`TokenBucket`.
    """

    def __init__(
        self,
        pipe: Pipe,
        *,
        role: Role,
        worker_id: int,
        config: TransportConfig | None = None,
        clock: Clock | None = None,
        version: int = PROTOCOL_VERSION,
        parser: MessageParser | None = None,
    ) -> None:
        self.pipe = pipe  # the byte stream (exposed for tests and diagnostics)
        self.role = Role(role)
        self.worker_id = int(worker_id)
        self.config = config if config is not None else TransportConfig()
        self.clock = clock if clock is not None else RealClock()
        self.version = version
        self._parser = parser if parser is not None else MessageParser(version)
        self._parser.handshake = False
        self._pending: deque[tuple[Message, float]] = deque()  # parsed, not yet returned
        self.limiter = (
            TokenBucket(self.config.rate_mbit_at, burst_bytes=self.config.burst_bytes, clock=self.clock)
            if self.config.rate_mbit_at is not None
            else None
        )
        probe = getattr(pipe, "send_queue", None)
        self._send_queue = probe if (callable(probe) and self.config.drain_aware) else None
        self.drain = DrainMeter()  # the send queue's drain rate (used when the pipe reports its queue)
        self.drain_refusals = 0  # speculative pieces refused because they would arrive after their deadline
        self._next_tid = 1
        self.last_rx_tid = 0  # newest transmission id received
        self.last_rx_iteration = 0  # newest iteration received (pushes at the PS, pulls at a worker)
        self.bytes_written = 0
        self.bytes_read = 0
        self.last_message: Message | None = None  # the message recv last returned, and when it arrived
        self.last_message_at = 0.0
        self.last_bytes_monotonic_s = time.monotonic()  # when bytes last arrived (real time, for a peer's liveness)
        self.closed = False
        self._close_lock = threading.Lock()
        self._write_lock = threading.Lock()  # a message's bytes stay together when two threads send
        # message type -> handler(msg, arrived_at): taken out of the stream as parsed, never returned by recv
        self.out_of_band: dict[type, Callable[[Message, float], None]] = {}

    def __repr__(self) -> str:
        return f"Connection(role={self.role.name}, worker_id={self.worker_id}, closed={self.closed})"

    # ------------------------------------------------------------------ directions
    @property
    def send_direction(self) -> Direction:
        """Direction of this end's transmissions (a worker pushes, the PS pulls)."""
        return Direction.PUSH if self.role == Role.WORKER else Direction.PULL

    @property
    def receive_direction(self) -> Direction:
        """Direction of the transmissions this end receives."""
        return Direction.PULL if self.role == Role.WORKER else Direction.PUSH

    def take_tid(self) -> int:
        """A fresh transmission id for this end."""
        tid = self._next_tid
        self._next_tid += 1
        return tid

    # ------------------------------------------------------------------ bytes
    def write_raw(self, data: bytes, until: float | None = None) -> bool:
        """Write one encoded message, shaped; False (nothing written) if clock time ``until`` comes
        first, or if the send queue's drain rate says the message would be through only after it."""
        if self.closed:
            raise LinkClosed("connection is closed")
        with self._write_lock:
            return self._write_locked(data, until)

    def _write_locked(self, data: bytes, until: float | None) -> bool:
        n = len(data)
        if self.limiter is not None and not self.limiter.acquire(n, until):
            return False
        if not self.pipe.wait_writable(until):
            if self.limiter is not None:
                self.limiter.refund(n)
            return False
        q = self._sample_queue()
        if until is not None and q is not None and q[1] > 0:  # a backlog: is this piece through by the deadline?
            finish_s = self._finish_s(q, n, until)
            now = self.clock.now()
            if now >= until or (finish_s is not None and now + finish_s > until):
                self.drain_refusals += 1
                if self.limiter is not None:
                    self.limiter.refund(n)
                return False
        self.pipe.write(data)
        self.bytes_written += n
        self._sample_queue()
        return True

    DRAIN_PROBE_S = 0.005  # poll period while the drain rate is still unknown (no busy interval seen yet)

    def _finish_s(self, q: tuple[int, int], n: int, until: float) -> float | None:
        """Predicted seconds until ``n`` bytes written now are through, behind the send queue ``q``.

        With no rate estimate (the first transmission over a connection, or an expired one) and
        bytes waiting unsent, watch the queue a few milliseconds: a link that keeps TCP waiting gives an
        estimate within ``drain.min_busy_s``; one that empties the queue needs no check."""
        finish_s = self.drain.finish_s(q[1], n, self.clock.now())
        while finish_s is None and q is not None and q[0] > 0 and self.clock.now() < until:
            self.clock.sleep(self.DRAIN_PROBE_S)
            q = self._sample_queue()
            finish_s = None if q is None else self.drain.finish_s(q[1], n, self.clock.now())
        return finish_s

    def _sample_queue(self) -> tuple[int, int] | None:
        """``(unsent, unacknowledged)`` bytes in the kernel (None if the pipe cannot tell); feeds the drain meter."""
        if self._send_queue is None:
            return None
        q = self._send_queue()
        if q is None:
            return None
        unsent, queued = q
        if not 0 <= unsent <= queued <= self.bytes_written:
            return None  # e.g. handshake bytes written before this object existed are still queued
        self.drain.observe(self.clock.now(), self.bytes_written, unsent)
        return unsent, queued

    def preload(self, messages) -> None:
        """Queue messages that arrived before this object existed (right after the handshake)."""
        t = self.clock.now()
        self._pending.extend((msg, t) for msg in messages)

    def _fill(self, timeout_s: float | None) -> None:
        data = self.pipe.read_some(timeout_s)
        t = self.clock.now()
        self.last_bytes_monotonic_s = time.monotonic()
        self.bytes_read += len(data)
        for msg in self._parser.feed(data):
            handler = self.out_of_band.get(type(msg))
            if handler is not None:
                handler(msg, t)
            else:
                self._pending.append((msg, t))

    POLL_S = 1e-4  # how long :meth:`poll` waits for bytes that are not there yet

    def poll(self) -> None:
        """Read what has arrived without waiting (out-of-band handlers run; other messages queue for recv)."""
        while True:
            try:
                self._fill(self.POLL_S)
            except TransportTimeout:
                return

    # ------------------------------------------------------------------ messages
    def send(self, msg: Message) -> None:
        """Send one message (waits for the rate limiter, never for a deadline)."""
        self.write_raw(encode_message(msg, self.version))

    def recv_timed(self, timeout_s: float | None = None) -> tuple[Message, float]:
        """The next message and the clock time its last byte arrived.

        ``timeout_s`` is real time (also under a virtual clock); None waits forever.
        """
        if not self._pending:
            end = None if timeout_s is None else time.monotonic() + timeout_s
            while not self._pending:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise TransportTimeout(f"no message for {timeout_s} s")
                self._fill(left)
        item = self._pending.popleft()
        self.last_message, self.last_message_at = item
        return item

    def recv(self, timeout_s: float | None = None) -> Message:
        """The next message (control messages, :class:`Begin`, :class:`Bye`, ...)."""
        return self.recv_timed(timeout_s)[0]

    def await_ack(self, tid: int, timeout_s: float) -> tuple[Ack, float]:
        """Read until the acknowledgement of transmission ``tid``; other messages stay queued for :meth:`recv`."""
        skipped: list[tuple[Message, float]] = []
        try:
            while True:
                msg, t = self.recv_timed(timeout_s)
                if isinstance(msg, Ack):
                    if msg.tid != tid:
                        raise ProtocolError(f"acknowledgement for transmission {msg.tid}, expected {tid}")
                    return msg, t
                if isinstance(msg, Bye):
                    raise LinkClosed(f"peer said bye while transmission {tid} awaited its ack: {msg.text}")
                if isinstance(msg, Error):
                    raise TransportError(f"peer reported error {msg.code} during transmission {tid}: {msg.text}")
                skipped.append((msg, t))
        finally:
            self._pending.extendleft(reversed(skipped))

    # ------------------------------------------------------------------ transmissions
    def send_transmission(
        self,
        frames: Iterable[bytes] | Callable[[int], bytes],
        *,
        n_frames: int,
        iteration: int,
        mandatory: int,
        deadline_s: float | None,
        more: bool = False,
    ):
        """Send frames speculatively under a deadline; see :func:`rog.transport.stream.send_transmission`."""
        from .stream import send_transmission

        return send_transmission(
            self, frames, n_frames=n_frames, iteration=iteration, mandatory=mandatory, deadline_s=deadline_s, more=more
        )

    def receive_transmission(self, begin: Begin, validator, on_frame=None, begin_at: float | None = None):
        """Receive the transmission ``begin`` announced; see :func:`rog.transport.stream.receive_transmission`."""
        from .stream import receive_transmission

        return receive_transmission(self, begin, validator, on_frame=on_frame, begin_at=begin_at)

    # ------------------------------------------------------------------ closing
    def close(self, reason: str = "") -> None:
        """Say bye (best effort) and close the stream."""
        with self._close_lock:
            if self.closed:
                return
            try:
                data = encode_message(Bye(reason), self.version)
                if self.limiter is not None:
                    self.limiter.tokens = max(self.limiter.tokens, len(data))  # never wait to say bye
                self.write_raw(data)
            except (TransportError, OSError):
                pass
            self.closed = True
            self.pipe.close()

    def abort(self) -> None:
        """Close without a word, dropping anything still queued (the peer sees the stream end)."""
        with self._close_lock:
            self.closed = True
            self.pipe.abort()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
