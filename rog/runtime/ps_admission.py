"""The parameter server's admission: transfer slots handed out by the policy's ``admit``.

A worker asks for a slot before it pushes (:class:`~rog.runtime.messages.AdmitRequest`); one stalled
at the staleness gate gives its slot back and takes one again before its pull.  :class:`Admission` owns the
queue and the slots; the server holds one (``ps.admission``) and calls it with its lock held.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ..policies.base import Policy, ServerView
from ..transport import Connection
from .worker import RuntimeFailure

__all__ = ["Admission"]


class Admission:
    """The admission queue (``waiting``, arrival order) and the slots taken (``in_flight``); ``max_in_flight``: the
    most slots ever taken at once.  ``view`` gives the policy's snapshot of the server, ``wait(ready, timeout_s,
    what, conn)`` waits on the server's condition (failing when the connection is lost)."""

    def __init__(self, policy: Policy, cond: threading.Condition, view: Callable[[], ServerView],
                 wait: Callable[..., None], wait_timeout_s: float) -> None:
        self.policy, self.cond, self.view, self.wait, self.wait_timeout_s = policy, cond, view, wait, wait_timeout_s
        self.waiting: dict[int, None] = {}
        self.in_flight: set[int] = set()
        self.max_in_flight = 0

    def try_admit(self) -> None:
        """Hand slots to the waiting workers the policy chooses."""
        if not self.waiting:
            return
        chosen = self.policy.admit(self.view(), list(self.waiting), len(self.in_flight))
        for w in chosen:
            w = int(w)
            if w not in self.waiting:
                raise RuntimeFailure(f"policy.admit chose worker {w}, which is not waiting")
            self.waiting.pop(w)
            self.in_flight.add(w)
        self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
        if chosen:
            self.cond.notify_all()

    def acquire(self, r: int, conn: Connection | None = None) -> float:
        """Wait for a transfer slot; returns the seconds waited."""
        t0 = time.monotonic()
        if r in self.in_flight:
            return 0.0
        self.waiting[r] = None
        self.try_admit()
        try:
            self.wait(lambda: r in self.in_flight, self.wait_timeout_s, f"worker {r} waited for a transfer slot", conn)
        except BaseException:
            self.waiting.pop(r, None)
            raise
        return time.monotonic() - t0

    def release(self, r: int) -> None:
        """Give worker ``r``'s slot back (if it holds one) and admit the next."""
        if r in self.in_flight:
            self.in_flight.discard(r)
            self.try_admit()

    def forget(self, r: int) -> None:
        """Worker ``r`` holds no slot and waits for none (it flushed, left or was evicted); admit the next."""
        self.in_flight.discard(r)
        self.waiting.pop(r, None)
        self.try_admit()
