"""Per-worker stream sources: an arrival process (a constant rate or a ``t_s,samples_per_s`` rate trace)
feeding a buffer that holds a *count* of samples in arrival order, with a blocking take.

* ``persistence`` (ScaDLES's default, Kafka retention): nothing is dropped; after ``T`` iterations of
  ``t`` seconds at rate ``S`` and batch ``b`` the buffer holds ``(t S - b) T + S`` samples (Eq. 2:
  the stream starts :data:`PREFILL_S` = 1 s before the first iteration, the ``+ S`` term).
* ``truncate``: a buffer of capacity ``max(ceil(S x 1 s), b)`` that drops its *oldest* samples on
  overflow, so it never holds more than ``max(S, b)`` samples (the paper keeps "just enough data
  corresponding to S_i").

:meth:`StreamBuffer.take` really sleeps until the arrival clock has delivered ``b`` samples: the wait
shows in wall time (and, as time no compute/communication/stall record covers, as idle power).  The
samples themselves are the worker's shard in arrival order; the caller skips the ones the buffer
dropped (:attr:`TakeResult.skip`) and trains on the next ``b``.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

BUFFERS = ("persistence", "truncate")
PREFILL_S = 1.0  # the stream runs this long before the first iteration (Eq. 2's "+ S")
TRUNCATE_KEEP_S = 1.0  # truncate keeps at most this many seconds of the stream (or one batch, if larger)
CIFAR_SAMPLE_BYTES = 3072  # 32 x 32 x 3 bytes: the paper's accounting unit for buffer sizes (Table II)
TRACE_HEADER = ("t_s", "samples_per_s")


class RateTraceError(ValueError):
    """A malformed rate trace; the message names the file and line and says how to fix it."""


@dataclass(frozen=True)
class RateTrace:
    """A piecewise-constant arrival rate: ``rates[i]`` samples/s from ``times_s[i]`` until the next time
    (the last rate holds for ever)."""

    times_s: tuple[float, ...]
    rates: tuple[float, ...]

    def __post_init__(self):
        if not self.times_s or len(self.times_s) != len(self.rates):
            raise ValueError("a rate trace needs one rate per time and at least one sample")
        if self.times_s[0] != 0.0 or any(b <= a for a, b in zip(self.times_s, self.times_s[1:])):
            raise ValueError("rate trace times must start at 0 and increase strictly")
        if any(not (r > 0 and math.isfinite(r)) for r in self.rates):
            raise ValueError("rate trace rates must be positive finite numbers (samples per second)")

    @property
    def mean_rate(self) -> float:
        """Time-weighted mean over the listed segments (the last one counted for its predecessor's length)."""
        if len(self.times_s) == 1:
            return self.rates[0]
        t = list(self.times_s) + [self.times_s[-1] + (self.times_s[-1] - self.times_s[-2])]
        return sum(r * (t[i + 1] - t[i]) for i, r in enumerate(self.rates)) / t[-1]


def load_rate_trace(path: str | Path) -> RateTrace:
    """Read a ``t_s,samples_per_s`` CSV (header optional, ``#`` comments allowed); :class:`RateTraceError`
    names the file and line of the first bad row."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as e:
        raise RateTraceError(f"{p}: cannot read the rate trace ({e.strerror}); give an existing "
                             f"'t_s,samples_per_s' CSV file") from None
    times, rates = [], []
    for i, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if not times and tuple(cells) == TRACE_HEADER:
            continue
        where = f"{p}:{i}"
        if len(cells) != 2:
            raise RateTraceError(f"{where}: expected 2 comma-separated fields 't_s,samples_per_s', got {len(cells)} "
                                 f"({raw.strip()!r}); write one 'seconds,rate' pair per line")
        try:
            t, r = float(cells[0]), float(cells[1])
        except ValueError:
            raise RateTraceError(f"{where}: {raw.strip()!r} is not two numbers; write 'seconds,samples_per_s' "
                                 f"e.g. '0,40'") from None
        if not times and t != 0.0:
            raise RateTraceError(f"{where}: the first time must be 0 (got {t:g}); start the trace at t_s = 0")
        if times and not t > times[-1]:
            raise RateTraceError(f"{where}: time {t:g} does not increase (previous {times[-1]:g}); sort the rows by t_s")
        if not (r > 0 and math.isfinite(r)):
            raise RateTraceError(f"{where}: rate {r:g} must be a positive number of samples per second; "
                                 f"a stream that pauses is a small positive rate, e.g. 0.5")
        times.append(t)
        rates.append(r)
    if not times:
        raise RateTraceError(f"{p}: no samples; write a header 't_s,samples_per_s' and one 'seconds,rate' pair per line")
    return RateTrace(tuple(times), tuple(rates))


class ArrivalProcess:
    """Cumulative arrivals ``A(t)`` (samples, real-valued) of a constant rate or a :class:`RateTrace`."""

    def __init__(self, rate: float | RateTrace):
        if isinstance(rate, RateTrace):
            self.trace = rate
        else:
            if isinstance(rate, bool) or not (float(rate) > 0 and math.isfinite(float(rate))):
                raise ValueError(f"stream rate must be a positive number of samples per second, got {rate!r}")
            self.trace = RateTrace((0.0,), (float(rate),))
        t = self.trace.times_s
        self._cum = [0.0]  # arrivals at each segment start
        for i in range(1, len(t)):
            self._cum.append(self._cum[-1] + self.trace.rates[i - 1] * (t[i] - t[i - 1]))

    @property
    def mean_rate(self) -> float:
        return self.trace.mean_rate

    def rate_at(self, t_s: float) -> float:
        i = max(bisect.bisect_right(self.trace.times_s, t_s) - 1, 0)
        return self.trace.rates[i]

    def arrived(self, t_s: float) -> float:
        """Samples arrived in ``[0, t_s]``."""
        if t_s <= 0:
            return 0.0
        i = bisect.bisect_right(self.trace.times_s, t_s) - 1
        return self._cum[i] + self.trace.rates[i] * (t_s - self.trace.times_s[i])

    def time_of(self, n: float) -> float:
        """The first time at which ``n`` samples have arrived."""
        if n <= 0:
            return 0.0
        i = bisect.bisect_right(self._cum, n) - 1
        return self.trace.times_s[i] + (n - self._cum[i]) / self.trace.rates[i]


@dataclass(frozen=True)
class TakeResult:
    """One take: how long it blocked, what the buffer held, what to skip and train on."""

    batch: int  # samples taken (trained on)
    wait_s: float  # wall seconds blocked on the arrival clock
    analytic_wait_s: float  # max(0, (b - q) / S) at the take's start (ScaDLES's formula, for cross-checks)
    buffer_before: int  # samples held when the take started (Q of the previous iteration)
    buffer_after: int  # samples held after the take
    skip: int  # samples the buffer dropped since the previous take (oldest first: skip them in the shard)
    dropped_total: int
    arrived_total: int


class StreamBuffer:
    """A worker's stream: arrivals counted on ``clock`` from ``origin_s - PREFILL_S``, a ``persistence``
    or ``truncate`` buffer, and a blocking :meth:`take`."""

    def __init__(self, process: ArrivalProcess, policy: str = "persistence", max_batch: int = 1,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        if policy not in BUFFERS:
            raise ValueError(f"buffer policy must be one of {', '.join(BUFFERS)}, got {policy!r}")
        self.process, self.policy, self.clock, self.sleep = process, policy, clock, sleep
        peak = max(process.trace.rates)
        self.capacity = max(math.ceil(peak * TRUNCATE_KEEP_S), int(max_batch)) if policy == "truncate" else None
        self.origin_s: float | None = None
        self.held = self.arrived_n = self.consumed = self.dropped = 0
        self._dropped_reported = 0

    def start(self, now_s: float | None = None) -> None:
        """Start the stream :data:`PREFILL_S` before ``now_s`` (default: the clock now)."""
        now = self.clock() if now_s is None else now_s
        self.origin_s = now - PREFILL_S
        self._advance(now)

    def _advance(self, now_s: float) -> None:
        n = int(math.floor(self.process.arrived(now_s - self.origin_s) + 1e-9))
        self.held += n - self.arrived_n
        self.arrived_n = n
        if self.capacity is not None and self.held > self.capacity:
            self.dropped += self.held - self.capacity
            self.held = self.capacity

    def take(self, b: int) -> TakeResult:
        """Block until ``b`` samples are held, then take the oldest ``b``."""
        if self.origin_s is None:
            self.start()
        b = int(b)
        if b < 1 or (self.capacity is not None and b > self.capacity):
            raise ValueError(f"batch {b} must lie in [1, {self.capacity or 'inf'}]")
        t0 = self.clock()
        self._advance(t0)
        before = self.held
        analytic = max(0.0, (b - before) / self.process.rate_at(t0 - self.origin_s))
        while self.held < b:
            # the arrival of sample number arrived_n + (b - held): the truncating buffer cannot drop below b meanwhile
            due = self.origin_s + self.process.time_of(self.arrived_n + (b - self.held))
            self.sleep(max(due - self.clock(), 0.0) + 1e-4)
            self._advance(self.clock())
        waited = self.clock() - t0
        self.held -= b
        self.consumed += b
        skip = self.dropped - self._dropped_reported
        self._dropped_reported = self.dropped
        return TakeResult(b, waited, analytic, before, self.held, skip, self.dropped, self.arrived_n)


def persistence_buffer_samples(iter_s: float, rate: float, batch: float, iterations: float) -> float:
    """Eq. 2: samples a persistence buffer holds after ``iterations`` of ``iter_s`` seconds (``t S >= b``)."""
    return (iter_s * rate - batch) * iterations + rate


def eq3_buffer_samples(iter_s: float, rate: float, iterations: float) -> float:
    """Eq. 3 (``t S >> b``): ``T t S + S`` samples."""
    return iterations * iter_s * rate + rate


def samples_gib(samples: float, sample_bytes: int = CIFAR_SAMPLE_BYTES) -> float:
    """Samples as GiB at ``sample_bytes`` each (the paper's Table II unit, 3 KiB per CIFAR image)."""
    return samples * sample_bytes / 2**30
