"""TCP connection setup: workers connect, the parameter server listens; both prove the shared secret.

Handshake (all messages in the fixed envelope of :mod:`.messages`)::

    worker -> PS   Hello(version, role=WORKER, worker_id, nonce_w)
    PS -> worker   Challenge(version, nonce_ps)          or Refuse(VERSION / ROLE / WORKER_ID)
    worker -> PS   Auth(HMAC(secret, "worker" | transcript))
    PS -> worker   Welcome(HMAC(secret, "ps" | transcript))    or Refuse(AUTH)

``transcript`` binds the version, role, worker id and both nonces, so a proof cannot be
replayed on another connection or for another worker id.  The worker proves first, so a
stranger learns nothing from the PS; the PS proves second, so a worker cannot be fooled by an
impostor.  Proofs are compared in constant time.  A peer that has not finished within
``handshake_timeout_s`` is dropped; every refusal is a :class:`HandshakeError` with a readable
reason on both ends.  Workers are identified by ``worker_id``, never by address.
"""

from __future__ import annotations

import hashlib
import hmac
import queue
import secrets
import socket
import struct
import threading
import time

from .config import TransportConfig
from .connection import Connection, SocketPipe, tune_socket
from .messages import (
    NONCE_BYTES,
    PROTOCOL_VERSION,
    Auth,
    Challenge,
    HandshakeError,
    Hello,
    Message,
    MessageParser,
    Refuse,
    RefuseReason,
    Role,
    TransportError,
    TransportTimeout,
    Welcome,
    encode_message,
)
from .ratelimit import RealClock

_TRANSCRIPT = struct.Struct(f"<8sHBI{NONCE_BYTES}s{NONCE_BYTES}s")


def _proof(secret: bytes, label: bytes, version: int, role: int, worker_id: int, nonce_w: bytes, nonce_ps: bytes) -> bytes:
    transcript = _TRANSCRIPT.pack(b"ROG-HS01", version, role, worker_id, nonce_w, nonce_ps)
    return hmac.new(secret, label + b"|" + transcript, hashlib.sha256).digest()


class _Exchange:
    """Blocking message exchange with one deadline for the whole handshake."""

    def __init__(self, sock: socket.socket, config: TransportConfig, version: int) -> None:
        self.pipe = SocketPipe(sock, config.handshake_timeout_s)
        self.parser = MessageParser(version, handshake=True)
        self.version = version
        self.deadline = time.monotonic() + config.handshake_timeout_s
        self.timeout_s = config.handshake_timeout_s
        self.pending: list[Message] = []

    def send(self, msg: Message) -> None:
        self.pipe.write(encode_message(msg, self.version))

    def recv(self, what: str) -> Message:
        while not self.pending:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TransportTimeout(f"peer did not send {what} within the {self.timeout_s} s handshake timeout")
            try:
                self.pending.extend(self.parser.feed(self.pipe.read_some(left)))
            except TransportTimeout:
                raise TransportTimeout(
                    f"peer did not send {what} within the {self.timeout_s} s handshake timeout"
                ) from None
        return self.pending.pop(0)

    def refuse(self, reason: RefuseReason, text: str) -> HandshakeError:
        try:
            self.send(Refuse(int(reason), text))
        except TransportError:
            pass
        return HandshakeError(text)

    def connection(self, **kw) -> Connection:
        """The established connection, keeping any bytes or messages that arrived after the handshake."""
        conn = Connection(self.pipe, parser=self.parser, version=self.version, clock=RealClock(), **kw)
        conn.preload(self.pending)
        return conn


def client_handshake(
    sock: socket.socket, config: TransportConfig, worker_id: int, version: int = PROTOCOL_VERSION
) -> Connection:
    """Run the worker side of the handshake on a connected socket; return the connection."""
    secret = config.require_secret()
    ex = _Exchange(sock, config, version)
    peer = ex.pipe.peer
    nonce_w = secrets.token_bytes(NONCE_BYTES)
    ex.send(Hello(version, int(Role.WORKER), worker_id, nonce_w))
    msg = ex.recv("a challenge")
    if isinstance(msg, Refuse):
        raise HandshakeError(f"parameter server {peer} refused worker {worker_id}: {msg.text}")
    if not isinstance(msg, Challenge):
        raise ex.refuse(RefuseReason.PROTOCOL, f"expected a challenge from {peer}, got {type(msg).__name__}")
    if msg.version != version:
        raise ex.refuse(
            RefuseReason.VERSION,
            f"protocol version mismatch: parameter server speaks {msg.version}, worker {worker_id} speaks {version}",
        )
    ex.send(Auth(_proof(secret, b"worker", version, Role.WORKER, worker_id, nonce_w, msg.nonce)))
    reply = ex.recv("its proof")
    if isinstance(reply, Refuse):
        raise HandshakeError(f"parameter server {peer} refused worker {worker_id}: {reply.text}")
    if not isinstance(reply, Welcome):
        raise ex.refuse(RefuseReason.PROTOCOL, f"expected a welcome from {peer}, got {type(reply).__name__}")
    expect = _proof(secret, b"ps", version, Role.WORKER, worker_id, nonce_w, msg.nonce)
    if not hmac.compare_digest(reply.proof, expect):
        raise ex.refuse(
            RefuseReason.AUTH, f"{peer} failed to prove the shared secret: not our parameter server (or a wrong secret)"
        )
    ex.pipe.io_timeout_s = config.io_timeout_s
    return ex.connection(role=Role.WORKER, worker_id=worker_id, config=config)


def server_handshake(
    sock: socket.socket,
    config: TransportConfig,
    version: int = PROTOCOL_VERSION,
    worker_ids: frozenset[int] | None = None,
) -> Connection:
    """Run the parameter-server side of the handshake on an accepted socket; return the connection."""
    secret = config.require_secret()
    ex = _Exchange(sock, config, version)
    peer = ex.pipe.peer
    msg = ex.recv("a hello")
    if not isinstance(msg, Hello):
        raise ex.refuse(RefuseReason.PROTOCOL, f"expected a hello from {peer}, got {type(msg).__name__}")
    if msg.version != version:
        raise ex.refuse(
            RefuseReason.VERSION,
            f"protocol version mismatch: worker {msg.worker_id} at {peer} speaks {msg.version}, "
            f"parameter server speaks {version}",
        )
    if msg.role != Role.WORKER:
        raise ex.refuse(RefuseReason.ROLE, f"peer {peer} claims role {msg.role}; only workers connect to the PS")
    if worker_ids is not None and msg.worker_id not in worker_ids:
        raise ex.refuse(RefuseReason.WORKER_ID, f"worker id {msg.worker_id} is not one of {sorted(worker_ids)}")
    nonce_ps = secrets.token_bytes(NONCE_BYTES)
    ex.send(Challenge(version, nonce_ps))
    auth = ex.recv("its proof")
    if isinstance(auth, Refuse):
        raise HandshakeError(f"worker {msg.worker_id} at {peer} refused: {auth.text}")
    if not isinstance(auth, Auth):
        raise ex.refuse(RefuseReason.PROTOCOL, f"expected a proof from {peer}, got {type(auth).__name__}")
    expect = _proof(secret, b"worker", version, Role.WORKER, msg.worker_id, msg.nonce, nonce_ps)
    if not hmac.compare_digest(auth.proof, expect):
        raise ex.refuse(
            RefuseReason.AUTH,
            f"worker {msg.worker_id} at {peer} failed to prove the shared secret: wrong secret (check ROG_SECRET)",
        )
    ex.send(Welcome(_proof(secret, b"ps", version, Role.WORKER, msg.worker_id, msg.nonce, nonce_ps)))
    ex.pipe.io_timeout_s = config.io_timeout_s
    return ex.connection(role=Role.PS, worker_id=msg.worker_id, config=config)


def connect(
    host: str, port: int, *, worker_id: int, config: TransportConfig, version: int = PROTOCOL_VERSION
) -> Connection:
    """Connect worker ``worker_id`` to the parameter server at ``host:port`` (``version``: for compatibility tests)."""
    if not 0 <= worker_id <= 0xFFFFFFFF:
        raise ValueError(f"worker_id must fit 32 bits, got {worker_id}")
    config.require_secret()
    try:
        sock = socket.create_connection((host, port), timeout=config.handshake_timeout_s)
    except OSError as e:
        raise HandshakeError(f"cannot reach the parameter server at {host}:{port}: {e}") from None
    try:
        tune_socket(sock, config)
        return client_handshake(sock, config, worker_id, version)
    except BaseException:
        sock.close()
        raise


class Listener:
    """The parameter server's listening socket: :meth:`accept` returns authenticated connections.

    Handshakes run in background threads (at most ``max_pending`` at once), so a silent peer
    never blocks the others; it is dropped after ``config.handshake_timeout_s``.  Refused
    peers are recorded in :attr:`refused` as ``(address, reason)``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        config: TransportConfig,
        worker_ids: set[int] | frozenset[int] | None = None,
        max_pending: int = 32,
        version: int = PROTOCOL_VERSION,
    ) -> None:
        config.require_secret()
        self.config = config
        self.version = version
        self.worker_ids = None if worker_ids is None else frozenset(int(w) for w in worker_ids)
        self._sock = socket.create_server((host, port), backlog=64)
        self._sock.settimeout(0.2)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self.refused: list[tuple[tuple, str]] = []
        self._ready: queue.Queue[Connection] = queue.Queue()
        self._slots = threading.BoundedSemaphore(max_pending)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="rog-listener", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                self._record(addr, "too many handshakes in progress")
                sock.close()
                continue
            threading.Thread(target=self._handshake, args=(sock, addr), name="rog-handshake", daemon=True).start()

    def _handshake(self, sock: socket.socket, addr) -> None:
        try:
            tune_socket(sock, self.config)
            conn = server_handshake(sock, self.config, self.version, self.worker_ids)
        except (TransportError, OSError) as e:
            self._record(addr, str(e))
            sock.close()
        else:
            self._ready.put(conn)
        finally:
            self._slots.release()

    def _record(self, addr, reason: str) -> None:
        with self._lock:
            self.refused.append((addr, reason))

    def accept(self, timeout_s: float | None = None) -> Connection:
        """The next authenticated worker connection; TransportTimeout if none within ``timeout_s``."""
        try:
            return self._ready.get(timeout=timeout_s)
        except queue.Empty:
            raise TransportTimeout(f"no worker connected within {timeout_s} s") from None

    def close(self) -> None:
        """Stop accepting (connections already returned stay open)."""
        self._closed.set()
        try:
            self._sock.close()
        except OSError:  # pragma: no cover
            pass
        self._thread.join(timeout=2)

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
