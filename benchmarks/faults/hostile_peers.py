"""Hostile peers against a live parameter server on real loopback sockets.

Two legitimate workers train against a :class:`~rog.runtime.ParameterServer` served from a
:class:`~rog.transport.Listener`; meanwhile strangers connect: a wrong secret, a wrong protocol
version, a peer that sends nothing, one that sends its hello a byte at a time (slowloris), an
impostor claiming worker 0's id without the secret, garbage bytes, a huge length field, and a
flood of silent connections.  Each must be refused or dropped within a bound (the configurable
``handshake_timeout_s`` plus a slack for a loaded machine), the legitimate workers' iterations
must advance during the attacks, and after the final flush every worker must hold
``w0 - sum(updates) / W`` (compression off; :mod:`.conservation` bounds the float32 rounding): the
attacks cost no committed row.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time

import numpy as np

from rog.transport import HandshakeError, Listener, TransportConfig, TransportError, connect
from rog.transport.messages import ENVELOPE, MAGIC, NONCE_BYTES, PROTOCOL_VERSION, Hello, Role, encode_message
from .conservation import lost_rows
from .registry import ScenarioContext, result

SLACK_S = 3.0  # allowance for a loaded 2-core machine on top of the handshake timeout


def _wait_closed(sock: socket.socket, limit_s: float) -> float | None:
    """Seconds until the peer closes (EOF or reset) ``sock``, reading and discarding what it sends; None if not within ``limit_s``."""
    t0 = time.monotonic()
    while True:
        left = limit_s - (time.monotonic() - t0)
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            data = sock.recv(4096)
        except TimeoutError:
            return None
        except OSError:
            return time.monotonic() - t0
        if not data:
            return time.monotonic() - t0


def _raw(address) -> socket.socket:
    return socket.create_connection(address, timeout=5.0)


def attack_wrong_secret(address, cfg: TransportConfig, limit_s: float) -> dict:
    """Full handshake with another secret: refused with a reason (the PS never proves its secret)."""
    bad = TransportConfig(secret=secrets.token_bytes(32), handshake_timeout_s=limit_s)
    t0 = time.monotonic()
    try:
        conn = connect(*address, worker_id=1, config=bad)
    except HandshakeError as e:
        return {"refused": True, "seconds": time.monotonic() - t0, "reason": str(e)}
    conn.abort()
    return {"refused": False, "seconds": time.monotonic() - t0, "reason": "a wrong secret was accepted"}


def attack_impostor(address, cfg: TransportConfig, limit_s: float) -> dict:
    """Claims worker 0's id (which is connected and training) without the secret."""
    bad = TransportConfig(secret=secrets.token_bytes(32), handshake_timeout_s=limit_s)
    t0 = time.monotonic()
    try:
        conn = connect(*address, worker_id=0, config=bad)
    except HandshakeError as e:
        return {"refused": True, "seconds": time.monotonic() - t0, "reason": str(e)}
    conn.abort()
    return {"refused": False, "seconds": time.monotonic() - t0, "reason": "an impostor was accepted"}


def attack_wrong_version(address, cfg: TransportConfig, limit_s: float) -> dict:
    """The right secret, another protocol version: refused with both versions named."""
    t0 = time.monotonic()
    try:
        conn = connect(*address, worker_id=1, config=cfg, version=PROTOCOL_VERSION + 1)
    except HandshakeError as e:
        ok = str(PROTOCOL_VERSION) in str(e) and str(PROTOCOL_VERSION + 1) in str(e)
        return {"refused": ok, "seconds": time.monotonic() - t0, "reason": str(e)}
    conn.abort()
    return {"refused": False, "seconds": time.monotonic() - t0, "reason": "another protocol version was accepted"}


def attack_silent(address, cfg: TransportConfig, limit_s: float) -> dict:
    """Connects and sends nothing: dropped after the handshake timeout."""
    with _raw(address) as s:
        took = _wait_closed(s, limit_s)
    return {"refused": took is not None, "seconds": took, "reason": "dropped" if took is not None else "still open"}


def attack_slowloris(address, cfg: TransportConfig, limit_s: float, byte_every_s: float = 0.2) -> dict:
    """Sends a valid hello one byte every ``byte_every_s``: the handshake deadline covers the whole exchange."""
    hello = encode_message(Hello(PROTOCOL_VERSION, int(Role.WORKER), 1, secrets.token_bytes(NONCE_BYTES)))
    t0 = time.monotonic()
    with _raw(address) as s:
        for i in range(len(hello) * 10):  # longer than the hello: keep dribbling until dropped
            if time.monotonic() - t0 > limit_s:
                break
            try:
                s.sendall(hello[i % len(hello) : i % len(hello) + 1])
            except OSError:
                return {"refused": True, "seconds": time.monotonic() - t0, "reason": "dropped while dribbling"}
            s.settimeout(byte_every_s)
            try:
                data = s.recv(4096)
                if not data:
                    return {"refused": True, "seconds": time.monotonic() - t0, "reason": "dropped while dribbling"}
            except TimeoutError:
                pass
            except OSError:
                return {"refused": True, "seconds": time.monotonic() - t0, "reason": "reset while dribbling"}
        took = _wait_closed(s, max(0.0, limit_s - (time.monotonic() - t0)))
    return {"refused": took is not None, "seconds": None if took is None else time.monotonic() - t0,
            "reason": "dropped" if took is not None else "still open"}


def attack_garbage(address, cfg: TransportConfig, limit_s: float) -> dict:
    """Sends an HTTP request (not our magic): dropped at once."""
    t0 = time.monotonic()
    with _raw(address) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: robot\r\n\r\n")
        took = _wait_closed(s, limit_s)
    return {"refused": took is not None, "seconds": None if took is None else time.monotonic() - t0, "reason": "dropped"}


def attack_huge_length(address, cfg: TransportConfig, limit_s: float) -> dict:
    """An envelope announcing a 4 GiB hello: refused before anything is buffered."""
    t0 = time.monotonic()
    with _raw(address) as s:
        s.sendall(ENVELOPE.pack(MAGIC, PROTOCOL_VERSION, Hello.TYPE, 0, 0xFFFFFFFF) + b"\x00" * 64)
        took = _wait_closed(s, limit_s)
    return {"refused": took is not None, "seconds": None if took is None else time.monotonic() - t0, "reason": "dropped"}


def attack_flood(address, cfg: TransportConfig, limit_s: float, n: int = 100) -> dict:
    """``n`` silent connections at once: the listener holds at most ``max_pending`` handshakes and drops
    the rest at once; all are gone after the timeout, and the listener still answers a new hello."""
    t0 = time.monotonic()
    socks = []
    for _ in range(n):
        try:
            socks.append(_raw(address))
        except OSError:
            pass  # a full backlog refusing a connect is also a refusal
    closed = []
    for s in socks:
        took = _wait_closed(s, max(0.1, limit_s - (time.monotonic() - t0)))
        closed.append(took is not None)
        s.close()
    all_gone = time.monotonic() - t0
    # the listener still works: a hello with an id outside the set is refused with a reason (not ignored)
    t1 = time.monotonic()
    try:
        conn = connect(*address, worker_id=999, config=cfg)
        conn.abort()
        answered = "accepted an unknown worker id"
    except HandshakeError as e:
        answered = str(e)
    return {"refused": all(closed) and "999" in answered, "seconds": all_gone, "connections": n,
            "opened": len(socks), "closed": sum(closed), "after_flood_s": time.monotonic() - t1,
            "after_flood_reply": answered}


ATTACKS = {
    "wrong_secret": attack_wrong_secret, "impostor_id": attack_impostor, "wrong_version": attack_wrong_version,
    "silent": attack_silent, "slowloris": attack_slowloris, "garbage": attack_garbage,
    "huge_length": attack_huge_length, "flood": attack_flood,
}


class LegitRun:
    """A PS and ``n_workers`` legitimate workers training over loopback sockets until :meth:`finish`."""

    def __init__(self, cfg: TransportConfig, n_workers: int = 2, policy: str = "ROG", seed: int = 0) -> None:
        from rog.codecs.compression import RawCodec
        from rog.local_update import LocalUpdate, LocalUpdateConfig
        from rog.policies import make_policy
        from rog.runtime import ParameterServer
        from .wire_fuzz import CHUNK_BYTES, PARTITION

        self.part, self.W, self.cfg, self.policy = PARTITION, n_workers, cfg, policy
        self.codec = RawCodec()
        self.chunk = CHUNK_BYTES["raw"]
        self.listener = Listener("127.0.0.1", 0, config=cfg, worker_ids=set(range(n_workers)))
        self.ps = ParameterServer(PARTITION, n_workers, make_policy(policy, 2), self.codec, chunk_bytes=self.chunk,
                                  wait_timeout_s=60.0, join_timeout_s=60.0)
        rng = np.random.default_rng(seed)
        self.w0 = rng.standard_normal(PARTITION.n_elements).astype(np.float32)
        self.targets = rng.standard_normal((n_workers, PARTITION.n_elements)).astype(np.float32)
        self.updates: list[list[np.ndarray]] = [[] for _ in range(n_workers)]
        self.params: list = [None] * n_workers
        self.iterations = [0] * n_workers
        self.errors: dict[int, str] = {}
        self.stop = threading.Event()
        rule = LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, milestones=())
        outer = self

        class Recording(LocalUpdate):
            def __init__(self, r):
                super().__init__(PARTITION.n_elements, rule)
                self.r = r

            def step(self, grad, p, it, out=None):
                u = super().step(grad, p, it, out)
                outer.updates[self.r].append(u.copy())
                return u

        self._recording = Recording
        self._make_policy = make_policy

    def _worker(self, r: int) -> None:
        from rog.runtime import WorkerEngine, aligned_zeros

        conn = None
        try:
            p = aligned_zeros(self.part.n_elements)
            p[:] = self.w0
            self.params[r] = p
            conn = connect(*self.listener.address, worker_id=r, config=self.cfg)
            eng = WorkerEngine(conn, self.part, p, self._make_policy(self.policy, 2), self.codec, self._recording(r),
                               chunk_bytes=self.chunk, wait_timeout_s=60.0)
            eng.join(60.0)
            while not self.stop.is_set():
                eng.step((p - self.targets[r]) * np.float32(0.5))
                self.iterations[r] += 1
                time.sleep(0.02)  # a few iterations per second: attacks overlap many of them
            eng.flush()
            eng.close()
        except BaseException as e:  # noqa: BLE001 - reported
            self.errors[r] = f"{type(e).__name__}: {e}"
            if conn is not None:
                conn.abort()

    def start(self) -> None:
        """Serve and start the workers."""
        self.ps_thread = self.ps.start(self.listener)
        self.threads = [threading.Thread(target=self._worker, args=(r,), daemon=True) for r in range(self.W)]
        for t in self.threads:
            t.start()

    def wait_iterations(self, n: int, timeout_s: float) -> bool:
        """True once every worker finished ``n`` iterations."""
        end = time.monotonic() + timeout_s
        while min(self.iterations) < n:
            if time.monotonic() > end or self.errors:
                return False
            time.sleep(0.02)
        return True

    def finish(self, timeout_s: float = 60.0) -> dict:
        """Stop training, flush, close; returns errors and the conservation check."""
        self.stop.set()
        for t in self.threads:
            t.join(timeout_s)
        self.ps_thread.join(timeout_s)
        hung = any(t.is_alive() for t in self.threads) or self.ps_thread.is_alive()
        if hung:
            self.ps.stop()
        self.listener.close()
        cons = lost_rows(self.params, self.w0, (u for ups in self.updates for u in ups), self.W, self.part.row_start)
        return {"hung": hung, "worker_errors": dict(self.errors),
                "ps_errors": [f"worker {r}: {type(e).__name__}: {e}" for r, e in self.ps.errors],
                "iterations": list(self.iterations), **cons}


def hostile_peers(ctx: ScenarioContext, attacks: tuple[str, ...] | None = None) -> dict:
    """Scenario: every attack of :data:`ATTACKS` against a training PS; bounds and progress measured."""
    handshake_timeout_s = 1.0 if ctx.quick else 2.0
    cfg = TransportConfig(secret=secrets.token_bytes(32), handshake_timeout_s=handshake_timeout_s)
    bound_s = handshake_timeout_s + SLACK_S
    run = LegitRun(cfg, seed=ctx.seed)
    run.start()
    details: dict = {"handshake_timeout_s": handshake_timeout_s, "bound_s": bound_s, "attacks": {}}
    problems: list[str] = []
    try:
        if not run.wait_iterations(2, 60.0):
            return result("hostile_peers", False, details, error=f"legitimate workers did not start: {run.errors}")
        for name in attacks or tuple(ATTACKS):
            before = list(run.iterations)
            try:
                out = ATTACKS[name](run.listener.address, cfg, bound_s + 1.0)
            except (OSError, TransportError) as e:
                out = {"refused": False, "seconds": None, "reason": f"{type(e).__name__}: {e}"}
            # the legitimate workers advance while (or right after) the attack: wait for one more iteration each
            progressed = run.wait_iterations(max(before) + 1, 30.0)
            out["legit_iterations"] = [before, list(run.iterations)]
            details["attacks"][name] = out
            if not out["refused"]:
                problems.append(f"{name}: not refused ({out.get('reason')})")
            elif out["seconds"] is None or out["seconds"] > bound_s:
                problems.append(f"{name}: took {out['seconds']} s, bound {bound_s} s")
            if not progressed:
                problems.append(f"{name}: legitimate workers stopped advancing at {run.iterations}")
        details["listener_refused"] = len(run.listener.refused)
        details["refusal_reasons"] = sorted({why.split(":")[0][:80] for _, why in run.listener.refused})
    finally:
        end = run.finish()
    details.update(end)
    if end["hung"] or end["worker_errors"] or end["ps_errors"]:
        problems.append(f"the legitimate run failed: hung={end['hung']} {end['worker_errors']} {end['ps_errors']}")
    if end["rows_lost"]:
        problems.append(f"{end['rows_lost']} rows differ from w0 - sum(updates)/W after the flush")
    if problems:
        return result("hostile_peers", False, details, rows_lost=end["rows_lost"], error="; ".join(problems))
    return result("hostile_peers", True, details, rows_lost=end["rows_lost"])


SCENARIOS = {"hostile_peers": hostile_peers}
