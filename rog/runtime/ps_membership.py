"""The parameter server's membership: who joined, flushed, finished or is gone; join, loss, eviction and rejoin.

A worker whose connection breaks is lost, evicted after ``evict_after_s``, and may come back with
:class:`~rog.runtime.messages.Rejoin` (the rejoin exchange settles what was in flight).  :class:`Membership` owns
the sets, the loss clocks and each worker's current connection; the server holds one (``ps.membership``), which
reads the others' state through the server (``ps.state``, ``ps.exchange``, ``ps.team``) under the server's lock.
"""

from __future__ import annotations

import time
import weakref

import numpy as np

from ..transport import Begin, Connection, Error, ProtocolError
from .errors import RuntimeFailure
from .messages import EXEMPT_ITERATION, Join, Rejoin, RejoinReply, Resync, layout_digest

__all__ = ["Membership", "Left"]


class Left(RuntimeFailure):
    """The worker said bye without flushing: it left for good (not a broken link)."""


class Membership:
    """``joined``, ``flushed``, ``finished`` (flushed and said bye) and ``failed`` (gone: evicted and not back, or
    left); ``lost`` (worker -> when its link broke: the eviction clock), ``away_since`` (its first loss not yet settled
    by a rejoin), ``conns`` (each worker's current connection), ``alive`` (connection threads per worker),
    ``resumed``/``grace_until`` (a resumed PS evicts nobody before then), ``barrier_passed`` (some worker's flush pull
    went ahead: a gone worker can no longer come back)."""

    def __init__(self, ps, evict_after_s: float) -> None:
        self.ps = ps
        self.evict_after_s = float(evict_after_s)
        self.joined: set[int] = set()
        self.flushed: set[int] = set()
        self.finished: set[int] = set()
        self.failed: set[int] = set()
        self.lost: dict[int, float] = {}
        self.away_since: dict[int, float] = {}
        self.losses_recorded: weakref.WeakSet = weakref.WeakSet()  # links whose loss is recorded (once each)
        self.conns: dict[int, Connection] = {}
        self.alive: dict[int, int] = {}
        self.rejoining: set[int] = set()  # ids of rejoin connections registered whose handler still runs
        self.resumed = False
        self.grace_until = 0.0
        self.barrier_passed = False

    def done(self) -> bool:
        """Every worker slot has finished or is gone (and the initial join happened, or the PS resumed)."""
        W = self.ps.n_workers
        return (len(self.joined) == W or self.resumed) and all(r in self.finished or r in self.failed for r in range(W))

    def all_flushed(self) -> bool:
        """Every worker still counted has flushed (the flush barrier)."""
        return set(range(self.ps.n_workers)) - self.failed <= self.flushed | self.finished

    def masks(self) -> dict[str, np.ndarray]:
        """``joined``, ``flushed``, ``finished``, ``gone`` as (W,) masks (a checkpoint's part)."""
        W = self.ps.n_workers

        def mask(ids) -> np.ndarray:
            m = np.zeros(W, dtype=bool)
            m[sorted(i for i in ids if 0 <= i < W)] = True
            return m

        return dict(joined=mask(self.joined), flushed=mask(self.flushed), finished=mask(self.finished),
                    gone=mask(self.failed))

    def restore(self, arrays: dict[str, np.ndarray], grace_s: float) -> None:
        """After a PS restart from a checkpoint: every unfinished worker is lost until it comes back within
        ``grace_s`` (no eviction before then)."""
        ids = lambda key: set(np.flatnonzero(arrays[key]).tolist())  # noqa: E731
        self.joined, self.flushed, self.finished, self.failed = ids("joined"), ids("flushed"), ids("finished"), ids("gone")
        now = time.monotonic()
        for r in range(self.ps.n_workers):
            if r not in self.finished and r not in self.failed:
                self.lost[r] = now
        self.resumed = True
        self.grace_until = now + grace_s

    def record_loss(self, r: int, conn: Connection, reason: str, noticed_by: str) -> bool:
        """Record once that worker ``r``'s link ``conn`` broke, whichever thread sees it first (the caller
        holds the lock): the link's own thread, or :meth:`rejoin` superseding a link whose loss nobody
        recorded (the worker noticed first).  Returns False when this link's loss was recorded already."""
        if conn in self.losses_recorded:
            return False
        self.losses_recorded.add(conn)
        now = time.monotonic()
        fields = dict(worker=r, reason=reason[:300], iteration=int(self.ps.state.push_iter[r]), noticed_by=noticed_by)
        if noticed_by == "rejoin":  # the link last delivered bytes then: the worker is away since at most that
            fields["heard_s_ago"] = max(0.0, now - conn.last_bytes_monotonic_s)
            self.away_since.setdefault(r, min(now, conn.last_bytes_monotonic_s))
        else:
            self.lost[r] = now
            self.away_since.setdefault(r, now)
        self.ps.fault("worker_lost", **fields)
        return True

    def tick(self) -> None:
        """Evict lost workers whose ``evict_after_s`` has passed (the caller holds the lock)."""
        now = time.monotonic()
        if now < self.grace_until:
            return
        for r, t in list(self.lost.items()):
            if r not in self.failed and now - t >= self.evict_after_s:
                self.evict(r, now - t)

    def evict(self, r: int, lost_s: float) -> None:
        """Worker ``r`` no longer counts in the gates (the caller holds the lock)."""
        ps = self.ps
        ps.state.active[r] = False
        self.failed.add(r)
        ps.admission.forget(r)
        ps.fault("worker_evicted", worker=r, level="warning", gap_s=lost_s, iteration=int(ps.state.push_iter[r]),
                 reason=f"worker {r} did not come back within {self.evict_after_s} s: evicted from the staleness gate")
        ps.cond.notify_all()

    def connection_failed(self, r: int, conn: Connection, e: BaseException, joined: bool, current: bool) -> None:
        """Worker ``r``'s connection ``conn`` (``current``: its newest when it failed) ended with ``e`` (the caller
        holds the lock): it left, or its link is lost (evicted at once with ``evict_after_s`` 0), or its first join
        failed and nobody waits for it."""
        ps, reason = self.ps, f"{type(e).__name__}: {e}"
        if current and r in self.joined:  # also a rejoin that broke half-way: lost again
            if isinstance(e, Left):
                self.failed.add(r)
                ps.state.active[r] = False  # never wait on a worker that left
                ps.fault("worker_left", worker=r, level="warning", reason=reason[:300], iteration=int(ps.state.push_iter[r]))
            elif self.record_loss(r, conn, reason, noticed_by="connection") and self.evict_after_s == 0:
                self.evict(r, 0.0)
        elif joined or id(conn) in self.rejoining:  # a newer link took over: recorded there unless seen first
            if not isinstance(e, Left):
                self.record_loss(r, conn, reason + " (a newer link had already taken over)", noticed_by="connection")
        elif 0 <= r < ps.n_workers and r not in self.joined and not self.resumed:
            self.failed.add(r)  # its first join failed: nobody waits for it

    def connection_closed(self, r: int, conn: Connection, ok: bool, joined: bool) -> None:
        """Worker ``r``'s connection thread ends (``ok``: it flushed and said bye; the caller holds the lock)."""
        self.rejoining.discard(id(conn))
        self.alive[r] -= 1
        if self.conns.get(r) is conn:
            del self.conns[r]
            if ok:
                self.finished.add(r)
                self.ps.state.active[r] = False
        if joined:
            self.ps.admission.forget(r)
        self.ps.cond.notify_all()

    def check_layout(self, msg, r: int) -> list[str]:
        """What in a Join or Rejoin differs from the PS's model, codec and policy."""
        ps, part = self.ps, self.ps.partition
        problems = []
        if not 0 <= r < ps.n_workers:
            problems.append(f"worker id {r} outside [0, {ps.n_workers})")
        if msg.n_elements != part.n_elements or msg.n_rows != part.n_rows or msg.digest != layout_digest(part):
            problems.append(
                f"model layout differs: worker has {msg.n_elements} elements in {msg.n_rows} rows, "
                f"the parameter server {part.n_elements} in {part.n_rows} (both ends must build the same model)"
            )
        if msg.codec_id != ps.codec.codec_id:
            problems.append(f"worker uses codec id {msg.codec_id}, the parameter server {ps.codec.name!r} ({ps.codec.codec_id})")
        if msg.policy != ps.policy.name or msg.threshold != ps.policy.threshold:
            problems.append(
                f"worker runs {msg.policy}({msg.threshold}), the parameter server {ps.policy.name}({ps.policy.threshold})"
            )
        return problems

    def join(self, conn: Connection, msg) -> None:
        """A worker's first start: wait for the whole team, then hand out the team's initial parameters."""
        ps, r = self.ps, conn.worker_id
        if not isinstance(msg, Join):
            raise ProtocolError(f"worker {r}: expected Join or Rejoin, got {type(msg).__name__}")
        problems = self.check_layout(msg, r)
        with ps.cond:
            if r in self.joined:
                problems.append(f"worker id {r} has already joined (a worker coming back sends Rejoin)")
            if self.resumed:
                problems.append("the parameter server resumed a run in progress: workers come back with Rejoin")
            if problems:
                conn.send(Error(3, "join refused: " + "; ".join(problems)))
                raise RuntimeFailure(f"join of worker {r} refused: " + "; ".join(problems))
            self.joined.add(r)
            ps.team.record_join(r, msg)
            self.conns[r] = conn
            ps.cond.notify_all()
            ps.wait(lambda: len(self.joined) == ps.n_workers, ps.join_timeout_s,
                    f"worker {r} waited {ps.join_timeout_s} s for all {ps.n_workers} workers to join", conn)
        ps.team.hand_out(conn, r, msg)  # JoinReply, with the team's initial parameters where they differ

    def rejoin(self, conn: Connection, msg: Rejoin) -> None:
        """A worker comes back on a new connection: settle what was in flight, take its resync, and
        (fresh) send it everything committed so far."""
        ps, state, r = self.ps, self.ps.state, conn.worker_id
        problems = self.check_layout(msg, r)
        t0 = time.monotonic()
        with ps.cond:
            if 0 <= r < ps.n_workers and r not in self.joined:
                problems.append(f"worker {r} never joined this run: a first start sends Join")
            if r in self.finished:
                problems.append(f"worker {r} has already finished")
            if ps.ended or (r in self.failed and self.barrier_passed):
                problems.append("too late: the other workers have already flushed without this worker")
            problems += ps.team.check_restart(msg, r)  # a fresh restart must hold the team's initial parameters
            if problems:
                conn.send(Error(3, "rejoin refused: " + "; ".join(problems)))
                raise RuntimeFailure(f"rejoin of worker {r} refused: " + "; ".join(problems))
            old = self.conns.get(r)
            if old is not None:  # the worker noticed first: its old link's thread has not seen the break yet
                self.record_loss(r, old, "the worker came back on a new link before the parameter server saw "
                                         "its old link break", noticed_by="rejoin")
            self.conns[r] = conn  # from now on the old connection's thread is superseded
            self.rejoining.add(id(conn))  # registered: its loss before the resync ends is a loss again
            ps.exchange.last_push.pop(r, None)
            ps.cond.notify_all()
        if old is not None:
            old.abort()
        with ps.cond:
            ps.wait(lambda: self.alive.get(r, 0) <= 1, ps.wait_timeout_s, f"the old connection of worker {r} to wind down",
                    conn)
            evicted = r in self.failed
            self.lost.pop(r, None)
            self.failed.discard(r)
            if r not in self.flushed:
                state.active[r] = True
            if msg.fresh:  # a restarted worker holds the initial model and nothing else
                state.restart(r)
            if evicted:  # it missed iterations: continue level with the slowest active worker
                state.level_with_slowest(r)
            reply = RejoinReply(ps.n_workers, int(max(state.push_iter[r], 0 if msg.fresh else msg.iteration)),
                                int(state.push_seq[r]), int(state.last_push_delivered[r]), int(state.pull_seq[r]), evicted)
            ps.cond.notify_all()
        conn.send(reply)
        rs = self._receive_resync(conn, r)
        if msg.fresh:
            ps.exchange.send_all(conn, r, EXEMPT_ITERATION)
        with ps.cond:
            fields = dict(worker=r, fresh=bool(msg.fresh), evicted=evicted, iteration=int(reply.iteration),
                          push_frames=int(rs.n_push_frames), pull_frames=int(rs.n_pull_frames))
            away_since = self.away_since.pop(r, None)  # its first unsettled loss (a failed rejoin keeps it)
            if away_since is not None:
                fields["gap_s"] = max(0.0, t0 - away_since)  # lost until it reconnected
            ps.fault("worker_rejoined", **fields)
            ps.cond.notify_all()

    def _receive_resync(self, conn: Connection, r: int) -> Resync:
        """The worker's resync: pushes the PS does not hold (added to every pending buffer), pulls it has not
        counted (subtracted from its own)."""
        ps, state = self.ps, self.ps.state
        rs = conn.recv(ps.wait_timeout_s)
        if not isinstance(rs, Resync):
            raise ProtocolError(f"worker {r}: expected Resync after RejoinReply, got {type(rs).__name__}")
        begin = conn.recv(ps.wait_timeout_s)
        if not isinstance(begin, Begin) or begin.planned != rs.n_push_frames + rs.n_pull_frames:
            raise ProtocolError(f"worker {r}: Resync must be followed by a transmission of "
                                f"{rs.n_push_frames + rs.n_pull_frames} frames")
        res = conn.receive_transmission(begin, ps.exchange.validator)
        conn.last_rx_iteration = 0  # the resync is exempt from the iteration order of the pushes that follow
        if res.delivered != begin.planned:
            raise RuntimeFailure(f"worker {r}: resync delivered {res.delivered} of {begin.planned} frames ({res.reason})")
        chunks = [c for _, c in res.frames]
        with ps.cond:
            for c in chunks[: rs.n_push_frames]:
                rows = state.add_push(ps.codec, [c], ps.exchange.weight)
                state.versions[r, rows] = np.maximum(state.versions[r, rows], rs.pushed_iteration)
                state.updates_since_pull[:, rows] += 1
            state.subtract_pull(ps.codec, r, chunks[rs.n_push_frames:])
            state.push_iter[r] = max(int(state.push_iter[r]), int(rs.pushed_iteration))
            state.push_seq[r] = max(int(state.push_seq[r]), int(rs.push_seq))
            state.pull_seq[r] = max(int(state.pull_seq[r]), int(rs.pull_seq))
            ps.cond.notify_all()
        return rs
