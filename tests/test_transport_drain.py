"""Deadline-aware writes: the drain meter, and speculative pieces that must arrive by their deadline.

The link is a fluid model on a virtual clock: a FIFO drained at a constant rate behind the sender's
kernel queue (what ``tc`` does to a socket), so the arrival time of every written byte is known
exactly and independently of the meter.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rog.transport import TransportConfig, VirtualClock, inproc_pair
from rog.transport import messages as m
from rog.transport.drain import DrainMeter

from test_transport_stream import Receiver, keep_bytes, make_frames


# ---------------------------------------------------------------- the meter alone
def test_constant_rate_is_measured_exactly():
    meter = DrainMeter()
    rate = 2500.0  # bytes/s
    written = 10_000
    for k in range(10):  # 250 bytes sent every 0.1 s
        meter.observe(k / 10, written, written - 250 * k)
    assert meter.rate_Bps == pytest.approx(rate)
    assert meter.finish_s(queued=500, n=2000) == pytest.approx(1.0)


def test_intervals_that_may_be_idle_are_not_used():
    meter = DrainMeter(min_busy_s=0.0)
    meter.observe(0.0, 1000, 1000)
    meter.observe(1.0, 1000, 0)  # ran empty somewhere in [0, 1]: the rate is unknown, not 1000 B/s
    assert meter.rate_Bps is None
    meter.observe(5.0, 3000, 2000)  # 2000 bytes written in between: [1, 5] may hold idle time
    assert meter.rate_Bps is None
    meter.observe(5.5, 3000, 1500)  # nothing written since and still waiting: busy, 500 bytes in 0.5 s
    assert meter.rate_Bps == pytest.approx(1000.0)


def test_forgetting_weights_busy_time_by_half_life():
    meter = DrainMeter(half_life_s=1.0, min_busy_s=0.0)
    meter.observe(0.0, 10_000, 10_000)
    meter.observe(1.0, 10_000, 8_000)  # 2000 B/s for 1 s
    meter.observe(2.0, 10_000, 7_000)  # 1000 B/s for 1 s; the first interval now weighs 1/2
    # by hand: bytes = 2000 * 0.5 + 1000 = 2000, busy = 1 * 0.5 + 1 = 1.5
    assert meter.rate_Bps == pytest.approx(2000 / 1.5)


def test_an_estimate_expires_and_idle_time_fades_it():
    meter = DrainMeter(half_life_s=1.0, min_busy_s=0.0, max_age_s=2.0)
    meter.observe(0.0, 10_000, 10_000)
    meter.observe(1.0, 10_000, 10_000)  # a stall: nothing sent for 1 s, the rate is 0
    assert meter.finish_s(100, 100, now=2.5) == float("inf")
    assert meter.finish_s(100, 100, now=3.5) is None  # 2.5 s since the last busy interval: expired
    meter.observe(5.0, 12_000, 2_000)  # a write in between: not an interval
    meter.observe(6.0, 12_000, 1_000)  # 1000 B/s over [5, 6]; the stall ended 5 s before: weight 0.5 ** 5
    assert meter.rate_Bps == pytest.approx(1000 / (1 * 0.5 ** 5 + 1))


def test_no_estimate_before_min_busy_time_and_bad_samples_are_refused():
    meter = DrainMeter(min_busy_s=0.1)
    meter.observe(0.0, 100, 100)
    meter.observe(0.05, 100, 50)
    assert meter.rate_Bps is None and meter.finish_s(10, 10) is None
    with pytest.raises(ValueError, match="unsent"):
        meter.observe(1.0, 100, 101)
    with pytest.raises(ValueError, match="half_life_s"):
        DrainMeter(half_life_s=0)


# ---------------------------------------------------------------- over a modelled link
class LinkPipe:
    """Wraps an in-process pipe: writes enter a FIFO drained at ``rate_Bps`` on a virtual clock.

    ``wait_writable`` holds (advancing the clock) until at most ``lowat_bytes`` are queued, as
    TCP_NOTSENT_LOWAT does; ``send_queue`` reports the fluid backlog as both unsent and
    unacknowledged (a link with no bytes in flight).  Each
    write's arrival time (its last byte through the link) is logged with the backlog it met.
    """

    def __init__(self, inner, clock: VirtualClock, rate_Bps: float, lowat_bytes: int):
        self.inner, self.clock, self.rate, self.lowat = inner, clock, rate_Bps, lowat_bytes
        self.busy_until = 0.0  # when the link finishes what is queued now
        self.log: list[tuple[float, int, float, float]] = []  # (write time, bytes, backlog before, arrival)
        self.lock = threading.Lock()

    def _backlog(self, now: float) -> float:
        return max(0.0, self.busy_until - now) * self.rate

    def send_queue(self):
        backlog = int(round(self._backlog(self.clock.now())))
        return backlog, backlog

    def wait_writable(self, until):
        now = self.clock.now()
        excess = self._backlog(now) - self.lowat
        if excess <= 0:
            return True
        wait = excess / self.rate
        if until is not None and now + wait > until:
            self.clock.sleep(max(0.0, until - now))
            return False
        self.clock.sleep(wait)
        return True

    def write(self, data):
        now = self.clock.now()
        backlog = self._backlog(now)
        self.busy_until = max(now, self.busy_until) + len(data) / self.rate
        self.log.append((now, len(data), backlog, self.busy_until))
        self.inner.write(data)

    def read_some(self, timeout_s):
        return self.inner.read_some(timeout_s)

    def close(self):
        self.inner.close()

    def abort(self):
        self.inner.abort()


def _run_deadlines(drain_aware: bool, n_deadlines: int = 60):
    """Random deadlines over a 20 kB/s link; per speculative piece: (deadline, arrival, backlog it met)."""
    rate_Bps, piece, lowat = 20_000.0, 600, 3000
    clock = VirtualClock()
    cfg = TransportConfig(piece_bytes=piece, drain_aware=drain_aware)
    worker, ps = inproc_pair(1, worker_config=cfg, clock=clock)
    link = LinkPipe(worker.pipe, clock, rate_Bps, lowat)
    worker.pipe = link
    worker._send_queue = link.send_queue if drain_aware else None
    rx = Receiver(ps, keep_bytes)
    rng = np.random.default_rng(7)
    speculative = []
    try:
        for it in range(1, n_deadlines + 1):
            clock.sleep(5.0)  # the link empties between transmissions
            probe, plan = make_frames(it, chunk_bytes=1500, seed=3)
            n = len(plan.chunks)
            frames_bytes = sum(len(probe(i)) for i in range(n))
            lazy_it, _ = make_frames(it, chunk_bytes=1500, seed=3)
            deadline = float(rng.uniform(0.2, 1.0)) * frames_bytes / rate_Bps
            mandatory = 1
            start = len(link.log)
            t0 = clock.now()
            res = worker.send_transmission(lazy_it, n_frames=n, iteration=it, mandatory=mandatory, deadline_s=deadline)
            got = rx.results.get(timeout=10)
            assert res.delivered == got.delivered >= mandatory
            writes = link.log[start:]
            # Begin, then pieces: frame 0's pieces are mandatory, the rest speculative, End last
            frame0_pieces = -(-len(got.frames[0]) // piece)
            for (t_w, nbytes, backlog, arrival) in writes[1 + frame0_pieces : -1]:
                speculative.append((t0 + deadline, arrival, backlog))
    finally:
        rx.stop(worker)
    return speculative, worker


def test_speculative_pieces_on_a_backlogged_link_arrive_by_the_deadline():
    spec, worker = _run_deadlines(drain_aware=True)
    backlogged = [(d, a) for d, a, b in spec if b > 0]
    assert len(backlogged) > 50, "the link should have been backlogged for most speculative pieces"
    late = [a - d for d, a in backlogged if a > d + 1e-9]
    assert late == [], f"{len(late)} speculative pieces arrived after their deadline (by up to {max(late):.3f} s)"
    assert worker.drain_refusals > 0  # the check is what cut them
    # a piece written onto an idle link may overshoot, but by at most its own transfer time
    for d, a, b in spec:
        if b == 0:
            assert a - d <= (600 + m.PIECE_OVERHEAD) / 20_000.0 + 1e-9


def test_without_the_drain_check_the_same_deadlines_are_overshot():
    """The control: the kernel queue (lowat 3000 bytes at 20 kB/s: 0.15 s) makes pieces arrive late."""
    spec, worker = _run_deadlines(drain_aware=False)
    late = [a - d for d, a, b in spec if b > 0 and a > d + 1e-9]
    assert len(late) >= 20
    assert max(late) > 0.1  # most of the queue's drain time
    assert worker.drain_refusals == 0


def _first_transmission(drain_aware: bool):
    """A fresh connection (no rate history) whose mandatory frame alone needs longer than the deadline."""
    rate_Bps, piece, lowat = 20_000.0, 600, 3000
    clock = VirtualClock()
    worker, ps = inproc_pair(1, worker_config=TransportConfig(piece_bytes=piece, drain_aware=drain_aware), clock=clock)
    link = LinkPipe(worker.pipe, clock, rate_Bps, lowat)
    worker.pipe = link
    worker._send_queue = link.send_queue if drain_aware else None
    rx = Receiver(ps, keep_bytes)
    try:
        lazy, plan = make_frames(1, chunk_bytes=1500, seed=3)
        first = len(make_frames(1, chunk_bytes=1500, seed=3)[0](0))
        deadline = 0.5 * first / rate_Bps  # half the mandatory frame's own transfer time
        res = worker.send_transmission(lazy, n_frames=len(plan.chunks), iteration=1, mandatory=1, deadline_s=deadline)
        writes = len(link.log)  # before the Bye that stop() writes
        got = rx.results.get(timeout=10)
    finally:
        rx.stop(worker)
    pieces_after_mandatory = writes - 1 - (-(-first // piece)) - 1  # minus Begin, frame 0's pieces, End
    return res, got, pieces_after_mandatory, worker


def test_the_first_transmission_waits_for_a_rate_estimate_instead_of_guessing():
    res, got, extra, worker = _first_transmission(drain_aware=True)
    assert res.delivered == got.delivered == 1 and res.cut
    assert extra == 0  # no speculative byte went onto a link that could not carry it by the deadline
    assert worker.drain_refusals == 1
    res, got, extra, worker = _first_transmission(drain_aware=False)  # the control
    assert res.delivered == got.delivered >= 1 and extra > 0
