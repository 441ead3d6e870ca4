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
* with checkpoints (``ps.checkpoints.start``) the PS can be restarted from its latest checkpoint
  (``ps.checkpoints.resume``); every :class:`PullStart` tells a worker which of its pushes and pulls that
  checkpoint covers, the worker keeps the encoded chunks of the others, and after a restart it
  re-sends them (:class:`Resync`): the PS adds the pushes to every pending buffer and subtracts the
  pulls from the worker's own.  With compression off every worker's model after the flush then
  equals the initial model minus the sum of every committed push over W.  Not restored: the
  policy's measurements and exact row versions of re-sent rows (they get the worker's newest
  pushed iteration), which only shape the schedule, never the model.

The code, split by state: the server itself (configuration, the lock, the threads and connections, the
end of a run, the event and fault records) owns five parts, each with its own state and called under the
server's lock: ``state`` (:class:`~rog.runtime.ps_state.RowState`, the arrays above), ``membership``
(:class:`~rog.runtime.ps_membership.Membership`: join, loss, eviction, rejoin), ``team``
(:class:`~rog.runtime.initial_model.TeamModel`: the initial parameters handed out at join), ``admission``
(:class:`~rog.runtime.ps_admission.Admission`: the transfer slots), ``exchange``
(:class:`~rog.runtime.ps_exchange.Exchange`: push, gate, pull, flush) and ``checkpoints``
(:class:`~rog.runtime.ps_checkpoint.Checkpoints`: checkpoints and resume).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

import numpy as np

from ..chunks import DEFAULT_CHUNK_BYTES
from ..codecs.compression import Codec
from ..policies.base import Policy, ServerView, TransferReport
from ..rows import RowPartition
from ..transport import Begin, Bye, Connection, Error, Listener, ProtocolError, TransportError, TransportTimeout
from .clock_sync import CLOCK_MESSAGES, ClockOffsets
from .errors import POLL_S, RuntimeFailure, Stopped, Superseded
from .events import EventLog
from .initial_model import TeamModel
from .messages import AdmitRequest, Flush, PullSegments, PushDone, Rejoin
from .ps_admission import Admission
from .ps_checkpoint import Checkpoints
from .ps_exchange import Exchange
from .ps_membership import Left, Membership
from .ps_state import RowState
from .scheduler import scheduler_loop


class ParameterServer:
    """One parameter server for ``n_workers`` workers (ids ``0 .. n_workers-1``).

    Serve connections with :meth:`serve` (a :class:`~rog.transport.Listener`), :meth:`run`
    (already connected ends, e.g. from :func:`~rog.transport.inproc_pair`) or :meth:`start`
    (either, in a background thread).  After the run: ``state`` (``pending``, ``versions``, ``push_iter``, ...),
    ``reports`` (every :class:`TransferReport` given to ``policy.observe``), ``errors``, ``faults``.
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
        initial_params: np.ndarray | None = None,
    ) -> None:
        if not isinstance(partition, RowPartition):
            raise ValueError("partition must be a rog.rows.RowPartition (RowPartition.from_module(model))")
        if isinstance(n_workers, bool) or int(n_workers) != n_workers or n_workers < 1:
            raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
        if not isinstance(policy, Policy):
            raise ValueError(f"policy must be a rog.policies.Policy (make_policy('ROG', 4)), got {type(policy).__name__}")
        if not isinstance(codec, Codec):
            raise ValueError(f"codec must be a rog.codecs.compression.Codec (make_codec('sign')), got {type(codec).__name__}")
        if isinstance(chunk_bytes, bool) or int(chunk_bytes) != chunk_bytes or chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
        for name, v in (("join_timeout_s", join_timeout_s), ("wait_timeout_s", wait_timeout_s)):
            if not v > 0:
                raise ValueError(f"{name} must be positive, got {v!r}")
        if not (evict_after_s >= 0 and np.isfinite(evict_after_s)):
            raise ValueError(f"evict_after_s must be a finite number of seconds >= 0 (0: evict at once), got {evict_after_s!r}")
        if initial_params is not None:
            initial_params = np.ascontiguousarray(initial_params, dtype=np.float32).reshape(-1)
            if initial_params.size != partition.n_elements or not np.all(np.isfinite(initial_params)):
                raise ValueError(f"initial_params must hold {partition.n_elements} finite float32 values (the layout's), "
                                 f"got {initial_params.size}")
        self.partition = partition
        self.n_workers = int(n_workers)
        self.policy = policy
        self.codec = codec
        self.events = events
        self.chunk_bytes = int(chunk_bytes)
        self.join_timeout_s = float(join_timeout_s)
        self.wait_timeout_s = float(wait_timeout_s)
        self.cond = threading.Condition(threading.RLock())  # the one lock: every part below is changed under it
        self.stopping = threading.Event()  # set by stop(): waiting threads give up
        self.ended = False  # the serving loop is over
        self.reports: list[TransferReport] = []
        self.errors: list[tuple[int, BaseException]] = []
        self.faults: list[dict] = []  # fault records (as logged), for callers without an event log
        self.state = RowState(partition, self.n_workers)
        self.membership = Membership(self, evict_after_s)
        self.team = TeamModel(self, initial_params)  # the team's starting parameters (rog.runtime.initial_model)
        self.admission = Admission(policy, self.cond, self.server_view, self.wait, self.wait_timeout_s)
        self.exchange = Exchange(self)
        self.checkpoints = Checkpoints(self)
        self._threads: list[threading.Thread] = []
        self.global_loss, self.schedule_records, self._sched_thread = global_loss, [], None  # rog.runtime.scheduler
        self.clock_offsets = ClockOffsets(events)  # each worker host's clock offset (rog.runtime.clock_sync)

    @property
    def max_in_flight(self) -> int:
        """The most transfer slots held at once in this run."""
        return self.admission.max_in_flight

    @property
    def failed_workers(self) -> list[int]:
        """Workers that are gone: evicted and not back, or left without flushing."""
        with self.cond:
            return sorted(self.membership.failed)

    @property
    def finished_workers(self) -> list[int]:
        """Workers that flushed and said bye."""
        with self.cond:
            return sorted(self.membership.finished)

    def server_view(self) -> ServerView:
        """A snapshot (copies) of the PS state for a policy decision."""
        with self.cond:
            return self.state.view()

    def run(self, conns: Sequence[Connection]) -> None:
        """Serve already connected ends (one per worker; more may come through :meth:`add_connection`)
        until every worker has finished or is gone; raise if any did not finish."""
        self._log_start()
        for c in conns:
            self.add_connection(c)
        try:
            with self.cond:
                while not self.membership.done():
                    if self.stopping.is_set():
                        break
                    self.cond.wait(POLL_S)
                    self.membership.tick()
        finally:
            self._end_threads()
        self._finish()

    def add_connection(self, conn: Connection) -> threading.Thread:
        """Serve one more connection (a worker joining or coming back), in its own thread."""
        t = threading.Thread(target=self.serve_connection, args=(conn,), name=f"rog-ps-w{conn.worker_id}", daemon=True)
        t.start()
        with self.cond:
            self._threads.append(t)
        return t

    def start(self, source: Listener | Sequence[Connection]) -> threading.Thread:
        """:meth:`serve` a listener or :meth:`run` connections in a background thread (errors land in ``errors``)."""

        def body() -> None:
            try:
                if isinstance(source, Listener):
                    self.serve(source)
                else:
                    self.run(source)
            except BaseException as e:  # noqa: BLE001 - reported through self.errors
                with self.cond:
                    if not self.errors:
                        self.errors.append((-1, e))

        t = threading.Thread(target=body, name="rog-ps", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        """Ask every waiting thread to give up (a failed run)."""
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()

    def serve(self, listener: Listener, accept_timeout_s: float | None = None) -> None:
        """Accept ``n_workers`` connections from ``listener``, serve them until all have left; raise if any failed."""
        accept_timeout_s = self.join_timeout_s if accept_timeout_s is None else accept_timeout_s
        self._log_start()
        accepted = 0
        deadline = time.monotonic() + accept_timeout_s
        try:
            while True:
                with self.cond:
                    if self.membership.done():
                        break
                    joined = len(self.membership.joined)
                if self.stopping.is_set():
                    raise RuntimeFailure("the parameter server was stopped")
                if not self.membership.resumed and joined < self.n_workers and time.monotonic() > deadline:
                    raise RuntimeFailure(
                        f"only {accepted} of {self.n_workers} workers connected within {accept_timeout_s} s"
                        + (f"; refused: {listener.refused}" if listener.refused else "")
                    )
                with self.cond:
                    self.membership.tick()
                try:
                    conn = listener.accept(POLL_S)
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

    def _log_start(self) -> None:
        if self.policy.scheduler_period_s is not None and self._sched_thread is None:
            self._sched_thread = threading.Thread(target=scheduler_loop, args=(self,), name="rog-ps-scheduler", daemon=True)
            self._sched_thread.start()
        if not self.membership.resumed:
            self.log("run_start", policy=self.policy.name, threshold=self.policy.threshold, n_workers=self.n_workers,
                     codec=self.codec.name)

    def _end_threads(self) -> None:
        with self.cond:
            self.ended = True
            threads = list(self._threads)
            self.cond.notify_all()
        for t in threads:
            t.join(timeout=5.0)  # daemon threads: a stuck one is not waited for
        self.checkpoints.stop()

    def _finish(self) -> None:
        with self.cond:
            unfinished = [r for r in range(self.n_workers) if r not in self.membership.finished]
        reason = "; ".join(f"worker {r}: {type(e).__name__}: {e}" for r, e in self.errors)
        if unfinished:
            reason = f"worker(s) {unfinished} did not finish; " + reason
        self.log("run_end", status="error" if unfinished else "ok", iterations=int(self.state.push_iter.max()),
                 reason=reason)
        if unfinished:
            if self.errors:
                r, e = self.errors[0]
                raise RuntimeFailure(f"parameter server: worker(s) {unfinished} did not finish; "
                                     f"{len(self.errors)} connection failure(s), first: worker {r}: {e}") from e
            raise RuntimeFailure(f"parameter server: worker(s) {unfinished} did not finish")

    def serve_connection(self, conn: Connection) -> None:
        """Run one worker's side of the protocol until it says bye (a thread body; errors go to ``errors``)."""
        r = conn.worker_id
        members, exchange = self.membership, self.exchange
        ok = joined = False
        with self.cond:
            members.alive[r] = members.alive.get(r, 0) + 1
        try:
            first = conn.recv(self.join_timeout_s)
            if isinstance(first, Rejoin):
                members.rejoin(conn, first)
            else:
                members.join(conn, first)
            joined = True
            while True:
                msg = conn.recv(self.wait_timeout_s)
                if isinstance(msg, AdmitRequest):
                    exchange.admit(conn, r, msg)
                elif isinstance(msg, Begin):
                    exchange.receive_push(conn, r, msg, flush=False)
                elif isinstance(msg, PushDone):
                    exchange.gate_and_pull(conn, r, msg)
                elif isinstance(msg, PullSegments):
                    exchange.pull_segments[r] = msg.seg_of_tensor
                elif isinstance(msg, CLOCK_MESSAGES):
                    self.clock_offsets.handle(conn, r, msg)
                elif isinstance(msg, Flush):
                    exchange.flush(conn, r, msg)
                elif isinstance(msg, Bye):
                    ok = r in members.flushed
                    if not ok:
                        raise Left(f"worker {r} left before flushing ({msg.text or 'no reason given'})")
                    break
                elif isinstance(msg, Error):
                    raise Left(f"worker {r} reported: {msg.text}")
                else:
                    raise ProtocolError(f"unexpected {type(msg).__name__} from worker {r}")
        except (Stopped, Superseded):
            pass
        except BaseException as e:  # noqa: BLE001 - recorded; the worker is lost (may come back) or gone
            with self.cond:
                current = members.conns.get(r) is conn
                if current or not joined:
                    self.errors.append((r, e))
            if not isinstance(e, (TransportTimeout,)) and not (isinstance(e, TransportError) and not isinstance(e, ProtocolError)):
                try:
                    conn.send(Error(2, f"{type(e).__name__}: {e}"[:500]))
                except (TransportError, OSError):
                    pass
            with self.cond:
                members.connection_failed(r, conn, e, joined, current)
        finally:
            with self.cond:
                members.connection_closed(r, conn, ok, joined)
            conn.close("parameter server done" if ok else "parameter server: connection failed")

    def wait(self, ready, timeout_s: float | None, what: str, conn: Connection | None = None) -> None:
        """Wait on the lock (held by the caller) until ``ready()``; fail after ``timeout_s`` (None: never) naming
        ``what``, and give up when the server stops or ``conn`` is superseded."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while not ready():
            self.check_current(conn)
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise RuntimeFailure(f"timed out: {what}")
            self.cond.wait(POLL_S if left is None else min(left, POLL_S))

    def check_current(self, conn: Connection | None) -> None:
        """Give up (raise) when the server stops or ``conn`` is no longer its worker's newest connection."""
        if self.stopping.is_set():
            raise Stopped()
        conns = self.membership.conns
        if conn is not None and conns.get(conn.worker_id) is not conn and conn.worker_id in conns:
            raise Superseded()

    def fault(self, event: str, **fields) -> None:
        """Record a fault (``faults`` and the event log)."""
        rec = dict(event=event, **fields)
        self.faults.append(rec)
        self.log("fault", **rec)

    def log_while_running(self, kind: str, t0: float | None = None, **fields) -> bool:
        """:meth:`log` from a thread the run may outlive (a rate push's sender): written only while the run has not
        ended, since the caller may close the event log once it has; returns whether it was written."""
        with self.cond:  # the serving loop sets ended under this lock: no record slips in after it
            if self.ended:
                return False
            self.log(kind, t0, **fields)
            return True

    def log(self, kind: str, t0: float | None = None, **fields) -> None:
        """Write one event (``t0``: its start, a ``time.monotonic()``) when the server has an event log."""
        if self.events is not None:
            self.events.write(kind, None if t0 is None else self.events.at(t0), **fields)
