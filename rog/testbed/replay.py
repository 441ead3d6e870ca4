"""The trace replay loop: apply a bandwidth trace's rate changes to shapers on an absolute schedule.

A trace (:mod:`rog.traces`, zero-order hold) becomes a schedule of ``(t_s, rate_mbit)`` changes in
wall seconds after the replay starts (:func:`build_schedule`: replay mode, start offset, rate
scale, time scale, loop, duration, in that order).  :class:`Replayer` sleeps on the monotonic
clock until each change is due and changes every shaper in place (``tc qdisc change`` /
``tc class change``).  Deadlines are absolute (no drift); if a change is late enough that the
next one is already due, the stale one is skipped, never applied out of order.

Every applied change is logged as CSV ``t_s,wall_time,rate_mbit``: ``t_s`` = ``time.monotonic()``
minus the origin (the replay's start, or ``origin_monotonic_s`` to share a run's event clock,
see :mod:`rog.runtime.events`), taken right after the ``tc`` command returned; ``wall_time`` = Unix
time of the same moment, ``rate_mbit`` = the rate requested (before the ``MIN_RATE_MBIT`` floor,
so a 0 in the trace is logged as 0).  The micro-event figure reads this file.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from rog.testbed.tc import Argv, Shaper, run_argv

LOG_HEADER = "t_s,wall_time,rate_mbit"
REPLAY_MODES = ("recorded", "artifact")


@dataclass(frozen=True)
class ReplayOptions:
    """How to turn a trace into a schedule.

    ``time_scale``: wall seconds per trace second (0.5 plays a 120 s trace in 60 s; the rates
    are unchanged).  ``rate_scale``: multiplies every rate.  ``start_offset_s``: trace second
    that the replay starts at.  ``loop``: repeat the trace until ``duration_s`` (forever when
    no duration is given).  ``duration_s``: wall seconds to replay at most (default: the
    trace's own length; without ``loop`` the replay never runs past the trace's end).
    ``replay_mode``: ``recorded`` (as recorded) or ``artifact`` (the original artifact's
    hold-the-last-rate behaviour, see :func:`rog.traces.apply_replay_mode`), with ``seed``.
    """

    time_scale: float = 1.0
    rate_scale: float = 1.0
    start_offset_s: float = 0.0
    loop: bool = False
    duration_s: float | None = None
    replay_mode: str = "recorded"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("time_scale", "rate_scale"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        if not (self.start_offset_s >= 0 and math.isfinite(self.start_offset_s)):
            raise ValueError(f"start_offset_s must be >= 0, got {self.start_offset_s!r}")
        if self.duration_s is not None and not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise ValueError(f"duration_s must be > 0 (wall seconds), got {self.duration_s!r}")
        if self.replay_mode not in REPLAY_MODES:
            raise ValueError(f"replay_mode must be one of {REPLAY_MODES}, got {self.replay_mode!r}")


@dataclass(frozen=True)
class Schedule:
    """Rate changes ``(t_s, rate_mbit)`` in wall seconds from the start, and when the replay ends.

    With ``period_s`` set, the changes repeat every ``period_s`` seconds (a looped trace) until
    ``end_s``, which may then be ``math.inf`` (replay until stopped).
    """

    changes: tuple[tuple[float, float], ...]
    end_s: float
    period_s: float | None = None

    def __post_init__(self) -> None:
        if not self.changes:
            raise ValueError("a schedule needs at least one change")
        if not self.end_s > 0:
            raise ValueError(f"end_s must be > 0, got {self.end_s!r}")
        if math.isinf(self.end_s) and self.period_s is None:
            raise ValueError("an endless schedule (end_s=inf) must loop (period_s)")
        if self.period_s is not None and not (self.period_s > self.changes[-1][0]):
            raise ValueError(f"period_s must exceed the last change time, got {self.period_s!r}")

    def iter_changes(self) -> Iterator[tuple[float, float]]:
        """Every change before ``end_s``, across repetitions; a repeated rate is not repeated."""
        last = None
        for k in itertools.count():
            base = 0.0 if self.period_s is None else k * self.period_s
            for t, r in self.changes:
                if base + t >= self.end_s:
                    return
                if r != last:
                    yield base + t, r
                    last = r
            if self.period_s is None:
                return

    def rate_at(self, t_s: float) -> float:
        """Requested rate at wall second ``t_s`` (zero-order hold)."""
        if self.period_s is not None:
            t_s = math.fmod(t_s, self.period_s)
        rate = self.changes[0][1]
        for t, r in self.changes:
            if t > t_s:
                break
            rate = r
        return rate


def schedule_from_arrays(times_s: Sequence[float], rates_mbit: Sequence[float], end_s: float,
                         period_s: float | None = None) -> Schedule:
    """Schedule from hold-semantics samples: drop samples at or after ``end_s`` (or after one
    ``period_s``) and repeats of the same rate."""
    changes: list[tuple[float, float]] = []
    cut = end_s if period_s is None else period_s
    for t, r in zip(times_s, rates_mbit):
        t, r = float(t), float(r)
        if t >= cut:
            break
        if changes and r == changes[-1][1]:
            continue
        changes.append((max(t, 0.0), r))
    if not changes:
        raise ValueError(f"the trace has no sample before end_s={end_s}")
    return Schedule(tuple(changes), float(end_s), period_s)


def build_schedule(trace, opts: ReplayOptions) -> Schedule:
    """Apply ``opts`` to a :class:`rog.traces.Trace` and return the wall-clock schedule.

    Order: start offset (trace seconds), rate scale, replay mode with time scale
    (:func:`rog.traces.apply_replay_mode`: the artifact's holds scale with time), then the end:
    ``duration_s`` or the trace's length; with ``loop`` the trace repeats until ``duration_s``
    (or until stopped when no duration is given).
    """
    from rog import traces as T

    tr = trace.offset(opts.start_offset_s) if opts.start_offset_s else trace
    if opts.rate_scale != 1.0:
        tr = tr.rate_scaled(opts.rate_scale)
    tr = T.apply_replay_mode(tr, opts.replay_mode, opts.seed, opts.time_scale)
    length = float(tr.duration_s)
    if opts.loop:
        end_s = opts.duration_s if opts.duration_s is not None else math.inf
        return schedule_from_arrays(tr.times_s, tr.rate_mbit, end_s, period_s=length)
    end_s = length if opts.duration_s is None else min(opts.duration_s, length)
    return schedule_from_arrays(tr.times_s, tr.rate_mbit, end_s)


class ReplayLog:
    """Append-only CSV log of applied changes (flushed per line so a killed replay keeps its log)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._f = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w", encoding="utf-8")
            self._f.write(LOG_HEADER + "\n")
            self._f.flush()

    def write(self, t_s: float, wall_time: float, rate_mbit: float) -> None:
        """One applied change."""
        if self._f is not None:
            self._f.write(f"{t_s:.6f},{wall_time:.6f},{rate_mbit:.6f}\n")
            self._f.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._f is not None:
            self._f.close()
            self._f = None


@dataclass
class ReplayStats:
    """What a replay did: changes applied and skipped (late), worst lateness, and the monotonic start."""

    applied: int = 0
    skipped: int = 0
    max_late_s: float = 0.0
    start_monotonic: float = 0.0
    stopped_early: bool = False


class Replayer:
    """Drive ``shapers`` through ``schedule``; ``installed=False`` installs them with the first rate.

    ``runner`` runs one argv (default :func:`rog.testbed.tc.run_argv`; tests pass a recorder).
    ``origin_monotonic_s``: the log's ``t_s`` origin (default: when :meth:`run` starts).
    """

    def __init__(self, shapers: Sequence[Shaper], schedule: Schedule, log_path: str | Path | None = None,
                 installed: bool = False, runner: Callable[[Argv], object] = run_argv,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 origin_monotonic_s: float | None = None) -> None:
        if not shapers:
            raise ValueError("shapers must name at least one shaper")
        self.shapers = list(shapers)
        self.schedule = schedule
        self.log_path = log_path
        self.installed = installed
        self.runner = runner
        self.clock = clock
        self.wall = wall
        self.origin_monotonic_s = origin_monotonic_s
        self.stats = ReplayStats()
        self.first_applied = threading.Event()  # set once the first rate is in place (or the replay ended)

    def apply(self, rate_mbit: float) -> None:
        """Set every shaper to ``rate_mbit`` now (install on first use when not installed)."""
        for s in self.shapers:
            argvs = s.change_argvs(rate_mbit) if self.installed else s.setup_argvs(rate_mbit)
            for argv in argvs:
                self.runner(argv)
        self.installed = True

    def run(self, stop: threading.Event | None = None) -> ReplayStats:
        """Replay until the schedule ends or ``stop`` is set; returns :class:`ReplayStats`."""
        stop = stop or threading.Event()
        log = ReplayLog(self.log_path)
        t0 = self.clock()
        origin = t0 if self.origin_monotonic_s is None else self.origin_monotonic_s
        self.stats = st = ReplayStats(start_monotonic=t0)
        it = self.schedule.iter_changes()
        nxt = next(it, None)
        try:
            while nxt is not None:
                t_s, rate = nxt
                nxt = next(it, None)
                wait_s = t0 + t_s - self.clock()
                if (wait_s > 0 and stop.wait(wait_s)) or stop.is_set():
                    st.stopped_early = True
                    return st
                now = self.clock() - t0
                if nxt is not None and nxt[0] <= now and self.installed:
                    st.skipped += 1  # the next change is already due: never apply a stale rate
                    continue
                st.max_late_s = max(st.max_late_s, now - t_s)
                self.apply(rate)
                done = self.clock()
                log.write(done - origin, self.wall(), rate)
                st.applied += 1
                self.first_applied.set()
            wait_s = t0 + self.schedule.end_s - self.clock()
            if wait_s > 0 and stop.wait(wait_s):
                st.stopped_early = True
            return st
        finally:
            log.close()
            self.first_applied.set()  # nobody waits for a rate that will never come


class ReplayHandle:
    """A replay running in a background thread: ``stop()`` ends it, ``error`` holds what it raised."""

    def __init__(self, replayer: Replayer, name: str = "rog-replay") -> None:
        self.replayer = replayer
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            self.replayer.run(self.stop_event)
        except BaseException as e:  # kept for the owner to inspect; the thread must not die silently
            self.error = e

    def start(self) -> "ReplayHandle":
        """Start the thread; returns self."""
        self.thread.start()
        return self

    def wait_first(self, timeout_s: float = 10.0) -> bool:
        """Wait until the first rate is applied (or the replay ended); False if ``timeout_s`` passed first."""
        return self.replayer.first_applied.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the replay to stop and wait for the thread (the last applied rate stays)."""
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(timeout_s)

    @property
    def running(self) -> bool:
        """True while the thread is alive."""
        return self.thread.is_alive()

    @property
    def log_path(self) -> Path | None:
        """The CSV log of this replay."""
        return Path(self.replayer.log_path) if self.replayer.log_path else None
