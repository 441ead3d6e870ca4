"""Rates delivered on time: the PS's scheduler pushes new commit rates to every worker at once.

A policy's scheduler (ADSP) returns ``rates`` records (a search-window boundary: every worker restarts
its commit timer) and ``checkpoint`` records (the catch-up rule's new ``dC_i``; the timer runs on).
:func:`rate_pushes` turns one tick's records into one push; :class:`RateBroadcaster` sends it as a
:class:`~rog.runtime.messages.RateUpdate` on every worker's connection at once (one short thread per
worker, so a slow link delays only its own worker), never waiting for a pull.  The worker's
connection takes the message out of band (:func:`attach_rate_receiver`): it lands between any two
messages, also inside a transmission, and the worker acts on it at its next mini-batch boundary at the
latest (it polls its connection there).

Every push is kept in ``sent`` as ``(seq, worker, rate, restart, t_sent)`` (``time.monotonic()``) and
logged as a ``rate_push`` event; the worker keeps ``(seq, rate, restart, t_received)`` in its
``rates_received`` and logs a ``rate`` event, so the delivery latency of every push is measured.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ..transport import TransportError
from .messages import RateUpdate

SEND_JOIN_S = 5.0  # how long the scheduler waits for one push's sends before it goes on (they keep running)


def rate_pushes(records: list[dict]) -> tuple[list[float], bool] | None:
    """``(rates per worker, restart)`` for one scheduler tick's records, or None when no rate changed hands.

    The last ``rates`` or ``checkpoint`` record (ADSP) or ``period`` record (adaptive ADACOMM's tau) carries
    the values in force; ``restart`` is True when the tick held a ``rates`` record (a window boundary)."""
    last, restart = None, False
    for rec in records:
        if rec.get("event") in ("rates", "checkpoint", "period") and rec.get("delta_c") is not None:
            last = rec
            restart |= rec["event"] == "rates"
    if last is None:
        return None
    return [float(v) for v in last["delta_c"]], restart


class RateBroadcaster:
    """Sends each push to every connected worker at once (``ps``: a ParameterServer)."""

    def __init__(self, ps) -> None:
        self.ps = ps
        self.seq = 0
        self.sent: list[tuple[int, int, float, bool, float]] = []
        self._lock = threading.Lock()

    def push(self, rates: list[float], restart: bool) -> list[threading.Thread]:
        """Send ``rates[r]`` to every connected worker ``r`` now; returns the sender threads (already started).

        Called right after the scheduler tick, outside the server's lock.  With ``restart`` the policy is
        told (under the lock) which workers are mid-commit, so that a commit already under way at the
        boundary does not count as one at the new rate (:meth:`~rog.policies.adsp.ADSP.rates_pushed`)."""
        ps = self.ps
        with ps.cond:
            conns = dict(ps.membership.conns)
            busy = set(ps.admission.in_flight)  # admitted and not yet through its pull: a commit under way
            if restart and hasattr(ps.policy, "rates_pushed"):
                ps.policy.rates_pushed(busy)
            # the moment the policy's window count starts (before any send), on the event clock
            boundary_s = ps.events.at(time.monotonic()) if ps.events is not None else 0.0  # 0: nothing is logged
        self.seq += 1
        seq = self.seq
        threads = []
        for r, conn in sorted(conns.items()):
            if 0 <= r < len(rates):
                t = threading.Thread(target=self._send, args=(conn, r, seq, rates[r], restart, boundary_s),
                                     name=f"rog-ps-rate-w{r}", daemon=True)
                t.start()
                threads.append(t)
        return threads

    def _send(self, conn, r: int, seq: int, rate: float, restart: bool, boundary_s: float) -> None:
        t_sent = time.monotonic()
        try:
            conn.send(RateUpdate(seq, rate, restart))
        except (TransportError, OSError) as e:  # the worker's link broke: its own thread reports that
            # a send the run outlived (the links closed at its end) is no part of the run: not logged then
            self.ps.log_while_running("rate_push", t_sent, worker=r, seq=seq, rate=rate, restart=restart,
                                      boundary_s=boundary_s, error=f"{type(e).__name__}: {e}"[:200])
            return
        with self._lock:
            self.sent.append((seq, r, rate, restart, t_sent))
        self.ps.log_while_running("rate_push", t_sent, worker=r, seq=seq, rate=rate, restart=restart,
                                  boundary_s=boundary_s)

    def after_tick(self, records: list[dict]) -> None:
        """Push what one tick's records decided (if anything), waiting briefly for the sends."""
        what = rate_pushes(records)
        if what is None:
            return
        for t in self.push(*what):
            t.join(SEND_JOIN_S)


def attach_rate_receiver(engine, on_rate: Callable[[RateUpdate, float], None] | None = None) -> None:
    """Take :class:`RateUpdate` out of ``engine.conn``'s stream: set ``engine.control`` (the rate), restart
    the commit timer on a window boundary, keep ``(seq, rate, restart, t_received)`` in
    ``engine.rates_received`` and log a ``rate`` event.  Called again after every reconnect."""

    def handle(msg: RateUpdate, t_received: float) -> None:
        now = time.monotonic()
        engine.control = float(msg.rate)
        if msg.restart:
            engine._t_last_commit = now
        engine.rates_received.append((msg.seq, float(msg.rate), bool(msg.restart), now))
        engine._log("rate", now, seq=msg.seq, rate=float(msg.rate), restart=bool(msg.restart))
        if on_rate is not None:
            on_rate(msg, now)

    engine.conn.out_of_band[RateUpdate] = handle
