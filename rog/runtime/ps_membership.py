"""The parameter server's membership: join, loss, eviction and rejoin of workers.

A worker whose connection breaks is lost, evicted after ``evict_after_s``, and may come back with
:class:`~rog.runtime.messages.Rejoin` (the rejoin exchange settles what was in flight).  A mixin of
:class:`rog.runtime.server.ParameterServer`, which holds the state and states the guarantees.
"""

from __future__ import annotations

import time

import numpy as np

from ..transport import Begin, Connection, Error, ProtocolError
from .messages import EXEMPT_ITERATION, Join, Rejoin, RejoinReply, Resync, layout_digest
from .worker import RuntimeFailure, subtract_sent


class PSMembership:
    """Who is in the run: join, loss, eviction, rejoin (mixin of ``ParameterServer``)."""

    @property
    def failed_workers(self) -> list[int]:
        """Workers that are gone: evicted and not back, or left without flushing."""
        with self._cond:
            return sorted(self._failed)

    @property
    def finished_workers(self) -> list[int]:
        """Workers that flushed and said bye."""
        with self._cond:
            return sorted(self._finished)

    def _done(self) -> bool:
        """Every worker slot has finished or is gone (and the initial join happened, or the PS resumed)."""
        return (len(self._joined) == self.n_workers or self._resumed) and all(
            r in self._finished or r in self._failed for r in range(self.n_workers))

    def _fault(self, event: str, **fields) -> None:
        rec = dict(event=event, **fields)
        self.faults.append(rec)
        self._log("fault", **rec)

    def _record_loss(self, r: int, conn: Connection, reason: str, noticed_by: str) -> bool:
        """Record once that worker ``r``'s link ``conn`` broke, whichever thread sees it first (the caller
        holds the lock): the link's own thread, or :meth:`_rejoin` superseding a link whose loss nobody
        recorded (the worker noticed first).  Returns False when this link's loss was recorded already."""
        if conn in self._losses_recorded:
            return False
        self._losses_recorded.add(conn)
        now = time.monotonic()
        fields = dict(worker=r, reason=reason[:300], iteration=int(self.push_iter[r]), noticed_by=noticed_by)
        if noticed_by == "rejoin":  # the link last delivered bytes then: the worker is away since at most that
            fields["heard_s_ago"] = max(0.0, now - conn.last_bytes_monotonic_s)
            self._away_since.setdefault(r, min(now, conn.last_bytes_monotonic_s))
        else:
            self._lost[r] = now
            self._away_since.setdefault(r, now)
        self._fault("worker_lost", **fields)
        return True

    def tick(self) -> None:
        """Evict lost workers whose ``evict_after_s`` has passed (called by the serving loop)."""
        with self._cond:
            now = time.monotonic()
            if now < self._grace_until:
                return
            for r, t in list(self._lost.items()):
                if r not in self._failed and now - t >= self.evict_after_s:
                    self._evict(r, now - t)

    def _evict(self, r: int, lost_s: float) -> None:
        self.active[r] = False
        self._failed.add(r)
        self.admission.forget(r)
        self._fault("worker_evicted", worker=r, level="warning", gap_s=lost_s, iteration=int(self.push_iter[r]),
                    reason=f"worker {r} did not come back within {self.evict_after_s} s: evicted from the staleness gate")
        self._cond.notify_all()

    def _check_layout(self, msg, r: int) -> list[str]:
        part = self.partition
        problems = []
        if not 0 <= r < self.n_workers:
            problems.append(f"worker id {r} outside [0, {self.n_workers})")
        if msg.n_elements != part.n_elements or msg.n_rows != part.n_rows or msg.digest != layout_digest(part):
            problems.append(
                f"model layout differs: worker has {msg.n_elements} elements in {msg.n_rows} rows, "
                f"the parameter server {part.n_elements} in {part.n_rows} (both ends must build the same model)"
            )
        if msg.codec_id != self.codec.codec_id:
            problems.append(f"worker uses codec id {msg.codec_id}, the parameter server {self.codec.name!r} ({self.codec.codec_id})")
        if msg.policy != self.policy.name or msg.threshold != self.policy.threshold:
            problems.append(
                f"worker runs {msg.policy}({msg.threshold}), the parameter server {self.policy.name}({self.policy.threshold})"
            )
        return problems

    def _join(self, conn: Connection, msg) -> None:
        r = conn.worker_id
        if not isinstance(msg, Join):
            raise ProtocolError(f"worker {r}: expected Join or Rejoin, got {type(msg).__name__}")
        problems = self._check_layout(msg, r)
        with self._cond:
            if r in self._joined:
                problems.append(f"worker id {r} has already joined (a worker coming back sends Rejoin)")
            if self._resumed:
                problems.append("the parameter server resumed a run in progress: workers come back with Rejoin")
            if problems:
                conn.send(Error(3, "join refused: " + "; ".join(problems)))
                raise RuntimeFailure(f"join of worker {r} refused: " + "; ".join(problems))
            self._joined.add(r)
            self._join_order.append(r)
            self._start_of[r] = (msg.start, msg.model_digest)
            self._conns[r] = conn
            self._cond.notify_all()
            self._wait(lambda: len(self._joined) == self.n_workers, self.join_timeout_s,
                       f"worker {r} waited {self.join_timeout_s} s for all {self.n_workers} workers to join", conn)
        self._hand_out_model(conn, r, msg)  # JoinReply, with the team's initial parameters where they differ

    def _rejoin(self, conn: Connection, msg: Rejoin) -> None:
        """A worker comes back on a new connection: settle what was in flight, take its resync, and
        (fresh) send it everything committed so far."""
        r = conn.worker_id
        problems = self._check_layout(msg, r)
        t0 = time.monotonic()
        with self._cond:
            if 0 <= r < self.n_workers and r not in self._joined:
                problems.append(f"worker {r} never joined this run: a first start sends Join")
            if r in self._finished:
                problems.append(f"worker {r} has already finished")
            if self._ended or (r in self._failed and self._barrier_passed):
                problems.append("too late: the other workers have already flushed without this worker")
            problems += self._check_restart_model(msg, r)  # a fresh restart must hold the team's initial parameters
            if problems:
                conn.send(Error(3, "rejoin refused: " + "; ".join(problems)))
                raise RuntimeFailure(f"rejoin of worker {r} refused: " + "; ".join(problems))
            old = self._conns.get(r)
            if old is not None:  # the worker noticed first: its old link's thread has not seen the break yet
                self._record_loss(r, old, "the worker came back on a new link before the parameter server saw "
                                          "its old link break", noticed_by="rejoin")
            self._conns[r] = conn  # from now on the old connection's thread is superseded
            self._rejoining.add(id(conn))  # registered: its loss before the resync ends is a loss again
            self._last_push.pop(r, None)
            self._cond.notify_all()
        if old is not None:
            old.abort()
        with self._cond:
            self._wait(lambda: self._alive.get(r, 0) <= 1, self.wait_timeout_s,
                       f"the old connection of worker {r} to wind down", conn)
            evicted = r in self._failed
            self._lost.pop(r, None)
            self._failed.discard(r)
            if r not in self._flushed:
                self.active[r] = True
            if msg.fresh:  # a restarted worker holds the initial model and nothing else
                self.pending[r][:] = self.total
                self.versions[r, :] = self.push_iter[r]
                self.requested[r, :] = False
            if evicted:  # it missed iterations: continue level with the slowest active worker
                others = [o for o in np.flatnonzero(self.active).tolist() if o != r]
                if others:
                    floor = int(self.push_iter[others].min())
                    self.push_iter[r] = max(int(self.push_iter[r]), floor)
                    np.maximum(self.versions[r], self.push_iter[r], out=self.versions[r])
            reply = RejoinReply(self.n_workers, int(max(self.push_iter[r], 0 if msg.fresh else msg.iteration)),
                                int(self.push_seq[r]), int(self.last_push_delivered[r]), int(self.pull_seq[r]), evicted)
            self._cond.notify_all()
        conn.send(reply)
        # the worker's resync: pushes the PS does not hold, pulls it has not counted
        rs = conn.recv(self.wait_timeout_s)
        if not isinstance(rs, Resync):
            raise ProtocolError(f"worker {r}: expected Resync after RejoinReply, got {type(rs).__name__}")
        begin = conn.recv(self.wait_timeout_s)
        if not isinstance(begin, Begin) or begin.planned != rs.n_push_frames + rs.n_pull_frames:
            raise ProtocolError(f"worker {r}: Resync must be followed by a transmission of "
                                f"{rs.n_push_frames + rs.n_pull_frames} frames")
        res = conn.receive_transmission(begin, self._validator)
        conn.last_rx_iteration = 0  # the resync is exempt from the iteration order of the pushes that follow
        if res.delivered != begin.planned:
            raise RuntimeFailure(f"worker {r}: resync delivered {res.delivered} of {begin.planned} frames ({res.reason})")
        chunks = [c for _, c in res.frames]
        with self._cond:
            for c in chunks[: rs.n_push_frames]:
                self.codec.decode_into(self.partition, c, self._push_targets(), weight=self._weight)
                rows = c.rows()
                self.versions[r, rows] = np.maximum(self.versions[r, rows], rs.pushed_iteration)
                self.updates_since_pull[:, rows] += 1
            for c in chunks[rs.n_push_frames:]:
                subtract_sent(self.codec, self.partition, self.pending[r], c)
                self.updates_since_pull[r, c.rows()] = 0
            self.push_iter[r] = max(int(self.push_iter[r]), int(rs.pushed_iteration))
            self.push_seq[r] = max(int(self.push_seq[r]), int(rs.push_seq))
            self.pull_seq[r] = max(int(self.pull_seq[r]), int(rs.pull_seq))
            self._cond.notify_all()
        if msg.fresh:
            self._send_all(conn, r, EXEMPT_ITERATION)
        with self._cond:
            fields = dict(worker=r, fresh=bool(msg.fresh), evicted=evicted, iteration=int(reply.iteration),
                          push_frames=int(rs.n_push_frames), pull_frames=int(rs.n_pull_frames))
            away_since = self._away_since.pop(r, None)  # its first unsettled loss (a failed rejoin keeps it)
            if away_since is not None:
                fields["gap_s"] = max(0.0, t0 - away_since)  # lost until it reconnected
            self._fault("worker_rejoined", **fields)
            self._cond.notify_all()
