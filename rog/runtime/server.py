"""The parameter server: per-worker pending buffers, row versions, the staleness gate, admission, flush.

State (Algorithm 2; :mod:`rog.sim` is the reference semantics), all guarded by one lock:

* ``pending[r]``: the averaged update not yet sent to worker ``r``.  A push's delivered chunks
  are added to *every* worker's pending buffer with weight ``1/W``; a pull subtracts exactly
  the chunks worker ``r`` acknowledged from ``pending[r]`` (never zeroes it: pushes keep adding
  while a pull is under way);
* ``push_iter`` (W,), ``versions`` (W, n_rows), ``updates_since_pull`` (W, n_rows), ``active``;
* ``requested`` (W, n_rows): rows the PS asked each worker for (lagging rows), satisfied when
  they arrive.

One thread per worker connection runs that worker's side of the protocol
(:mod:`rog.runtime.messages`).  Decisions go through the :class:`~rog.policies.base.Policy` API
only, under the lock: ``push_plan`` runs on the worker; here ``pull_ready`` (re-checked whenever
a push is applied or a worker leaves), ``lagging_rows`` (asked while a gate is closed),
``pull_plan`` and ``push_budget_s`` (from one view, as the artifact did), ``admit`` (a worker
stalled at the gate gives its transfer slot back and takes one again before its pull) and
``observe`` (the push report is the worker's measurement, the pull report the PS's).

Flush: each worker sends ``Flush`` (from then on it no longer counts in the staleness gates: it
will never push again) and a no-deadline push of everything; its pull of everything waits until
every worker that joined and did not fail has flushed.
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

import numpy as np

from ..chunks import DEFAULT_CHUNK_BYTES, plan_chunks
from ..compression import Codec, EncodedChunk
from ..policies.base import Policy, ServerView, TransferReport, all_rows_plan
from ..rows import RowPartition
from ..transport import (
    Begin,
    Bye,
    Connection,
    Error,
    Listener,
    ProtocolError,
    PullReply,
    TransportError,
    TransportTimeout,
    WireFrames,
)
from ..wire import encode_frame
from .events import EventLog
from .messages import AdmitGrant, AdmitRequest, Flush, Join, JoinReply, PullStart, PushDone, layout_digest
from .worker import RuntimeFailure, aligned_zeros, delivered_mandatory_s, share, subtract_sent

_POLL_S = 0.25  # how often a waiting thread wakes to check for a stop request


class _Stopped(Exception):
    """The server is stopping; a waiting thread gives up."""


class _PendingFrames:
    """Frame producer for a pull: encodes chunk ``i`` of ``pending[r]`` under the lock, when it is sent."""

    def __init__(self, server: "ParameterServer", r: int, chunks, scales: np.ndarray, iteration: int) -> None:
        self.server, self.r, self.chunks, self.scales, self.iteration = server, r, chunks, scales, iteration
        self.encoded: list[EncodedChunk] = []

    def __call__(self, i: int) -> bytes:
        s = self.server
        with s._cond:
            chunk = s.codec.encode(s.partition, s.pending[self.r], self.scales, self.chunks[i])
        self.encoded.append(chunk)
        return encode_frame(chunk, s.codec, self.iteration, i)


class ParameterServer:
    """One parameter server for ``n_workers`` workers (ids ``0 .. n_workers-1``).

    Serve connections with :meth:`serve` (a :class:`~rog.transport.Listener`), :meth:`run`
    (already connected ends, e.g. from :func:`~rog.transport.inproc_pair`) or :meth:`start`
    (either, in a background thread).  After the run: ``pending``, ``versions``, ``push_iter``,
    ``reports`` (every :class:`TransferReport` given to ``policy.observe``), ``errors``.
    """

    def __init__(
        self,
        partition: RowPartition,
        n_workers: int,
        policy: Policy,
        codec: Codec,
        *,
        events: EventLog | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        join_timeout_s: float = 120.0,
        wait_timeout_s: float = 600.0,
    ) -> None:
        if not isinstance(partition, RowPartition):
            raise ValueError("partition must be a rog.rows.RowPartition (RowPartition.from_module(model))")
        if isinstance(n_workers, bool) or int(n_workers) != n_workers or n_workers < 1:
            raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
        if not isinstance(policy, Policy):
            raise ValueError(f"policy must be a rog.policies.Policy (make_policy('ROG', 4)), got {type(policy).__name__}")
        if not isinstance(codec, Codec):
            raise ValueError(f"codec must be a rog.compression.Codec (make_codec('sign')), got {type(codec).__name__}")
        if isinstance(chunk_bytes, bool) or int(chunk_bytes) != chunk_bytes or chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
        for name, v in (("join_timeout_s", join_timeout_s), ("wait_timeout_s", wait_timeout_s)):
            if not v > 0:
                raise ValueError(f"{name} must be positive, got {v!r}")
        self.partition = partition
        self.n_workers = W = int(n_workers)
        self.policy = policy
        self.codec = codec
        self.events = events
        self.chunk_bytes = int(chunk_bytes)
        self.join_timeout_s = float(join_timeout_s)
        self.wait_timeout_s = float(wait_timeout_s)
        n_rows = partition.n_rows
        self.pending = [aligned_zeros(partition.n_elements) for _ in range(W)]
        self.push_iter = np.zeros(W, dtype=np.int64)
        self.versions = np.zeros((W, n_rows), dtype=np.int64)
        self.updates_since_pull = np.zeros((W, n_rows), dtype=np.int64)
        self.active = np.ones(W, dtype=bool)
        self.requested = np.zeros((W, n_rows), dtype=bool)
        self.reports: list[TransferReport] = []
        self.errors: list[tuple[int, BaseException]] = []
        self.max_in_flight = 0
        self._cond = threading.Condition(threading.RLock())
        self._waiting: dict[int, None] = {}  # admission queue, arrival order
        self._in_flight: set[int] = set()
        self._joined: set[int] = set()
        self._flushed: set[int] = set()
        self._failed: set[int] = set()
        self._stop = threading.Event()
        self._row_wire_bytes = codec.row_wire_bytes(partition)
        self._validator = WireFrames(partition, codec)
        self._last_push: dict[int, tuple] = {}
        self._weight = 1.0 / W

    @property
    def failed_workers(self) -> list[int]:
        """Workers whose connection failed or who left without flushing."""
        with self._cond:
            return sorted(self._failed)

    # ------------------------------------------------------------------ running
    def run(self, conns: Sequence[Connection]) -> None:
        """Serve already connected ends (one per worker) until every worker has left; raise if any failed."""
        self._log("run_start", policy=self.policy.name, threshold=self.policy.threshold, n_workers=self.n_workers,
                  codec=self.codec.name)
        threads = [self._spawn(c) for c in conns]
        for t in threads:
            t.join()
        self._finish()

    def serve(self, listener: Listener, accept_timeout_s: float | None = None) -> None:
        """Accept ``n_workers`` connections from ``listener``, serve them until all have left; raise if any failed."""
        accept_timeout_s = self.join_timeout_s if accept_timeout_s is None else accept_timeout_s
        self._log("run_start", policy=self.policy.name, threshold=self.policy.threshold, n_workers=self.n_workers,
                  codec=self.codec.name)
        threads = []
        deadline = time.monotonic() + accept_timeout_s
        try:
            while len(threads) < self.n_workers:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    raise RuntimeFailure(
                        f"only {len(threads)} of {self.n_workers} workers connected within {accept_timeout_s} s"
                        + (f"; refused: {listener.refused}" if listener.refused else "")
                    )
                try:
                    conn = listener.accept(min(left, _POLL_S))
                except TransportTimeout:
                    continue
                threads.append(self._spawn(conn))
        except BaseException:
            self.stop()
            raise
        finally:
            for t in threads:
                t.join()
        self._finish()

    def start(self, source: Listener | Sequence[Connection]) -> threading.Thread:
        """:meth:`serve` a listener or :meth:`run` connections in a background thread (errors land in ``errors``)."""

        def body() -> None:
            try:
                if isinstance(source, Listener):
                    self.serve(source)
                else:
                    self.run(source)
            except BaseException as e:  # noqa: BLE001 - reported through self.errors
                with self._cond:
                    if not self.errors:
                        self.errors.append((-1, e))

        t = threading.Thread(target=body, name="rog-ps", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        """Ask every waiting thread to give up (a failed run)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def _finish(self) -> None:
        status = "error" if self.errors else "ok"
        reason = "; ".join(f"worker {r}: {type(e).__name__}: {e}" for r, e in self.errors)
        self._log("run_end", status=status, iterations=int(self.push_iter.max()), reason=reason)
        if self.errors:
            r, e = self.errors[0]
            raise RuntimeFailure(f"parameter server: {len(self.errors)} worker connection(s) failed; first: worker {r}: {e}") from e

    def _spawn(self, conn: Connection) -> threading.Thread:
        t = threading.Thread(target=self.serve_connection, args=(conn,), name=f"rog-ps-w{conn.worker_id}", daemon=True)
        t.start()
        return t

    # ------------------------------------------------------------------ one worker's connection
    def serve_connection(self, conn: Connection) -> None:
        """Run one worker's side of the protocol until it says bye (a thread body; errors go to ``errors``)."""
        r = conn.worker_id
        ok = joined = False
        try:
            self._join(conn)
            joined = True
            while True:
                msg = conn.recv(self.wait_timeout_s)
                if isinstance(msg, AdmitRequest):
                    self._admit(conn, r, msg)
                elif isinstance(msg, Begin):
                    self._receive_push(conn, r, msg, flush=False)
                elif isinstance(msg, PushDone):
                    self._gate_and_pull(conn, r, msg)
                elif isinstance(msg, Flush):
                    self._flush(conn, r, msg)
                elif isinstance(msg, Bye):
                    ok = r in self._flushed
                    if not ok:
                        raise RuntimeFailure(f"worker {r} left before flushing ({msg.text or 'no reason given'})")
                    break
                elif isinstance(msg, Error):
                    raise RuntimeFailure(f"worker {r} reported: {msg.text}")
                else:
                    raise ProtocolError(f"unexpected {type(msg).__name__} from worker {r}")
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - recorded, the worker is dropped from the gates
            with self._cond:
                self.errors.append((r, e))
            try:
                conn.send(Error(2, f"{type(e).__name__}: {e}"[:500]))
            except (TransportError, OSError):
                pass
        finally:
            with self._cond:
                if joined:
                    if not ok:
                        self.active[r] = False  # never wait on a worker that is gone
                        self._failed.add(r)
                    self._in_flight.discard(r)
                    self._waiting.pop(r, None)
                    self._try_admit()
                self._cond.notify_all()
            conn.close("parameter server done" if ok else "parameter server: connection failed")

    def _join(self, conn: Connection) -> None:
        r = conn.worker_id
        msg = conn.recv(self.join_timeout_s)
        if not isinstance(msg, Join):
            raise ProtocolError(f"worker {r}: expected Join, got {type(msg).__name__}")
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
        with self._cond:
            if r in self._joined:
                problems.append(f"worker id {r} has already joined")
            if problems:
                conn.send(Error(3, "join refused: " + "; ".join(problems)))
                raise RuntimeFailure(f"join of worker {r} refused: " + "; ".join(problems))
            self._joined.add(r)
            self._cond.notify_all()
            self._wait(lambda: len(self._joined) == self.n_workers, self.join_timeout_s,
                       f"worker {r} waited {self.join_timeout_s} s for all {self.n_workers} workers to join")
        conn.send(JoinReply(self.n_workers))

    # ------------------------------------------------------------------ coordination (call with the lock held)
    def _wait(self, ready, timeout_s: float, what: str) -> None:
        end = time.monotonic() + timeout_s
        while not ready():
            if self._stop.is_set():
                raise _Stopped()
            left = end - time.monotonic()
            if left <= 0:
                raise RuntimeFailure(f"timed out: {what}")
            self._cond.wait(min(left, _POLL_S))

    def server_view(self) -> ServerView:
        """A snapshot (copies) of the PS state for a policy decision."""
        with self._cond:
            return ServerView(self.partition, self.push_iter.copy(), self.versions.copy(),
                              self.updates_since_pull.copy(), self.active.copy())

    def _try_admit(self) -> None:
        if not self._waiting:
            return
        chosen = self.policy.admit(self.server_view(), list(self._waiting), len(self._in_flight))
        for w in chosen:
            w = int(w)
            if w not in self._waiting:
                raise RuntimeFailure(f"policy.admit chose worker {w}, which is not waiting")
            self._waiting.pop(w)
            self._in_flight.add(w)
        self.max_in_flight = max(self.max_in_flight, len(self._in_flight))
        if chosen:
            self._cond.notify_all()

    def _acquire(self, r: int) -> float:
        """Wait for a transfer slot; returns the seconds waited."""
        t0 = time.monotonic()
        if r in self._in_flight:
            return 0.0
        self._waiting[r] = None
        self._try_admit()
        try:
            self._wait(lambda: r in self._in_flight, self.wait_timeout_s, f"worker {r} waited for a transfer slot")
        except BaseException:
            self._waiting.pop(r, None)
            raise
        return time.monotonic() - t0

    def _release(self, r: int) -> None:
        if r in self._in_flight:
            self._in_flight.discard(r)
            self._try_admit()

    # ------------------------------------------------------------------ protocol steps
    def _admit(self, conn: Connection, r: int, msg: AdmitRequest) -> None:
        with self._cond:
            waited = self._acquire(r)
        conn.send(AdmitGrant(msg.iteration, waited))

    def _receive_push(self, conn: Connection, r: int, begin: Begin, flush: bool) -> tuple:
        t0 = time.monotonic()
        res = conn.receive_transmission(begin, self._validator)
        chunks = [c for _, c in res.frames]
        rows = np.concatenate([c.rows() for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
        with self._cond:
            for c in chunks:
                self.codec.decode_into(self.partition, c, self.pending, weight=self._weight)
            if not flush:
                n = begin.iteration
                self.push_iter[r] = n
                self.versions[r, rows] = n
                self.updates_since_pull[:, rows] += 1
                self.requested[r, rows] = False  # delivered: the request is satisfied
                self._try_admit()
            self._cond.notify_all()  # gates re-check
        out = (begin, res, int(rows.size), t0)
        self._last_push[r] = out
        return out

    def _gate_and_pull(self, conn: Connection, r: int, done: PushDone) -> None:
        n = done.iteration
        last = self._last_push.pop(r, None)
        if last is None or last[0].iteration != n:
            raise ProtocolError(f"worker {r}: PushDone({n}) without a push of iteration {n}")
        begin, res, rows_delivered, t_push = last
        push_report = TransferReport(r, "push", n, done.rows_planned, rows_delivered, res.bytes_delivered,
                                     done.duration_s, done.mandatory_s, begin.deadline_s)
        self._log("push", t_push, worker=r, iteration=n, rows_planned=done.rows_planned, rows_delivered=rows_delivered,
                  bytes=res.bytes_delivered, deadline_s=begin.deadline_s,
                  delivered_share=share(rows_delivered, done.rows_planned), duration_s=done.duration_s,
                  mandatory_s=done.mandatory_s, cut=res.cut, frames_planned=begin.planned)
        part = self.partition
        with self._cond:
            self.reports.append(push_report)
            self.policy.observe(push_report)
            # the staleness gate: a stalled worker gives its transfer slot back and asks for lagging rows
            t_gate = time.monotonic()
            released = False
            end = t_gate + self.wait_timeout_s
            while True:
                view = self.server_view()
                if self.policy.pull_ready(view, r):
                    break
                if not released:
                    self._release(r)
                    released = True
                for o in np.flatnonzero(self.active).tolist():
                    lag = np.asarray(self.policy.lagging_rows(view, o), dtype=np.int64)
                    if lag.size:
                        self.requested[o, lag] = True
                if self._stop.is_set():
                    raise _Stopped()
                if time.monotonic() >= end:
                    raise RuntimeFailure(f"worker {r} stalled at the gate for {self.wait_timeout_s} s (iteration {n})")
                self._cond.wait(_POLL_S)
            gate_s = time.monotonic() - t_gate
            admission_s = self._acquire(r) if released else 0.0
            view = self.server_view()
            plan = self.policy.pull_plan(view, r, part.tensor_mean_abs(self.pending[r]).astype(np.float32))
            budget_s = self.policy.push_budget_s(view, r)
            scales = self.codec.tensor_scales(part, self.pending[r])
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self._row_wire_bytes, self.chunk_bytes)
        rows_planned = int(len(plan.order))
        conn.send(PullStart(n, gate_s, admission_s, rows_planned))
        frames = _PendingFrames(self, r, cp.chunks, scales, n)
        t_pull = time.monotonic()
        res = conn.send_transmission(frames, n_frames=cp.n_chunks, iteration=n, mandatory=cp.mandatory_chunks,
                                     deadline_s=plan.deadline_s)
        delivered = frames.encoded[: res.delivered]
        rows = np.concatenate([c.rows() for c in delivered]) if delivered else np.zeros(0, dtype=np.int64)
        mandatory_s = delivered_mandatory_s(res)
        report = TransferReport(r, "pull", n, rows_planned, int(rows.size), res.bytes_delivered, res.duration_s,
                                mandatory_s, plan.deadline_s)
        with self._cond:
            for c in delivered:
                subtract_sent(self.codec, part, self.pending[r], c)
            self.updates_since_pull[r, rows] = 0
            self.reports.append(report)
            self.policy.observe(report)
            required = np.flatnonzero(self.requested[r]).astype(np.int64)
            self._release(r)
        conn.send(PullReply(n, budget_s, 0.0, required))
        self._log("pull", t_pull, worker=r, iteration=n, rows_planned=rows_planned, rows_delivered=int(rows.size),
                  bytes=res.bytes_delivered, deadline_s=plan.deadline_s,
                  delivered_share=share(rows.size, rows_planned), duration_s=res.duration_s,
                  mandatory_s=mandatory_s, cut=res.cut, frames_planned=cp.n_chunks)

    def _flush(self, conn: Connection, r: int, msg: Flush) -> None:
        with self._cond:
            self.active[r] = False  # done training: it no longer counts in anyone's staleness gate
            self._try_admit()
            self._cond.notify_all()
        begin = conn.recv(self.wait_timeout_s)
        if not isinstance(begin, Begin) or begin.iteration != msg.iteration:
            raise ProtocolError(f"worker {r}: Flush({msg.iteration}) must be followed by its push")
        _, res, rows_in, t0 = self._receive_push(conn, r, begin, flush=True)
        if res.delivered != begin.planned:
            raise RuntimeFailure(f"worker {r}: flush push delivered {res.delivered} of {begin.planned} chunks ({res.reason})")
        self._log("flush", t0, worker=r, direction="push", rows_delivered=rows_in, bytes=res.bytes_delivered,
                  duration_s=time.monotonic() - t0)
        part = self.partition
        with self._cond:
            self._flushed.add(r)
            self._cond.notify_all()
            self._wait(lambda: self._joined - self._failed <= self._flushed, self.wait_timeout_s,
                       f"worker {r} waited for every worker to flush")
            scales = self.codec.tensor_scales(part, self.pending[r])
        plan = all_rows_plan(part)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self._row_wire_bytes, self.chunk_bytes)
        frames = _PendingFrames(self, r, cp.chunks, scales, msg.iteration)
        t1 = time.monotonic()
        res = conn.send_transmission(frames, n_frames=cp.n_chunks, iteration=msg.iteration, mandatory=cp.n_chunks,
                                     deadline_s=None)
        delivered = frames.encoded[: res.delivered]
        with self._cond:
            for c in delivered:
                subtract_sent(self.codec, part, self.pending[r], c)
            rows = np.concatenate([c.rows() for c in delivered]) if delivered else np.zeros(0, dtype=np.int64)
            self.updates_since_pull[r, rows] = 0
        if res.delivered != cp.n_chunks:
            raise RuntimeFailure(f"worker {r}: flush pull delivered {res.delivered} of {cp.n_chunks} chunks")
        self._log("flush", t1, worker=r, direction="pull", rows_delivered=int(rows.size), bytes=res.bytes_delivered,
                  duration_s=res.duration_s)

    # ------------------------------------------------------------------ logging
    def _log(self, kind: str, t0: float | None = None, **fields) -> None:
        if self.events is not None:
            self.events.write(kind, None if t0 is None else self.events.at(t0), **fields)
