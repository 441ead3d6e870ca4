"""The data-injection relay: injected samples travel worker -> parameter server namespace -> worker.

It runs next to the parameter server (in its network namespace on the emulated testbed), so every
injected sample crosses the sender's shaped uplink and the receiver's shaped downlink, as the
gradients do.  The wire format is fixed binary (no pickle): a 28-byte header

    magic "RGIJ", version u8, kind u8 (1 hello, 2 samples), src u16, dst u16, zero u16,
    iteration u32, n u32, c u16, h u16, w u16, zero u16

followed, for a hello, by ``n = 32`` bytes ``HMAC-SHA256(secret, "rog-inject" + src)`` (a stranger
cannot join), and for samples by ``n`` int64 labels and ``n c h w`` float32 values.  Every length is
bounded before anything is allocated; the relay checks that ``src`` is the sender's own id and
forwards the message unchanged to ``dst`` (queued until ``dst`` has connected).
"""

from __future__ import annotations

import hashlib
import hmac
import queue
import socket
import struct
import threading

import numpy as np

MAGIC = b"RGIJ"
VERSION = 1
HEADER = struct.Struct("<4sBBHHHIIHHHH")
HEADER_BYTES = HEADER.size  # 28
KIND_HELLO, KIND_SAMPLES = 1, 2
TOKEN_BYTES = 32
MAX_SAMPLES = 65536
MAX_SAMPLE_ELEMENTS = 3 * 512 * 512
MAX_BODY_BYTES = 64 << 20


class InjectProtocolError(ValueError):
    """A malformed or unauthenticated injection message."""


def token(secret: bytes, worker: int) -> bytes:
    """The hello's proof that ``worker`` knows the run's secret."""
    return hmac.new(secret, b"rog-inject" + struct.pack("<H", worker), hashlib.sha256).digest()


def encode_samples(src: int, dst: int, iteration: int, x: np.ndarray, y: np.ndarray) -> bytes:
    """One samples message: ``x`` float32 ``(n, c, h, w)``, ``y`` int64 ``(n,)``."""
    x = np.ascontiguousarray(x, dtype="<f4")
    y = np.ascontiguousarray(y, dtype="<i8")
    if x.ndim != 4 or y.shape != (x.shape[0],):
        raise ValueError(f"samples must be x (n, c, h, w) and y (n,), got {x.shape} and {y.shape}")
    n, c, h, w = x.shape
    head = HEADER.pack(MAGIC, VERSION, KIND_SAMPLES, src, dst, 0, iteration & 0xFFFFFFFF, n, c, h, w, 0)
    return b"".join((head, y.tobytes(), x.tobytes()))


def parse_header(buf: bytes) -> tuple[int, int, int, int, int, tuple[int, int, int], int]:
    """``(kind, src, dst, iteration, n, (c, h, w), body_bytes)`` of a checked header."""
    magic, version, kind, src, dst, z16, it, n, c, h, w, z16b = HEADER.unpack(buf)
    if magic != MAGIC or version != VERSION:
        raise InjectProtocolError(f"bad injection header (magic {magic!r}, version {version})")
    if z16 or z16b:
        raise InjectProtocolError("injection header reserved fields are not zero")
    if kind == KIND_HELLO:
        if n != TOKEN_BYTES or c or h or w:
            raise InjectProtocolError("malformed injection hello")
        return kind, src, dst, it, n, (0, 0, 0), TOKEN_BYTES
    if kind != KIND_SAMPLES:
        raise InjectProtocolError(f"unknown injection message kind {kind}")
    elements = c * h * w
    if not 1 <= n <= MAX_SAMPLES or not 1 <= elements <= MAX_SAMPLE_ELEMENTS:
        raise InjectProtocolError(f"injection message of {n} samples of {c}x{h}x{w} is out of bounds")
    body = n * 8 + n * elements * 4
    if body > MAX_BODY_BYTES:
        raise InjectProtocolError(f"injection message body of {body} bytes exceeds {MAX_BODY_BYTES}")
    return kind, src, dst, it, n, (c, h, w), body


def decode_samples(n: int, shape: tuple[int, int, int], body: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of a samples body; refuses labels < 0 and non-finite values."""
    y = np.frombuffer(body, dtype="<i8", count=n).astype(np.int64)
    x = np.frombuffer(body, dtype="<f4", offset=8 * n).reshape(n, *shape).astype(np.float32)
    if (y < 0).any() or not np.isfinite(x).all():
        raise InjectProtocolError("injected samples carry a negative label or non-finite values")
    return x, y


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("injection peer closed the connection")
        buf += part
    return bytes(buf)


class InjectRelay:
    """The relay server: one listening socket, one reader thread per worker connection."""

    def __init__(self, host: str, port: int, n_workers: int, secret: bytes) -> None:
        self.n_workers, self.secret = int(n_workers), secret
        self._sock = socket.create_server((host, port))
        self.address = self._sock.getsockname()[:2]
        self._conns: dict[int, socket.socket] = {}
        self._waiting: dict[int, list[bytes]] = {}
        self._lock = threading.Lock()
        self.forwarded_bytes = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, name="inject-relay", daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        src = None
        try:
            kind, src, _, _, _, _, body = parse_header(_recv_exact(conn, HEADER_BYTES))
            if kind != KIND_HELLO or not 0 <= src < self.n_workers:
                raise InjectProtocolError("the first injection message must be a hello from a worker of this run")
            if not hmac.compare_digest(_recv_exact(conn, body), token(self.secret, src)):
                raise InjectProtocolError(f"worker {src}: injection hello with a wrong secret")
            with self._lock:
                self._conns[src] = conn
                backlog = self._waiting.pop(src, [])
            for msg in backlog:
                self._deliver(src, msg)
            while True:
                head = _recv_exact(conn, HEADER_BYTES)
                kind, s, dst, _, _, _, body = parse_header(head)
                if kind != KIND_SAMPLES or s != src or not 0 <= dst < self.n_workers or dst == src:
                    raise InjectProtocolError(f"worker {src}: samples message with src {s}, dst {dst}")
                self._deliver(dst, head + _recv_exact(conn, body))
        except (ConnectionError, OSError):
            pass
        except InjectProtocolError as e:
            self.errors.append(str(e))
        finally:
            conn.close()

    def _deliver(self, dst: int, msg: bytes) -> None:
        with self._lock:
            conn = self._conns.get(dst)
            if conn is None:
                self._waiting.setdefault(dst, []).append(msg)
                return
            try:
                conn.sendall(msg)
                self.forwarded_bytes += len(msg)
            except OSError:
                self._conns.pop(dst, None)

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._stop.set()
        self._sock.close()
        with self._lock:
            for c in self._conns.values():
                c.close()
            self._conns.clear()


def _dial(address: tuple[str, int], timeout_s: float) -> socket.socket:
    """Connect, retrying while the relay is not listening yet (it starts with the parameter server)."""
    import time

    end = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection(address, timeout=max(1.0, end - time.monotonic()))
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


class InjectClient:
    """A worker's end: ``send`` samples to a peer through the relay; ``drain`` what has arrived."""

    def __init__(self, address: tuple[str, int], worker: int, secret: bytes, timeout_s: float = 30.0) -> None:
        self.worker = int(worker)
        self._sock = _dial(address, timeout_s)
        self._sock.settimeout(None)
        self._sock.sendall(HEADER.pack(MAGIC, VERSION, KIND_HELLO, self.worker, 0, 0, 0, TOKEN_BYTES, 0, 0, 0, 0)
                           + token(secret, self.worker))
        self._inbox: queue.Queue = queue.Queue()
        self.error: str | None = None
        threading.Thread(target=self._read, name=f"inject-w{worker}", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                head = _recv_exact(self._sock, HEADER_BYTES)
                kind, src, dst, it, n, shape, body = parse_header(head)
                if kind != KIND_SAMPLES or dst != self.worker:
                    raise InjectProtocolError(f"worker {self.worker} got an injection message for {dst}")
                x, y = decode_samples(n, shape, _recv_exact(self._sock, body))
                self._inbox.put((src, it, x, y, HEADER_BYTES + body))
        except (ConnectionError, OSError):
            pass
        except InjectProtocolError as e:
            self.error = str(e)

    def send(self, dst: int, iteration: int, x: np.ndarray, y: np.ndarray) -> int:
        """Send samples to worker ``dst``; returns the bytes written (0 once the relay is gone, e.g. a
        restarted parameter server: training goes on without injection, :attr:`error` says why)."""
        if self.error is not None:
            return 0
        msg = encode_samples(self.worker, dst, iteration, x, y)
        try:
            self._sock.sendall(msg)
        except OSError as e:
            self.error = f"the injection relay is gone ({e}); no more samples are injected"
            return 0
        return len(msg)

    def drain(self) -> list:
        """Everything received so far: ``(src, iteration, x, y, bytes)`` tuples."""
        out = []
        while True:
            try:
                out.append(self._inbox.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        """Close the connection."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
