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
``observe`` (the push report is the worker's measurement, the pull report the PS's).  Scheduler:
:mod:`rog.runtime.scheduler` (ADSP); ``commit_control`` goes out with pulls (:class:`PolicyControl`).

Flush: each worker sends ``Flush`` (from then on it no longer counts in the staleness gates: it
will never push again) and a no-deadline push of everything; its pull of everything waits until
every worker that joined and is not gone has flushed.

Faults. A worker whose connection breaks is *lost*: it still counts in the gates for ``evict_after_s``
seconds (0: evicted at once), then it is *evicted* (a ``worker_evicted`` warning event; the others go on)
and counts as gone. It may come back on a new connection with :class:`~rog.runtime.messages.Rejoin` at any
time before the run ends; an evicted worker is moved up to the slowest active worker's iteration.
Guarantees:

* a push counts exactly when the PS received and acknowledged it (a worker killed mid-push adds
  nothing); both ends keep the newest transmission until they know its outcome, and the rejoin
  exchange settles it (push and pull sequence numbers), so nothing is applied twice or lost;
* ``total`` is the sum of every committed push; a *fresh* rejoin (a restarted worker process that
  starts from the initial model) gets ``pending[r] := total`` and a full pull: it then holds what
  every other worker will hold;
* with checkpoints (:meth:`start_checkpoints`) the PS can be restarted from its latest checkpoint
  (:meth:`resume`); every :class:`PullStart` tells a worker which of its pushes and pulls that
  checkpoint covers, the worker keeps the encoded chunks of the others, and after a restart it
  re-sends them (:class:`Resync`): the PS adds the pushes to every pending buffer and subtracts the
  pulls from the worker's own.  With compression off every worker's model after the flush then
  equals the initial model minus the sum of every committed push over W.  Not restored: the
  policy's measurements and exact row versions of re-sent rows (they get the worker's newest
  pushed iteration), which only shape the schedule, never the model.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ..chunks import DEFAULT_CHUNK_BYTES, plan_chunks
from ..compression import Codec
from ..policies.base import Policy, ServerView, TransferReport, all_rows_plan
from ..rows import RowPartition
from ..transport import (Begin, Bye, Connection, Error, Listener, ProtocolError, PullReply, TransportError,
                         TransportTimeout, WireFrames)
from .clock_sync import CLOCK_MESSAGES, ClockOffsets
from .events import EventLog
from .messages import (
    EXEMPT_ITERATION,
    AdmitGrant,
    AdmitRequest,
    Flush,
    Join,
    JoinReply,
    PolicyControl,
    PullSegments,
    PullStart,
    PushDone,
    Rejoin,
    RejoinReply,
    Resync,
    layout_digest,
)
from .ps_checkpoint import latest_ps_checkpoint, save_ps_checkpoint
from .scheduler import scheduler_loop
from .segmented_pull import PendingFrames as _PendingFrames
from .segmented_pull import send_segmented_pull
from .worker import RETRYABLE_STATUSES, RuntimeFailure, aligned_zeros, delivered_mandatory_s, share, subtract_sent


_POLL_S = 0.25  # how often a waiting thread wakes to check for a stop request


class _Stopped(Exception):
    """The server is stopping; a waiting thread gives up."""


class _Superseded(Exception):
    """The worker came back on a newer connection; the thread of the old one gives up."""


class _Left(RuntimeFailure):
    """The worker said bye without flushing: it left for good (not a broken link)."""


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
        evict_after_s: float = 0.0,
        global_loss: Callable[[np.ndarray], float] | None = None,
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
        if not (evict_after_s >= 0 and np.isfinite(evict_after_s)):
            raise ValueError(f"evict_after_s must be a finite number of seconds >= 0 (0: evict at once), got {evict_after_s!r}")
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
        self._pull_segments: dict[int, tuple] = {}  # worker -> segment per tensor (PullSegments)
        self._weight = 1.0 / W
        # faults: connections, loss, eviction, rejoin, checkpoints
        self.evict_after_s = float(evict_after_s)
        self.total = aligned_zeros(partition.n_elements)  # sum of every committed push (weighted 1/W)
        self.push_seq = np.zeros(W, dtype=np.int64)  # push transmissions of each worker applied
        self.last_push_delivered = np.zeros(W, dtype=np.int64)  # frames applied of push number push_seq
        self.pull_seq = np.zeros(W, dtype=np.int64)  # pull transmissions each worker acknowledged
        self.covered_push_seq = np.zeros(W, dtype=np.int64)  # what the latest checkpoint holds
        self.covered_pull_seq = np.zeros(W, dtype=np.int64)
        self.checkpoint_seq = 0  # checkpoints written (or resumed from)
        self.faults: list[dict] = []  # fault records (as logged), for callers without an event log
        self._finished: set[int] = set()  # flushed and said bye
        self._lost: dict[int, float] = {}  # worker -> time.monotonic() its connection broke
        self._conns: dict[int, Connection] = {}  # the current connection of each worker
        self._alive: dict[int, int] = {}  # connection threads per worker
        self._threads: list[threading.Thread] = []
        self._resumed = False
        self._ended = False
        self._grace_until = 0.0  # a resumed PS evicts nobody before this (workers are reconnecting)
        self._barrier_passed = False  # some worker's flush pull went ahead: a gone worker can no longer come back
        self._ckpt: tuple[str, float] | None = None  # (directory, period_s)
        self._ckpt_thread: threading.Thread | None = None
        self.global_loss, self.schedule_records, self._sched_thread = global_loss, [], None  # rog.runtime.scheduler
        self.clock_offsets = ClockOffsets(events)  # each worker host's clock offset (rog.runtime.clock_sync)
        self._rejoining: set[int] = set()  # ids of rejoin connections registered whose handler still runs

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
        self._in_flight.discard(r)
        self._waiting.pop(r, None)
        self._try_admit()
        self._fault("worker_evicted", worker=r, level="warning", gap_s=lost_s, iteration=int(self.push_iter[r]),
                    reason=f"worker {r} did not come back within {self.evict_after_s} s: evicted from the staleness gate")
        self._cond.notify_all()

    # ------------------------------------------------------------------ running
    def run(self, conns: Sequence[Connection]) -> None:
        """Serve already connected ends (one per worker; more may come through :meth:`add_connection`)
        until every worker has finished or is gone; raise if any did not finish."""
        self._log_start()
        for c in conns:
            self.add_connection(c)
        try:
            with self._cond:
                while not self._done():
                    if self._stop.is_set():
                        break
                    self._cond.wait(_POLL_S)
                    self.tick()
        finally:
            self._end_threads()
        self._finish()

    def add_connection(self, conn: Connection) -> threading.Thread:
        """Serve one more connection (a worker joining or coming back), in its own thread."""
        t = self._spawn(conn)
        with self._cond:
            self._threads.append(t)
        return t

    def _log_start(self) -> None:
        if self.policy.scheduler_period_s is not None and self._sched_thread is None:
            self._sched_thread = threading.Thread(target=scheduler_loop, args=(self,), name="rog-ps-scheduler", daemon=True)
            self._sched_thread.start()
        if not self._resumed:
            self._log("run_start", policy=self.policy.name, threshold=self.policy.threshold, n_workers=self.n_workers,
                      codec=self.codec.name)

    def _end_threads(self) -> None:
        with self._cond:
            self._ended = True
            threads = list(self._threads)
            self._cond.notify_all()
        for t in threads:
            t.join(timeout=5.0)  # daemon threads: a stuck one is not waited for
        self.stop_checkpoints()

    def serve(self, listener: Listener, accept_timeout_s: float | None = None) -> None:
        """Accept ``n_workers`` connections from ``listener``, serve them until all have left; raise if any failed."""
        accept_timeout_s = self.join_timeout_s if accept_timeout_s is None else accept_timeout_s
        self._log_start()
        accepted = 0
        deadline = time.monotonic() + accept_timeout_s
        try:
            while True:
                with self._cond:
                    if self._done():
                        break
                    joined = len(self._joined)
                if self._stop.is_set():
                    raise RuntimeFailure("the parameter server was stopped")
                if not self._resumed and joined < self.n_workers and time.monotonic() > deadline:
                    raise RuntimeFailure(
                        f"only {accepted} of {self.n_workers} workers connected within {accept_timeout_s} s"
                        + (f"; refused: {listener.refused}" if listener.refused else "")
                    )
                self.tick()
                try:
                    conn = listener.accept(_POLL_S)
                except TransportTimeout:
                    continue
                accepted += 1
                self.add_connection(conn)
        except BaseException:
            self.stop()
            raise
        finally:
            self._end_threads()
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
        with self._cond:
            unfinished = [r for r in range(self.n_workers) if r not in self._finished]
        failed = bool(unfinished)
        status = "error" if failed else "ok"
        reason = "; ".join(f"worker {r}: {type(e).__name__}: {e}" for r, e in self.errors)
        if unfinished:
            reason = f"worker(s) {unfinished} did not finish; " + reason
        self._log("run_end", status=status, iterations=int(self.push_iter.max()), reason=reason)
        if failed:
            if self.errors:
                r, e = self.errors[0]
                raise RuntimeFailure(f"parameter server: worker(s) {unfinished} did not finish; "
                                     f"{len(self.errors)} connection failure(s), first: worker {r}: {e}") from e
            raise RuntimeFailure(f"parameter server: worker(s) {unfinished} did not finish")

    def _spawn(self, conn: Connection) -> threading.Thread:
        t = threading.Thread(target=self.serve_connection, args=(conn,), name=f"rog-ps-w{conn.worker_id}", daemon=True)
        t.start()
        return t

    # ------------------------------------------------------------------ one worker's connection
    def serve_connection(self, conn: Connection) -> None:
        """Run one worker's side of the protocol until it says bye (a thread body; errors go to ``errors``)."""
        r = conn.worker_id
        ok = joined = False
        with self._cond:
            self._alive[r] = self._alive.get(r, 0) + 1
        try:
            first = conn.recv(self.join_timeout_s)
            if isinstance(first, Rejoin):
                self._rejoin(conn, first)
            else:
                self._join(conn, first)
            joined = True
            while True:
                msg = conn.recv(self.wait_timeout_s)
                if isinstance(msg, AdmitRequest):
                    self._admit(conn, r, msg)
                elif isinstance(msg, Begin):
                    self._receive_push(conn, r, msg, flush=False)
                elif isinstance(msg, PushDone):
                    self._gate_and_pull(conn, r, msg)
                elif isinstance(msg, PullSegments):
                    self._pull_segments[r] = msg.seg_of_tensor
                elif isinstance(msg, CLOCK_MESSAGES):
                    self.clock_offsets.handle(conn, r, msg)
                elif isinstance(msg, Flush):
                    self._flush(conn, r, msg)
                elif isinstance(msg, Bye):
                    ok = r in self._flushed
                    if not ok:
                        raise _Left(f"worker {r} left before flushing ({msg.text or 'no reason given'})")
                    break
                elif isinstance(msg, Error):
                    raise _Left(f"worker {r} reported: {msg.text}")
                else:
                    raise ProtocolError(f"unexpected {type(msg).__name__} from worker {r}")
        except (_Stopped, _Superseded):
            pass
        except BaseException as e:  # noqa: BLE001 - recorded; the worker is lost (may come back) or gone
            with self._cond:
                current = self._conns.get(r) is conn
                if current or not joined:
                    self.errors.append((r, e))
            if not isinstance(e, (TransportTimeout,)) and not (isinstance(e, TransportError) and not isinstance(e, ProtocolError)):
                try:
                    conn.send(Error(2, f"{type(e).__name__}: {e}"[:500]))
                except (TransportError, OSError):
                    pass
            if current and r in self._joined:  # also a rejoin that broke half-way: lost again
                with self._cond:
                    if isinstance(e, _Left):
                        self._failed.add(r)
                        self.active[r] = False  # never wait on a worker that left
                    else:
                        self._lost[r] = time.monotonic()
                        self._fault("worker_lost", worker=r, reason=f"{type(e).__name__}: {e}"[:300],
                                    iteration=int(self.push_iter[r]))
                        if self.evict_after_s == 0:
                            self._evict(r, 0.0)
            elif not joined and id(conn) in self._rejoining and not isinstance(e, _Left):
                with self._cond:  # a rejoin broken half-way after a newer link of the worker took over: lost again
                    self._fault("worker_lost", worker=r, iteration=int(self.push_iter[r]),
                                reason=(f"{type(e).__name__}: {e}"[:250] + " (a newer link had already taken over)"))
            elif not joined and 0 <= r < self.n_workers:
                with self._cond:
                    if r not in self._joined and not self._resumed:
                        self._failed.add(r)  # its first join failed: nobody waits for it
        finally:
            with self._cond:
                self._rejoining.discard(id(conn))
                self._alive[r] -= 1
                if self._conns.get(r) is conn:
                    del self._conns[r]
                    if ok:
                        self._finished.add(r)
                        self.active[r] = False
                if joined:
                    self._in_flight.discard(r)
                    self._waiting.pop(r, None)
                    self._try_admit()
                self._cond.notify_all()
            conn.close("parameter server done" if ok else "parameter server: connection failed")

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
            self._conns[r] = conn
            self._cond.notify_all()
            self._wait(lambda: len(self._joined) == self.n_workers, self.join_timeout_s,
                       f"worker {r} waited {self.join_timeout_s} s for all {self.n_workers} workers to join", conn)
        conn.send(JoinReply(self.n_workers))

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
            if problems:
                conn.send(Error(3, "rejoin refused: " + "; ".join(problems)))
                raise RuntimeFailure(f"rejoin of worker {r} refused: " + "; ".join(problems))
            old = self._conns.get(r)
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
            lost_at = self._lost.pop(r, None)
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
            if lost_at is not None:
                fields["gap_s"] = t0 - lost_at  # lost until it reconnected
            self._fault("worker_rejoined", **fields)
            self._cond.notify_all()

    def _push_targets(self) -> list[np.ndarray]:
        """Buffers a committed push is added to: every worker's pending buffer and the running total."""
        return [*self.pending, self.total]

    def _send_all(self, conn: Connection, r: int, iteration: int) -> tuple:
        """A no-deadline pull of all of ``pending[r]``; subtracts exactly what was delivered."""
        part = self.partition
        with self._cond:
            scales = self.codec.tensor_scales(part, self.pending[r])
        plan = all_rows_plan(part)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self._row_wire_bytes, self.chunk_bytes)
        frames = _PendingFrames(self, r, cp.chunks, scales, iteration)
        res = conn.send_transmission(frames, n_frames=cp.n_chunks, iteration=iteration, mandatory=cp.n_chunks,
                                     deadline_s=None)
        delivered = frames.encoded[: res.delivered]
        with self._cond:
            for c in delivered:
                subtract_sent(self.codec, part, self.pending[r], c)
            rows = np.concatenate([c.rows() for c in delivered]) if delivered else np.zeros(0, dtype=np.int64)
            self.updates_since_pull[r, rows] = 0
            self.pull_seq[r] += 1
        if res.delivered != cp.n_chunks:
            raise RuntimeFailure(f"worker {r}: full pull delivered {res.delivered} of {cp.n_chunks} chunks")
        return res, int(rows.size)

    # ------------------------------------------------------------------ coordination (call with the lock held)
    def _wait(self, ready, timeout_s: float | None, what: str, conn: Connection | None = None) -> None:
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while not ready():
            self._check_current(conn)
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise RuntimeFailure(f"timed out: {what}")
            self._cond.wait(_POLL_S if left is None else min(left, _POLL_S))

    def _check_current(self, conn: Connection | None) -> None:
        if self._stop.is_set():
            raise _Stopped()
        if conn is not None and self._conns.get(conn.worker_id) is not conn and conn.worker_id in self._conns:
            raise _Superseded()

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

    def _acquire(self, r: int, conn: Connection | None = None) -> float:
        """Wait for a transfer slot; returns the seconds waited."""
        t0 = time.monotonic()
        if r in self._in_flight:
            return 0.0
        self._waiting[r] = None
        self._try_admit()
        try:
            self._wait(lambda: r in self._in_flight, self.wait_timeout_s, f"worker {r} waited for a transfer slot", conn)
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
            waited = self._acquire(r, conn)
        conn.send(AdmitGrant(msg.iteration, waited))

    def _receive_push(self, conn: Connection, r: int, begin: Begin, flush: bool) -> tuple:
        t0 = time.monotonic()
        res = conn.receive_transmission(begin, self._validator)
        if res.status.name in ("REPLAYED", "STALE", "WRONG_DIRECTION"):  # nothing of it counts, not even as a push
            raise ProtocolError(f"worker {r}: push transmission {begin.tid} (iteration {begin.iteration}) refused: "
                                f"{res.status.name}: {res.reason}")
        chunks = [c for _, c in res.frames]
        rows = np.concatenate([c.rows() for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
        with self._cond:
            self._check_current(conn)  # a superseded connection's push is never applied
            for c in chunks:
                self.codec.decode_into(self.partition, c, self._push_targets(), weight=self._weight)
            self.push_seq[r] += 1
            self.last_push_delivered[r] = len(chunks)
            if not flush:
                n = begin.iteration
                if not begin.more:  # a segmented push counts once its last segment is in
                    self.push_iter[r] = n
                self.versions[r, rows] = n
                self.updates_since_pull[:, rows] += 1
                self.requested[r, rows] = False  # delivered: the request is satisfied
                self._try_admit()
            self._cond.notify_all()  # gates re-check
        out = (begin, res, int(rows.size), t0)
        prev = self._last_push.get(r)
        if prev is not None and prev[0].iteration == begin.iteration:  # a retransmission (mandatory frames were rejected)
            merged = replace(prev[1], delivered=prev[1].delivered + res.delivered,
                             bytes_delivered=prev[1].bytes_delivered + res.bytes_delivered, cut=res.cut,
                             status=res.status, reason=res.reason)
            out = (prev[0], merged, prev[2] + int(rows.size), prev[3])
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
            # no time limit here: a worker that holds the gate is either connected (a slow or cut link: the
            # gate waits, as it should) or lost, and then evicted after evict_after_s
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
                self._check_current(conn)
                self._cond.wait(_POLL_S)
            gate_s = time.monotonic() - t_gate
            admission_s = self._acquire(r, conn) if released else 0.0
            view = self.server_view()
            plan = self.policy.pull_plan(view, r, part.tensor_mean_abs(self.pending[r]).astype(np.float32))
            budget_s = self.policy.push_budget_s(view, r)
            basis = self.policy.budget_basis  # what decided the budget (ROG: rule, reason, lead)
            scales = self.codec.tensor_scales(part, self.pending[r])
            covered = self._covered(r)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self._row_wire_bytes, self.chunk_bytes)
        rows_planned = int(len(plan.order))
        conn.send(PullStart(n, gate_s, admission_s, rows_planned, int(covered[0]), int(covered[1])))
        t_pull = time.monotonic()
        segments = self._pull_segments.pop(r, None)  # named for this pull only
        if segments is not None:  # one transmission per layer segment
            res, delivered, n_chunks = send_segmented_pull(
                conn, part, plan, segments, lambda c: _PendingFrames(self, r, c, scales, n),
                self._row_wire_bytes, self.chunk_bytes, n)
        else:
            frames, n_chunks = _PendingFrames(self, r, cp.chunks, scales, n), cp.n_chunks
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
            self.pull_seq[r] += 1
            self.updates_since_pull[r, rows] = 0
            self.reports.append(report)
            self.policy.observe(report)
            required = np.flatnonzero(self.requested[r]).astype(np.int64)
            control = self.policy.commit_control(r)
            self._release(r)
        if control is not None:  # the policy's scheduler has a number for this worker (ADSP: its commit rate)
            conn.send(PolicyControl(n, control))
        conn.send(PullReply(n, budget_s, 0.0, required))
        self._log("pull", t_pull, worker=r, iteration=n, rows_planned=rows_planned, rows_delivered=int(rows.size),
                  bytes=res.bytes_delivered, deadline_s=plan.deadline_s,
                  delivered_share=share(rows.size, rows_planned), duration_s=res.duration_s,
                  mandatory_s=mandatory_s, cut=res.cut, frames_planned=n_chunks, budget_s=budget_s,
                  **{f"budget_{k}": v for k, v in basis.items()})

    def _flush(self, conn: Connection, r: int, msg: Flush) -> None:
        with self._cond:
            self.active[r] = False  # done training: it no longer counts in anyone's staleness gate
            self._in_flight.discard(r)
            self._try_admit()
            self._cond.notify_all()
        begin = conn.recv(self.wait_timeout_s)
        if not isinstance(begin, Begin) or begin.iteration != msg.iteration:
            raise ProtocolError(f"worker {r}: Flush({msg.iteration}) must be followed by its push")
        _, res, rows_in, t0 = self._receive_push(conn, r, begin, flush=True)
        while res.delivered < begin.planned and res.status in RETRYABLE_STATUSES:  # damaged: the worker retransmits
            retry = conn.recv(self.wait_timeout_s)
            if not isinstance(retry, Begin) or retry.iteration != msg.iteration:
                raise ProtocolError(f"worker {r}: a flush push that lost frames must be followed by its retransmission")
            _, res, rows_in, _ = self._receive_push(conn, r, retry, flush=True)
        self._last_push.pop(r, None)
        if res.delivered != begin.planned:
            raise RuntimeFailure(f"worker {r}: flush push delivered {res.delivered} of {begin.planned} chunks ({res.reason})")
        self._log("flush", t0, worker=r, direction="push", rows_delivered=rows_in, bytes=res.bytes_delivered,
                  duration_s=time.monotonic() - t0)
        with self._cond:
            self._flushed.add(r)
            self._cond.notify_all()
            # no time limit: every worker still counted is connected or lost (evicted after evict_after_s)
            self._wait(lambda: set(range(self.n_workers)) - self._failed <= self._flushed | self._finished, None,
                       f"worker {r} waited for every worker to flush", conn)
            self._barrier_passed = True
        t1 = time.monotonic()
        res, rows = self._send_all(conn, r, msg.iteration)
        self._log("flush", t1, worker=r, direction="pull", rows_delivered=rows, bytes=res.bytes_delivered,
                  duration_s=res.duration_s)

    # ------------------------------------------------------------------ checkpoints and resume
    def _covered(self, r: int) -> tuple[int, int]:
        """Worker ``r``'s pushes and pulls the latest checkpoint holds (all of them without checkpoints:
        nothing can be lost then, so the worker need not keep any)."""
        if self._ckpt is None:
            return int(self.push_seq[r]), int(self.pull_seq[r])
        return int(self.covered_push_seq[r]), int(self.covered_pull_seq[r])

    def _meta(self) -> dict:
        return dict(n_workers=self.n_workers, n_elements=self.partition.n_elements, n_rows=self.partition.n_rows,
                    digest=layout_digest(self.partition).hex(), codec=self.codec.name, policy=self.policy.name,
                    threshold=self.policy.threshold)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """A consistent copy of everything a restarted PS needs (taken under the lock)."""
        W = self.n_workers

        def mask(ids) -> np.ndarray:
            m = np.zeros(W, dtype=bool)
            m[sorted(i for i in ids if 0 <= i < W)] = True
            return m

        with self._cond:
            return dict(pending=np.stack(self.pending), total=self.total.copy(), push_iter=self.push_iter.copy(),
                        versions=self.versions.copy(), updates_since_pull=self.updates_since_pull.copy(),
                        active=self.active.copy(), push_seq=self.push_seq.copy(),
                        last_push_delivered=self.last_push_delivered.copy(), pull_seq=self.pull_seq.copy(),
                        joined=mask(self._joined), flushed=mask(self._flushed), finished=mask(self._finished),
                        gone=mask(self._failed))

    def checkpoint_now(self) -> int:
        """Write a checkpoint of the current state (atomic, verified on load); returns its number."""
        if self._ckpt is None:
            raise RuntimeFailure("checkpoint_now() needs start_checkpoints(directory, every_s) first")
        t0 = time.monotonic()
        arrays = self.state_arrays()
        with self._cond:
            self.checkpoint_seq += 1
            seq = self.checkpoint_seq
        path, nbytes = save_ps_checkpoint(self._ckpt[0], seq, arrays, self._meta())
        with self._cond:  # only now may workers drop what this checkpoint holds
            np.maximum(self.covered_push_seq, arrays["push_seq"], out=self.covered_push_seq)
            np.maximum(self.covered_pull_seq, arrays["pull_seq"], out=self.covered_pull_seq)
        self._log("checkpoint", t0, seq=seq, bytes=nbytes, duration_s=time.monotonic() - t0, path=path.name)
        return seq

    def start_checkpoints(self, directory, every_s: float) -> None:
        """Checkpoint into ``directory`` every ``every_s`` seconds (a background thread) from now on."""
        if not (every_s > 0 and np.isfinite(every_s)):
            raise ValueError(f"every_s must be a positive number of seconds, got {every_s!r}")
        self._ckpt = (str(directory), float(every_s))
        if self._ckpt_thread is not None:
            return

        def body() -> None:
            while not self._stop.wait(self._ckpt[1]):
                if self._ended:
                    return
                try:
                    self.checkpoint_now()
                except Exception as e:  # noqa: BLE001 - a failed checkpoint is reported; training goes on
                    with self._cond:
                        self.errors.append((-1, e))

        self._ckpt_thread = threading.Thread(target=body, name="rog-ps-checkpoints", daemon=True)
        self._ckpt_thread.start()

    def stop_checkpoints(self) -> None:
        """Stop the checkpoint thread (at the end of the run)."""
        self._ckpt_thread = None

    def resume(self, directory) -> dict:
        """Restore the newest verified checkpoint in ``directory`` (before serving); returns its sidecar.

        Workers then come back with :class:`Rejoin` and re-send what the checkpoint does not hold."""
        arrays, info, problems = latest_ps_checkpoint(directory)
        meta = info.get("meta", {})
        if meta != self._meta():
            diff = {k: (meta.get(k), v) for k, v in self._meta().items() if meta.get(k) != v}
            raise RuntimeFailure(f"{directory}: checkpoint {info['seq']} belongs to another run (checkpoint vs now: {diff})")
        W, n = self.n_workers, self.partition.n_elements
        if arrays["pending"].shape != (W, n) or arrays["total"].shape != (n,):
            raise RuntimeFailure(f"{directory}: checkpoint {info['seq']} arrays have the wrong shapes")
        with self._cond:
            for r in range(W):
                self.pending[r][:] = arrays["pending"][r]
            self.total[:] = arrays["total"]
            for name in ("push_iter", "versions", "updates_since_pull", "active", "push_seq", "last_push_delivered",
                         "pull_seq"):
                getattr(self, name)[...] = arrays[name]
            self.covered_push_seq[:] = arrays["push_seq"]
            self.covered_pull_seq[:] = arrays["pull_seq"]
            ids = lambda key: set(np.flatnonzero(arrays[key]).tolist())  # noqa: E731
            self._joined, self._flushed, self._finished, self._failed = ids("joined"), ids("flushed"), ids("finished"), ids("gone")
            now = time.monotonic()
            for r in range(W):  # every unfinished worker is lost until it comes back
                if r not in self._finished and r not in self._failed:
                    self._lost[r] = now
            self.checkpoint_seq = int(info["seq"])
            self._resumed = True
            self._grace_until = now + self.join_timeout_s  # workers have join_timeout_s to reconnect
            self._fault("ps_resumed", checkpoint=int(info["seq"]), since_checkpoint_s=max(0.0, time.time() - info["wall_s"]),
                        reason="; ".join(problems)[:300] if problems else "")
        return info

    # ------------------------------------------------------------------ logging
    def _log(self, kind: str, t0: float | None = None, **fields) -> None:
        if self.events is not None:
            self.events.write(kind, None if t0 is None else self.events.at(t0), **fields)
