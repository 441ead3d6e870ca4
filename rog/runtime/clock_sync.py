"""Clock offsets between the worker hosts and the parameter server, estimated NTP-style over the run's connection.

Every host's event log counts ``t_s`` from its own origin (:mod:`rog.runtime.events`); its header's
``origin_unix_s`` places that origin on the host's wall clock.  On real devices the wall clocks differ,
so a worker's records are put on the PS's clock by the offset ``theta`` = PS clock - worker clock.

One exchange (the worker's event clock ``C_w``, the PS's ``C_ps``, both in Unix seconds
``origin_unix_s + t_s``): ``t0`` = C_w when the worker sends :class:`~rog.runtime.messages.ClockProbe`,
``t1`` = C_ps when the PS receives it, ``t2`` = C_ps when the PS sends the
:class:`~rog.runtime.messages.ClockEcho`, ``t3`` = C_w when the worker receives it.  Then

    offset_s = ((t1 - t0) + (t2 - t3)) / 2        delay_s = (t3 - t0) - (t2 - t1)

and, whatever the split of the round trip between the two directions, the true offset lies within
``offset_s +- delay_s / 2``.  The worker runs :data:`DEFAULT_EXCHANGES` exchanges right after its join
and again before its flush, and reports the four times of each (:class:`~rog.runtime.messages.ClockReport`);
the PS keeps, per worker and phase, the exchange with the smallest delay (:func:`best_sample`) and
writes them all to ``clock_offsets.json`` (:func:`write_clock_offsets`).  The analysis aligns the
event logs by them (:mod:`rog.analysis.clock_align`).

Tests and emulation: ``ROG_CLOCK_SKEW_S`` (seconds, may be negative) shifts the wall clock of this
process's event log (the header's ``origin_unix_s`` and every clock reading here), as a host whose
clock is off by that much; it is never set by the toolkit itself.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .messages import CLOCK_PHASES, ClockEcho, ClockProbe, ClockReport

CLOCK_SKEW_ENV = "ROG_CLOCK_SKEW_S"
DEFAULT_EXCHANGES = 8
CLOCK_MESSAGES = (ClockProbe, ClockReport)  # what the PS's connection loop hands to ClockOffsets.handle


def clock_skew_s() -> float:
    """The injected skew of this process's event clock (``ROG_CLOCK_SKEW_S``; 0 when unset)."""
    raw = os.environ.get(CLOCK_SKEW_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise ValueError(f"{CLOCK_SKEW_ENV}={raw!r} is not a finite number of seconds; unset it or give e.g. 2.5")
    return v


def event_clock(events=None) -> Callable[[], float]:
    """The Unix-seconds clock of an event log (``origin_unix_s + now_s()``; with no log: the skewed wall clock)."""
    if events is not None:
        origin_unix = events.origin_unix_s
        return lambda: origin_unix + events.now_s()
    skew = clock_skew_s()
    return lambda: time.time() + skew


@dataclass(frozen=True)
class ClockSample:
    """One exchange's four times (seconds): t0 worker send, t1 PS receive, t2 PS send, t3 worker receive."""

    t0_s: float
    t1_s: float
    t2_s: float
    t3_s: float

    @property
    def offset_s(self) -> float:
        """PS clock minus worker clock."""
        return ((self.t1_s - self.t0_s) + (self.t2_s - self.t3_s)) / 2.0

    @property
    def delay_s(self) -> float:
        """The round trip without the PS's own time between receipt and reply."""
        return (self.t3_s - self.t0_s) - (self.t2_s - self.t1_s)


def best_sample(samples) -> ClockSample:
    """The exchange with the smallest delay (the tightest bound on the offset)."""
    samples = [s if isinstance(s, ClockSample) else ClockSample(*map(float, s)) for s in samples]
    if not samples:
        raise ValueError("no clock samples to estimate an offset from")
    return min(samples, key=lambda s: s.delay_s)


def measure_offset(conn, clock: Callable[[], float], phase: str, n: int = DEFAULT_EXCHANGES,
                   timeout_s: float = 30.0) -> ClockSample:
    """Worker side: ``n`` probe/echo exchanges on ``conn``, then their report to the PS; returns the best one."""
    if phase not in CLOCK_PHASES:
        raise ValueError(f"phase must be one of {CLOCK_PHASES}, got {phase!r}")
    samples = []
    for seq in range(1, n + 1):
        conn.send(ClockProbe(seq, clock()))
        echo = conn.recv(timeout_s)
        t3 = clock()
        if not isinstance(echo, ClockEcho) or echo.seq != seq:
            raise RuntimeError(f"clock exchange {seq}: expected ClockEcho({seq}), got {echo!r}"[:300])
        samples.append(ClockSample(echo.t0_s, echo.t1_s, echo.t2_s, t3))
    conn.send(ClockReport(CLOCK_PHASES.index(phase), tuple((s.t0_s, s.t1_s, s.t2_s, s.t3_s) for s in samples)))
    return best_sample(samples)


class ClockOffsets:
    """PS side: answers probes on its event clock and keeps each worker's estimate per phase."""

    def __init__(self, events=None) -> None:
        self.clock = event_clock(events)
        self._lock = threading.Lock()
        self.estimates: dict[int, dict[str, dict]] = {}

    def handle(self, conn, worker: int, msg) -> None:
        """A probe or a report from ``worker`` (the PS's connection loop hands both here)."""
        if isinstance(msg, ClockProbe):
            self.answer(conn, msg)
        else:
            self.record(worker, msg)

    def answer(self, conn, probe: ClockProbe) -> None:
        """Echo one probe with its receipt and send times."""
        t1 = self.clock()
        conn.send(ClockEcho(probe.seq, probe.t0_s, t1, self.clock()))

    def record(self, worker: int, report: ClockReport) -> dict:
        """Keep the best exchange of a worker's report (the PS's own t1/t2 came back in it)."""
        best = best_sample(report.samples)
        est = {"offset_s": best.offset_s, "delay_s": best.delay_s, "exchanges": len(report.samples),
               "at_unix_s": best.t2_s}
        with self._lock:
            self.estimates.setdefault(int(worker), {})[CLOCK_PHASES[report.phase]] = est
        return est

    def document(self, origin_unix_s: float | None = None) -> dict:
        """The ``clock_offsets.json`` document: per worker rank, each phase's estimate."""
        with self._lock:
            workers = {f"w{k}": dict(v) for k, v in sorted(self.estimates.items())}
        return {"reference": "ps", "ps_origin_unix_s": origin_unix_s,
                "definition": "offset_s = PS clock - worker clock = ((t1-t0)+(t2-t3))/2 of the exchange with the "
                              "smallest delay_s = (t3-t0)-(t2-t1); the true offset lies within offset_s +- delay_s/2",
                "workers": workers}


def write_clock_offsets(path: str | os.PathLike, offsets: ClockOffsets, origin_unix_s: float | None = None) -> None:
    """Write ``clock_offsets.json`` (nothing when no worker reported)."""
    doc = offsets.document(origin_unix_s)
    if doc["workers"]:
        tmp = Path(path).with_name(Path(path).name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.replace(path)


def read_offsets_file(path: str | os.PathLike) -> dict | None:
    """A ``clock_offsets.json`` document, or None when the file is not there."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a clock-offsets JSON document ({e}); delete it or rerun the run") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("workers"), dict):
        raise ValueError(f"{path}: expected a mapping with 'workers' (rank -> estimates per phase)")
    return doc


def worker_offset_s(entry: dict) -> tuple[float, float] | None:
    """``(offset_s, delay_s)`` of one worker's entry: the join and end estimates averaged (drift over the run
    is in the two); ``None`` when neither is there."""
    got = [entry[p] for p in CLOCK_PHASES if isinstance(entry.get(p), dict)]
    if not got:
        return None
    return (sum(float(e["offset_s"]) for e in got) / len(got), max(float(e["delay_s"]) for e in got))


def sync_worker_clock(worker, phase: str) -> None:
    """A :class:`~rog.runtime.worker.Worker`'s exchange (``clock_sync=True``): at join, any failure is the join's;
    at the end, a broken link skips it (the flush recovers the link; the join's estimate stands)."""
    from ..transport import TransportError

    clock = event_clock(worker.events)
    try:
        worker.clock_estimates[phase] = measure_offset(worker.conn, clock, phase, timeout_s=worker.wait_timeout_s)
    except (TransportError, OSError):
        if phase == "join":
            raise
