"""The parameter server's threads and connections: serving a listener or connected ends, one thread
per worker connection running that worker's side of the protocol, stopping, and the end of a run.

A mixin of :class:`rog.runtime.server.ParameterServer` (which holds the state and states the
guarantees); the shared waits (:meth:`PSLifecycle._wait`) and the event log writer live here too.
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

from ..transport import Begin, Bye, Connection, Error, Listener, ProtocolError, TransportError, TransportTimeout
from .clock_sync import CLOCK_MESSAGES
from .messages import AdmitRequest, Flush, PullSegments, PushDone, Rejoin
from .scheduler import scheduler_loop
from .worker import RuntimeFailure

POLL_S = 0.25  # how often a waiting thread wakes to check for a stop request


class _Stopped(Exception):
    """The server is stopping; a waiting thread gives up."""


class _Superseded(Exception):
    """The worker came back on a newer connection; the thread of the old one gives up."""


class _Left(RuntimeFailure):
    """The worker said bye without flushing: it left for good (not a broken link)."""


class PSLifecycle:
    """Serving, connection threads, waits and the end of a run (mixin of ``ParameterServer``)."""

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
                    self._cond.wait(POLL_S)
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
            reason = f"{type(e).__name__}: {e}"
            if current and r in self._joined:  # also a rejoin that broke half-way: lost again
                with self._cond:
                    if isinstance(e, _Left):
                        self._failed.add(r)
                        self.active[r] = False  # never wait on a worker that left
                        self._fault("worker_left", worker=r, level="warning", reason=reason[:300],
                                    iteration=int(self.push_iter[r]))
                    elif self._record_loss(r, conn, reason, noticed_by="connection") and self.evict_after_s == 0:
                        self._evict(r, 0.0)
            elif joined or id(conn) in self._rejoining:  # a newer link took over: recorded there unless seen first
                with self._cond:
                    if not isinstance(e, _Left):
                        self._record_loss(r, conn, reason + " (a newer link had already taken over)",
                                          noticed_by="connection")
            elif 0 <= r < self.n_workers:
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
                    self.admission.forget(r)
                self._cond.notify_all()
            conn.close("parameter server done" if ok else "parameter server: connection failed")

    def _wait(self, ready, timeout_s: float | None, what: str, conn: Connection | None = None) -> None:
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while not ready():
            self._check_current(conn)
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise RuntimeFailure(f"timed out: {what}")
            self._cond.wait(POLL_S if left is None else min(left, POLL_S))

    def _check_current(self, conn: Connection | None) -> None:
        if self._stop.is_set():
            raise _Stopped()
        if conn is not None and self._conns.get(conn.worker_id) is not conn and conn.worker_id in self._conns:
            raise _Superseded()

    def _log(self, kind: str, t0: float | None = None, **fields) -> None:
        if self.events is not None:
            self.events.write(kind, None if t0 is None else self.events.at(t0), **fields)
