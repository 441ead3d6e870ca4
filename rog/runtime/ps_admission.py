"""The parameter server's admission: transfer slots handed out by the policy's ``admit``.

A worker asks for a slot before it pushes (:class:`~rog.runtime.messages.AdmitRequest`); one stalled
at the staleness gate gives its slot back and takes one again before its pull.  The queue and the
slots are guarded by the server's lock (call these with it held).  A mixin of
:class:`rog.runtime.server.ParameterServer`.
"""

from __future__ import annotations

import time

from ..policies.base import ServerView
from ..transport import Connection
from .messages import AdmitGrant, AdmitRequest
from .worker import RuntimeFailure


class PSAdmission:
    """Transfer slots and the policy's view of the PS (mixin of ``ParameterServer``)."""

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

    def _admit(self, conn: Connection, r: int, msg: AdmitRequest) -> None:
        with self._cond:
            waited = self._acquire(r, conn)
        conn.send(AdmitGrant(msg.iteration, waited))
