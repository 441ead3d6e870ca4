"""Modelled links: how long bytes take over a link whose rate follows a trace.

Used by the in-process simulator (:mod:`rog.sim`) to time chunk deliveries, and meant to be
reused by a rate limiter.  A :class:`RateTrace` is piecewise constant (zero-order hold, like the
traces of :mod:`rog.traces`): ``rate_mbit[k]`` holds from ``times_s[k]`` until
``times_s[k + 1]``; the last rate holds forever, or the trace repeats every ``period_s`` seconds
with ``loop=True``.  Time 0 is the start of the run; rates are megabits (10^6 bits) per second.

Zero rates are allowed (an outage): a transfer that meets one simply waits.  A transfer that can
never finish (the rate stays 0 forever) ends at ``math.inf``.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

BYTES_PER_MBIT = 1e6 / 8  # bytes per second at 1 Mbit/s


class Link(Protocol):
    """What a modelled link offers: the timing of bytes sent from a start time."""

    def transfer_end_s(self, start_s: float, nbytes): ...

    def bytes_by(self, start_s: float, end_s: float) -> float: ...

    def rate_mbit_at(self, t_s: float) -> float: ...


class RateTrace:
    """A piecewise-constant rate over time (zero-order hold), optionally looping."""

    def __init__(
        self,
        times_s: Sequence[float],
        rate_mbit: Sequence[float],
        loop: bool = False,
        period_s: float | None = None,
    ) -> None:
        t = np.asarray(times_s, dtype=np.float64).reshape(-1)
        r = np.asarray(rate_mbit, dtype=np.float64).reshape(-1)
        if t.size == 0:
            raise ValueError("times_s is empty; a rate trace needs at least one sample (times_s=[0.0])")
        if t.shape != r.shape:
            raise ValueError(f"times_s has {t.size} samples but rate_mbit has {r.size}; give one rate per time")
        if not np.all(np.isfinite(t)):
            raise ValueError("times_s holds a non-finite value")
        if t[0] != 0.0:
            raise ValueError(f"times_s must start at 0 (the start of the run), got times_s[0]={t[0]}")
        if t.size > 1 and np.any(np.diff(t) <= 0):
            k = int(np.argmax(np.diff(t) <= 0)) + 1
            raise ValueError(f"times_s must be strictly increasing; times_s[{k}]={t[k]} <= times_s[{k - 1}]={t[k - 1]}")
        if not np.all(np.isfinite(r)) or np.any(r < 0):
            k = int(np.argmax(~np.isfinite(r) | (r < 0)))
            raise ValueError(f"rate_mbit must be finite and >= 0; rate_mbit[{k}]={r[k]}")
        if loop:
            if period_s is None:
                raise ValueError("loop=True needs period_s (when the trace restarts), a time > times_s[-1]")
            if not (math.isfinite(period_s) and period_s > t[-1]):
                raise ValueError(f"period_s must be finite and > times_s[-1]={t[-1]}, got {period_s}")
        elif period_s is not None:
            raise ValueError("period_s is only used with loop=True; drop it or set loop=True")
        self.times_s = t
        self.rate_mbit = r
        self.loop = bool(loop)
        self.period_s = float(period_s) if loop else None
        self._bps = r * BYTES_PER_MBIT  # bytes per second in each piece
        # cumulative bytes at each breakpoint (and at the period end when looping)
        ends = np.append(t[1:], self.period_s) if loop else t[1:]
        self._cum = np.concatenate([[0.0], np.cumsum(self._bps[: ends.size] * (ends - t[: ends.size]))])
        self._period_bytes = float(self._cum[-1]) if loop else None

    # ------------------------------------------------------------------ constructors
    @classmethod
    def constant(cls, rate_mbit: float) -> "RateTrace":
        """A link of one fixed rate."""
        return cls([0.0], [rate_mbit])

    @classmethod
    def from_csv(cls, path: str | Path, loop: bool = False, period_s: float | None = None) -> "RateTrace":
        """Read a ``t_s,mbps`` CSV (header line, one rate change per row; the shared trace format)."""
        path = Path(path)
        times: list[float] = []
        rates: list[float] = []
        with path.open(newline="") as f:
            rows = csv.reader(f)
            header = next(rows, None)
            if header is None or [h.strip() for h in header[:2]] != ["t_s", "mbps"]:
                raise ValueError(f"{path}:1: expected the header 't_s,mbps', got {header!r}")
            for line_no, row in enumerate(rows, start=2):
                if not row or not "".join(row).strip():
                    continue
                try:
                    times.append(float(row[0]))
                    rates.append(float(row[1]))
                except (ValueError, IndexError):
                    raise ValueError(f"{path}:{line_no}: expected two numbers 't_s,mbps', got {row!r}") from None
        if times and times[0] != 0.0:
            raise ValueError(f"{path}:2: the first sample must be at t_s=0, got {times[0]}")
        try:
            return cls(times, rates, loop=loop, period_s=period_s)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def scaled(self, rate_factor: float = 1.0, time_factor: float = 1.0) -> "RateTrace":
        """The same trace with rates times ``rate_factor`` and times (and period) times ``time_factor``."""
        if not (math.isfinite(rate_factor) and rate_factor >= 0):
            raise ValueError(f"rate_factor must be finite and >= 0, got {rate_factor}")
        if not (math.isfinite(time_factor) and time_factor > 0):
            raise ValueError(f"time_factor must be finite and > 0, got {time_factor}")
        period = self.period_s * time_factor if self.loop else None
        return RateTrace(self.times_s * time_factor, self.rate_mbit * rate_factor, self.loop, period)

    def __repr__(self) -> str:
        tail = f", loop=True, period_s={self.period_s}" if self.loop else ""
        return f"RateTrace({self.times_s.size} samples, mean {self.rate_mbit.mean():.3g} Mbit/s{tail})"

    # ------------------------------------------------------------------ queries
    def rate_mbit_at(self, t_s: float) -> float:
        """The rate in force at time ``t_s`` (>= 0)."""
        t = self._fold(float(t_s))
        return float(self.rate_mbit[np.searchsorted(self.times_s, t, side="right") - 1])

    def bytes_through(self, t_s):
        """Bytes the link carries from time 0 to ``t_s`` (scalar or array; ``inf`` stays ``inf``)."""
        t = np.asarray(t_s, dtype=np.float64)
        if np.any(t < 0) or np.any(np.isnan(t)):
            raise ValueError(f"times must be >= 0, got {t_s}")
        if self.loop:
            finite = np.isfinite(t)
            tt = np.where(finite, t, 0.0)
            n_periods = np.floor(tt / self.period_s)
            out = n_periods * self._period_bytes + self._within(tt - n_periods * self.period_s)
            out = np.where(finite, out, math.inf if self._period_bytes > 0 else 0.0)
        else:
            tail = self._bps[-1]
            finite = np.isfinite(t)
            out = np.where(finite, self._within(np.where(finite, t, 0.0)), math.inf if tail > 0 else self._cum[-1])
        return float(out) if out.ndim == 0 else out

    def bytes_by(self, start_s: float, end_s: float) -> float:
        """Bytes the link carries between ``start_s`` and ``end_s``."""
        if not start_s >= 0:
            raise ValueError(f"start_s must be >= 0, got {start_s}")
        if not end_s >= start_s:
            raise ValueError(f"end_s ({end_s}) must be >= start_s ({start_s})")
        return float(self.bytes_through(end_s) - self.bytes_through(start_s))

    def transfer_end_s(self, start_s: float, nbytes):
        """When the last of ``nbytes`` bytes sent from ``start_s`` is through (scalar or array of
        cumulative sizes; ``inf`` if the link never carries them)."""
        if not (math.isfinite(start_s) and start_s >= 0):
            raise ValueError(f"start_s must be a finite time >= 0, got {start_s}")
        n = np.asarray(nbytes, dtype=np.float64)
        if np.any(np.isnan(n)) or np.any(n < 0):
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        target = self.bytes_through(start_s) + n
        out = np.where(n > 0, self._inverse(target), start_s)
        out = np.maximum(out, start_s)  # guard rounding: never before the start
        return float(out) if out.ndim == 0 else out

    # ------------------------------------------------------------------ internals
    def _fold(self, t: float) -> float:
        if not t >= 0:
            raise ValueError(f"time must be >= 0, got {t}")
        if self.loop:
            return t - math.floor(t / self.period_s) * self.period_s
        return t

    def _within(self, t: np.ndarray) -> np.ndarray:
        """Bytes from 0 to ``t`` for ``t`` inside the first period (or anywhere without loop)."""
        k = np.searchsorted(self.times_s, t, side="right") - 1
        return self._cum[k] + self._bps[k] * (t - self.times_s[k])

    def _inverse(self, target: np.ndarray) -> np.ndarray:
        """Earliest time at which ``bytes_through`` reaches ``target`` (> 0)."""
        target = np.asarray(target, dtype=np.float64)
        if self.loop:
            cb = self._period_bytes
            if cb <= 0:
                return np.full(target.shape, math.inf)
            q = np.maximum(np.ceil(target / cb) - 1, 0)
            rem = target - q * cb
            return q * self.period_s + self._inverse_first(rem, self.period_s)
        return self._inverse_first(target, math.inf)

    def _inverse_first(self, target: np.ndarray, period_end: float) -> np.ndarray:
        cum = self._cum
        nb = self.times_s.size  # pieces
        # piece j (0-based) covers cum[j] .. cum[j+1]; the last piece is open-ended without loop
        j = np.searchsorted(cum, target, side="left") - 1
        j = np.clip(j, 0, nb - 1)
        rate = self._bps[j]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = self.times_s[j] + (target - cum[j]) / rate
        beyond = target > cum[-1] if not self.loop else np.zeros(target.shape, dtype=bool)
        t = np.where(rate > 0, t, math.inf)
        if self.loop:
            t = np.minimum(t, period_end)
        else:
            t = np.where(beyond & (self._bps[-1] <= 0), math.inf, t)
        return t


class InfiniteLink:
    """A link of unbounded rate: everything arrives the moment it is sent."""

    def transfer_end_s(self, start_s: float, nbytes):
        """Always ``start_s`` (same shape as ``nbytes``)."""
        if not (math.isfinite(start_s) and start_s >= 0):
            raise ValueError(f"start_s must be a finite time >= 0, got {start_s}")
        n = np.asarray(nbytes, dtype=np.float64)
        if np.any(np.isnan(n)) or np.any(n < 0):
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        return float(start_s) if n.ndim == 0 else np.full(n.shape, float(start_s))

    def bytes_by(self, start_s: float, end_s: float) -> float:
        """Unbounded: ``inf`` for any interval of positive length, 0 for an empty one."""
        if not end_s >= start_s:
            raise ValueError(f"end_s ({end_s}) must be >= start_s ({start_s})")
        return math.inf if end_s > start_s else 0.0

    def rate_mbit_at(self, t_s: float) -> float:
        """``inf``."""
        return math.inf

    def __repr__(self) -> str:
        return "InfiniteLink()"


def constant_link(rate_mbit: float) -> Link:
    """A fixed-rate link (``math.inf`` gives an :class:`InfiniteLink`)."""
    if rate_mbit == math.inf:
        return InfiniteLink()
    return RateTrace.constant(rate_mbit)
