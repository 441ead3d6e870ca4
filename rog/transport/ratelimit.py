"""Clocks and the sender-side token bucket that shapes a connection when no ``tc`` is available.

The bucket follows a rate function ``rate_mbit_at(t_s) -> float`` (Mbit/s = 10^6 bit/s, ``t_s``
seconds since the bucket was made), so it can replay a bandwidth trace: any callable works, e.g.
``rog.links.RateTrace.rate_mbit_at``.  A rate of 0 is an outage: writes wait.  The rate is
sampled at least every ``max_step_s`` while a write waits, so a piecewise-constant trace is
followed to within one step.  It counts every byte the transport writes (envelopes included;
TCP/IP headers are not modelled).

Tokens may go into debt: a write larger than the bucket waits until the bucket is full, then
goes, and the next write waits for the debt to be repaid.  So any message size works and the
long-run rate is exact.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, Protocol

RateFn = Callable[[float], float]
BYTES_PER_MBIT = 1e6 / 8


class Clock(Protocol):
    """Monotonic seconds and a way to wait."""

    def now(self) -> float: ...

    def sleep(self, dt_s: float) -> None: ...


class RealClock:
    """``time.monotonic`` (CLOCK_MONOTONIC: comparable between processes on one machine)."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, dt_s: float) -> None:
        if dt_s > 0:
            time.sleep(dt_s)


class VirtualClock:
    """A clock that moves only when someone sleeps: deterministic rate-limited tests in no time."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._t = float(start_s)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def sleep(self, dt_s: float) -> None:
        if dt_s > 0:
            with self._lock:
                self._t += dt_s


def as_rate_fn(rate_mbit_at: float | RateFn) -> RateFn:
    """Accept a constant rate (Mbit/s) or a callable ``rate_mbit_at(t_s)``."""
    if callable(rate_mbit_at):
        return rate_mbit_at
    rate = float(rate_mbit_at)
    if not rate >= 0 or math.isinf(rate):
        raise ValueError(f"rate_mbit_at must be a finite rate >= 0 (Mbit/s) or a callable, got {rate_mbit_at!r}")
    return lambda t_s: rate


class TokenBucket:
    """Token bucket on a sender's writes, following ``rate_mbit_at(t_s)``.

    ``burst_bytes`` is the bucket size (the most that goes out at once after an idle spell).
    ``origin_s`` is the clock time that ``t_s = 0`` of the rate function maps to (default: now).
    """

    def __init__(
        self,
        rate_mbit_at: float | RateFn,
        *,
        burst_bytes: int = 16 * 1024,
        clock: Clock | None = None,
        max_step_s: float = 0.005,
        origin_s: float | None = None,
    ) -> None:
        if burst_bytes <= 0:
            raise ValueError(f"burst_bytes must be positive, got {burst_bytes}")
        if not max_step_s > 0:
            raise ValueError(f"max_step_s must be positive, got {max_step_s}")
        self.rate_fn = as_rate_fn(rate_mbit_at)
        self.burst_bytes = int(burst_bytes)
        self.clock = clock if clock is not None else RealClock()
        self.max_step_s = float(max_step_s)
        self.origin_s = self.clock.now() if origin_s is None else float(origin_s)
        self.tokens = float(self.burst_bytes)
        self._t = self.clock.now()
        self.bytes_granted = 0

    def rate_bytes_per_s(self, t: float) -> float:
        """Rate at clock time ``t`` in bytes/s (validated)."""
        rate = float(self.rate_fn(t - self.origin_s))
        if not rate >= 0 or math.isinf(rate):
            raise ValueError(f"rate_mbit_at({t - self.origin_s:.3f}) returned {rate}; it must be a finite rate >= 0")
        return rate * BYTES_PER_MBIT

    def _refill(self) -> float:
        now = self.clock.now()
        if now > self._t:
            self.tokens = min(self.burst_bytes, self.tokens + self.rate_bytes_per_s(self._t) * (now - self._t))
            self._t = now
        return now

    def acquire(self, n_bytes: int, until: float | None = None) -> bool:
        """Wait until ``n_bytes`` may be written and take them; False (nothing taken) if clock time ``until`` comes first."""
        need = min(float(n_bytes), float(self.burst_bytes))
        while True:
            now = self._refill()
            if self.tokens >= need - 1e-9:
                self.tokens -= n_bytes
                self.bytes_granted += n_bytes
                return True
            if until is not None and now >= until:
                return False
            rate = self.rate_bytes_per_s(now)
            wait = self.max_step_s if rate <= 0 else min(self.max_step_s, (need - self.tokens) / rate)
            if until is not None:
                wait = min(wait, until - now)
            self.clock.sleep(max(wait, 1e-7))

    def refund(self, n_bytes: int) -> None:
        """Give back tokens taken for bytes that were not written after all."""
        self.tokens = min(self.burst_bytes, self.tokens + n_bytes)
        self.bytes_granted -= n_bytes
