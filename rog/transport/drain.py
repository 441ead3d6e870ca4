"""How fast the link empties this end's kernel send queue: the estimate behind deadline-aware writes.

A deadline is about when the bytes *arrive*, but a sender only controls when it hands them to
the kernel.  Bytes already queued (unsent, or sent and not yet acknowledged) still have to cross
the link, so at a low rate a piece written just before the deadline can arrive seconds after it
(measured: 8 KB pieces at 13-30 kbit/s overshot 5 s deadlines by up to 5.8 s).

:class:`DrainMeter` turns samples of ``(time, bytes written, bytes not yet sent)`` into a drain
rate.  ``bytes written - bytes unsent`` is what TCP has handed to the link (``SIOCOUTQNSD``).
Only our own writes add to the unsent queue, so if nothing was written between two samples and
it is not empty at the second, it was never empty in between: TCP was held back by the link the
whole interval, and ``delta sent / delta t`` over that interval is the link's rate.  Intervals
that may hold idle time (a write in between, or an empty queue at their end) are not used.  The
unsent queue, unlike the unacknowledged one, does not wait for delayed ACKs, so a fast link
(nothing ever waits unsent) gives no estimate at all instead of a wrong, low one.  Busy intervals
are averaged with exponential forgetting over clock time (``half_life_s``), so the estimate
follows the trace, and an estimate with no busy interval for ``max_age_s`` expires: a refusal
based on it would stop the very writes that could refresh it.

:meth:`DrainMeter.finish_s` then predicts when ``n`` more bytes written now would be through:
``(queued + n) / rate``, with ``queued`` everything not yet acknowledged (``SIOCOUTQ``).  The
connection refuses a speculative piece whose prediction ends after the deadline (:meth:`rog.transport.connection.Connection.write_raw`).
"""

from __future__ import annotations

__all__ = ["DrainMeter"]


class DrainMeter:
    """Drain-rate estimate of one connection's send queue (bytes/s), from busy intervals only.

    ``half_life_s``: clock time after which an old interval weighs half as much.  ``min_busy_s``:
    busy time needed before the estimate is trusted (before that, :attr:`rate_Bps` is None).
    ``max_age_s``: :meth:`finish_s` gives no prediction this long after the last busy interval.
    """

    def __init__(self, half_life_s: float = 0.5, min_busy_s: float = 0.02, max_age_s: float = 2.0) -> None:
        if not half_life_s > 0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s!r}")
        if not min_busy_s >= 0:
            raise ValueError(f"min_busy_s must be >= 0, got {min_busy_s!r}")
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s!r}")
        self.half_life_s = float(half_life_s)
        self.min_busy_s = float(min_busy_s)
        self.max_age_s = float(max_age_s)
        self._last_busy: float | None = None  # clock time the last busy interval ended
        self._prev: tuple[float, int, int] | None = None  # (time, written, sent) of the last sample
        self._bytes = 0.0  # forgetting-weighted bytes sent over busy intervals
        self._busy_s = 0.0  # forgetting-weighted busy time
        self.samples = 0  # busy intervals used (diagnostics)

    def observe(self, t: float, written: int, unsent: int) -> None:
        """A sample: clock time ``t``, bytes handed to the kernel so far, bytes it has not sent yet."""
        if unsent < 0 or unsent > written:
            raise ValueError(f"unsent={unsent} must lie in [0, written={written}]")
        sent = written - unsent
        prev, self._prev = self._prev, (t, written, sent)
        if prev is None or written != prev[1] or unsent == 0:
            return  # first sample, a write in between, or an empty queue at the end: maybe idle time
        dt, db = t - prev[0], sent - prev[2]
        if dt <= 0 or db < 0:
            return
        since = t - (self._last_busy if self._last_busy is not None else prev[0])
        keep = 0.5 ** (max(since, dt) / self.half_life_s)
        self._bytes = self._bytes * keep + db
        self._busy_s = self._busy_s * keep + dt
        self._last_busy = t
        self.samples += 1

    @property
    def rate_Bps(self) -> float | None:
        """The estimated drain rate in bytes/s; None until ``min_busy_s`` of busy time was seen."""
        if self._busy_s <= 0 or self._busy_s < self.min_busy_s:
            return None
        return self._bytes / self._busy_s

    def finish_s(self, queued: int, n: int, now: float | None = None) -> float | None:
        """Seconds until ``n`` bytes written now are through, behind ``queued`` bytes; None if unknown
        (no estimate yet, or at clock time ``now`` none younger than ``max_age_s``).

        An estimated rate of 0 (nothing sent over the busy intervals) gives infinity."""
        rate = self.rate_Bps
        if rate is None:
            return None
        if now is not None and self._last_busy is not None and now - self._last_busy > self.max_age_s:
            return None
        if rate <= 0:
            return float("inf")
        return (queued + n) / rate
