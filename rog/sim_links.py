"""Transmissions over modelled links on the simulator's clock: one link alone, or many through one shared access point.

:func:`deliver_chunks` is a transmission over a link of its own (:mod:`rog.links`): chunk ``k`` is
through when the cumulative bytes of chunks ``0..k`` are, and the deadline rule of :mod:`rog.sim`
decides which chunks are delivered.

:class:`SharedAccessPoint` adds one capacity every transfer also passes through: the access point,
the parameter server's radio.  Uplinks and downlinks alike share it; at every moment the active
transfers get a max-min fair share of it (water-filling: a transfer whose own link is slower than
the equal share keeps its own rate, the rest is split equally among the others), each still bounded
by its own link's rate.  The model is fluid and exact: rates are recomputed whenever a transfer
starts or ends, a deadline passes, or any active link's or the capacity's rate changes, and between
those moments every transfer moves at a constant rate, so chunk completion times are computed in
closed form.  The deadline rule is the same as :func:`deliver_chunks`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import simpy

from .links import BYTES_PER_MBIT, InfiniteLink, Link, RateTrace


class SimulationError(RuntimeError):
    """The simulated system cannot go on (a link never carries a mandatory chunk, a policy misbehaves)."""


@dataclass(frozen=True)
class Delivery:
    """The outcome of one chunked transmission over a modelled link."""

    n_delivered: int  # chunks delivered: always a prefix of the chunk list
    start_s: float
    end_s: float  # everything through, or max(deadline, end of the mandatory chunks)
    mandatory_end_s: float | None  # when the last mandatory chunk was through (None: none mandatory)
    bytes_delivered: int


def deliver_chunks(
    link: Link, start_s: float, frame_sizes: np.ndarray, mandatory_chunks: int, deadline_s: float | None
) -> Delivery:
    """Which chunks a transmission starting at ``start_s`` delivers, and when it ends.

    Chunk ``k`` is through when the cumulative bytes of chunks ``0..k`` are through ``link``.
    It is delivered if it is mandatory or through by ``start_s + deadline_s`` (``None``: no
    deadline, all are delivered); a chunk still in flight at the deadline is dropped, and so is
    everything after it.  Raises :class:`SimulationError` if the link never carries a chunk
    that must be delivered.
    """
    sizes = np.asarray(frame_sizes, dtype=np.int64).reshape(-1)
    if not 0 <= mandatory_chunks <= sizes.size:
        raise ValueError(f"mandatory_chunks={mandatory_chunks} outside [0, {sizes.size}]")
    if deadline_s is not None and not deadline_s >= 0:
        raise ValueError(f"deadline_s must be >= 0 or None, got {deadline_s}")
    if sizes.size == 0:
        return Delivery(0, start_s, start_s, None, 0)
    ends = np.atleast_1d(np.asarray(link.transfer_end_s(start_s, np.cumsum(sizes)), dtype=np.float64))
    m = int(mandatory_chunks)
    mandatory_end = float(ends[m - 1]) if m else None
    if mandatory_end is not None and not math.isfinite(mandatory_end):
        raise SimulationError(f"the link never carries the mandatory chunks (its rate stays 0 after t={start_s:.6g} s)")
    if deadline_s is None:
        k = sizes.size
        if not math.isfinite(ends[-1]):
            raise SimulationError(
                f"the link never carries the whole transmission (rate stays 0 after t={start_s:.6g} s)"
            )
    else:
        k = max(m, int(np.searchsorted(ends, start_s + deadline_s, side="right")))
    if k == sizes.size:
        end = float(ends[-1])
    else:
        end = max(start_s + deadline_s, mandatory_end if mandatory_end is not None else start_s)
    return Delivery(k, float(start_s), end, mandatory_end, int(sizes[:k].sum()))


def next_change_s(link, t_s: float) -> float:
    """The first time after ``t_s`` at which ``link``'s rate may change (``inf``: never)."""
    if not isinstance(link, RateTrace):
        return math.inf
    tt = link._fold(t_s) if link.loop else t_s
    j = int(np.searchsorted(link.times_s, tt + 1e-12, side="right"))
    if j < link.times_s.size:
        return t_s + float(link.times_s[j] - tt)
    return t_s + float(link.period_s - tt) if link.loop else math.inf


def max_min_shares(own_bps: np.ndarray, capacity_bps: float) -> np.ndarray:
    """Max-min fair rates (bytes/s) of transfers bounded by ``own_bps`` sharing ``capacity_bps``."""
    own = np.asarray(own_bps, dtype=np.float64)
    out = np.empty_like(own)
    left, n_left = float(capacity_bps), own.size
    for i in np.argsort(own, kind="stable"):
        share = left / n_left if n_left else 0.0
        out[i] = min(own[i], share)
        if math.isfinite(left):
            left = max(0.0, left - out[i])
        n_left -= 1
    return out


@dataclass(eq=False)
class _Flow:
    """One transmission in progress through the access point."""

    link: Link
    sizes: np.ndarray  # frame bytes per chunk
    cum: np.ndarray  # cumulative bytes
    mandatory: int
    start_s: float
    deadline_at_s: float | None  # absolute; None = no deadline
    done: simpy.Event
    sent: float = 0.0  # bytes through so far
    ends: list = field(default_factory=list)  # completion time of each chunk through so far
    past_deadline: bool = False  # only the mandatory chunks are still sent
    delivery: Delivery | None = None

    @property
    def target(self) -> float:
        """Bytes this transfer still wants through in total."""
        return float(self.cum[self.mandatory - 1]) if self.past_deadline else float(self.cum[-1])


class SharedAccessPoint:
    """One capacity (Mbit/s: a constant or a :class:`RateTrace`) that every transfer also passes through.

    Give a fresh one to each simulation (:class:`rog.sim.SimConfig` ``shared_ap``).  After the run,
    ``bytes_carried`` is every byte it carried, ``busy_s`` the time at least one transfer was active and
    ``capacity_bytes`` what it could have carried over the whole run (for utilisation).
    """

    def __init__(self, capacity: float | Link) -> None:
        if isinstance(capacity, (int, float)):
            if not (capacity > 0 and math.isfinite(capacity)):
                raise ValueError(f"the access point's capacity must be a finite rate > 0 Mbit/s, got {capacity!r}")
            capacity = RateTrace.constant(float(capacity))
        if not isinstance(capacity, RateTrace):
            raise ValueError(f"capacity must be Mbit/s or a rog.links.RateTrace, got {type(capacity).__name__}")
        self.capacity = capacity
        self.bytes_carried = 0.0
        self.busy_s = 0.0
        self._env: simpy.Environment | None = None
        self._flows: list[_Flow] = []
        self._wake: simpy.Event | None = None

    def attach(self, env: simpy.Environment) -> None:
        """Start serving on ``env`` (once)."""
        if self._env is not None:
            raise SimulationError("this SharedAccessPoint already serves a simulation; give each run a fresh one")
        self._env = env
        env.process(self._serve())

    def capacity_bytes(self, t0_s: float, t1_s: float) -> float:
        """Bytes the capacity could carry between ``t0_s`` and ``t1_s``."""
        return self.capacity.bytes_by(t0_s, t1_s)

    def transmit(self, link: Link, frame_sizes: np.ndarray, mandatory_chunks: int, deadline_s: float | None):
        """A transmission from now through ``link`` and the access point (a simpy process body:
        ``delivery = yield from ap.transmit(...)``); the same deadline rule as :func:`deliver_chunks`."""
        env = self._env
        sizes = np.asarray(frame_sizes, dtype=np.int64).reshape(-1)
        if not 0 <= mandatory_chunks <= sizes.size:
            raise ValueError(f"mandatory_chunks={mandatory_chunks} outside [0, {sizes.size}]")
        now = float(env.now)
        if sizes.size == 0:
            return Delivery(0, now, now, None, 0)
        flow = _Flow(link, sizes, np.cumsum(sizes).astype(np.float64), int(mandatory_chunks), now,
                     None if deadline_s is None else now + float(deadline_s), env.event())
        self._flows.append(flow)
        self._poke()
        yield flow.done
        return flow.delivery

    # ------------------------------------------------------------------ the fluid model
    def _poke(self) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _serve(self):
        env = self._env
        while True:
            self._settle(float(env.now))
            if not self._flows:
                self._wake = env.event()
                yield self._wake
                continue
            t = float(env.now)
            rates = self._rates(t)
            dt = self._next_dt(t, rates)
            if not math.isfinite(dt):
                raise SimulationError(f"transfers through the access point can never finish (every rate stays 0 "
                                      f"after t={t:.6g} s)")
            self._wake = env.event()
            yield env.timeout(dt) | self._wake
            self._advance(t, float(env.now), rates)

    def _rates(self, t: float) -> np.ndarray:
        own = np.array([f.link.rate_mbit_at(t) for f in self._flows], dtype=np.float64) * BYTES_PER_MBIT
        return max_min_shares(own, self.capacity.rate_mbit_at(t) * BYTES_PER_MBIT)

    def _next_dt(self, t: float, rates: np.ndarray) -> float:
        dt = next_change_s(self.capacity, t) - t
        for f, r in zip(self._flows, rates):
            left = f.target - f.sent
            if r > 0:
                dt = min(dt, left / r if math.isfinite(r) else 0.0)
            if f.deadline_at_s is not None and not f.past_deadline:
                dt = min(dt, max(0.0, f.deadline_at_s - t))
            if not isinstance(f.link, InfiniteLink):
                dt = min(dt, next_change_s(f.link, t) - t)
        return max(dt, 0.0)

    def _advance(self, t0: float, t1: float, rates: np.ndarray) -> None:
        """Move every flow active since ``t0`` on at its rate to ``t1``, timing the chunks it completes."""
        dt = t1 - t0
        if self._flows:
            self.busy_s += dt
        for f, r in zip(list(self._flows), rates):
            target = f.target
            moved = target - f.sent if not math.isfinite(r) else min(r * dt, target - f.sent)
            if moved <= 0:
                continue
            new = f.sent + moved
            if target - new <= 1e-6 * max(1.0, target):
                new = target
            k0 = len(f.ends)
            k1 = int(np.searchsorted(f.cum, new + 1e-9 * max(1.0, target), side="right"))
            for k in range(k0, k1):
                f.ends.append(t0 if not math.isfinite(r) else min(t1, t0 + (f.cum[k] - f.sent) / r))
            self.bytes_carried += new - f.sent
            f.sent = new

    def _settle(self, now: float) -> None:
        """Finish the flows whose transmission is over at ``now`` (everything through, or the deadline rule)."""
        still = []
        for f in self._flows:
            n, m = len(f.ends), f.mandatory
            k = None
            if n == f.cum.size:
                k = n
            elif f.past_deadline and n >= m:
                k = m
            elif not f.past_deadline and f.deadline_at_s is not None and now >= f.deadline_at_s - 1e-12:
                through = int(np.searchsorted(np.asarray(f.ends), f.deadline_at_s, side="right"))
                if through >= m:
                    k = through
                else:
                    f.past_deadline = True
            if k is None:
                still.append(f)
                continue
            mandatory_end = float(f.ends[m - 1]) if m else None
            if k == f.cum.size:
                end = float(f.ends[-1])
            else:
                end = max(f.deadline_at_s, mandatory_end if mandatory_end is not None else f.start_s)
            f.delivery = Delivery(k, f.start_s, end, mandatory_end, int(f.sizes[:k].sum()))
            f.done.succeed()
        self._flows = still
