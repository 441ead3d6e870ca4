"""ADSP's rates delivered on time: the RateUpdate message, out-of-band delivery on a connection, the
scheduler's push to every worker at a window boundary (latency measured, no pull needed), the rule
that a window is judged only after every worker committed twice at its rate, "measure again" for an
unusable fit, and Alg. 1's restart at k = 1."""

from __future__ import annotations

import socket
import time

import pytest

from rog.policies.adsp import ADSP, MIN_WINDOW_COMMITS
from rog.policies.adsp_search import CommitRateSearch
from rog.runtime import read_events
from rog.runtime.messages import PullStart, RateUpdate
from rog.runtime.rate_broadcast import rate_pushes
from rog.transport import Connection, ProtocolError, Role, inproc_pair
from rog.transport.connection import SocketPipe
from rog.transport.messages import ENVELOPE, MAGIC, PROTOCOL_VERSION, encode_message

from test_adsp import _commit, _run, _view


def test_rate_update_roundtrip_and_bad_bytes():
    msg = RateUpdate(7, 3.0, True)
    body = msg.pack_body()
    assert RateUpdate.unpack_body(body) == msg
    bad = bytearray(body)
    bad[-1] = 2  # restart flag must be 0 or 1
    with pytest.raises(ProtocolError, match="restart"):
        RateUpdate.unpack_body(bytes(bad))
    with pytest.raises(ValueError, match="rate"):
        RateUpdate(1, 0.0, False).pack_body()
    with pytest.raises(ProtocolError):
        RateUpdate.unpack_body(body[:-1])


def _socket_pair():
    a, b = socket.socketpair()
    return (Connection(SocketPipe(a, 5.0), role=Role.WORKER, worker_id=0),
            Connection(SocketPipe(b, 5.0), role=Role.PS, worker_id=0))


@pytest.mark.parametrize("make", [inproc_pair, _socket_pair], ids=["inproc", "socket"])
def test_rate_update_taken_out_of_band_between_messages(make):
    worker, ps = make()
    got = []
    worker.out_of_band[RateUpdate] = lambda m, t: got.append(m)
    ps.send(PullStart(1, 0.0, 0.0, 5, 0, 0))
    ps.send(RateUpdate(1, 2.0, True))
    ps.send(PullStart(2, 0.0, 0.0, 5, 0, 0))
    # the two ordinary messages come out of recv in order; the rate never does, its handler ran
    assert worker.recv(1.0).iteration == 1 and worker.recv(1.0).iteration == 2
    assert got == [RateUpdate(1, 2.0, True)]
    ps.send(RateUpdate(2, 1.0, False))  # poll: read what is there without waiting
    t0 = time.monotonic()
    worker.poll()
    assert got[-1] == RateUpdate(2, 1.0, False) and time.monotonic() - t0 < 0.5
    worker.poll()  # nothing there: returns
    raw = ENVELOPE.pack(MAGIC, PROTOCOL_VERSION, RateUpdate.TYPE, 0, 99) + b"\0" * 99
    assert raw != encode_message(RateUpdate(1, 1.0, False))
    ps.pipe.write(raw)  # a body longer than the type's bound: refused before it is buffered
    with pytest.raises(ProtocolError):
        worker.poll()
    worker.close(), ps.close()


def test_rate_pushes_from_records():
    assert rate_pushes([dict(event="window")]) is None
    assert rate_pushes([dict(event="checkpoint", delta_c=[1, 2])]) == ([1.0, 2.0], False)
    assert rate_pushes([dict(event="checkpoint", delta_c=[1, 2]), dict(event="rates", delta_c=[3, 3])]) == (
        [3.0, 3.0], True)


def test_rates_reach_every_worker_without_a_pull(tmp_path):
    # Gamma = 100 s at rate 1: no worker commits during the run, so no pull reply can carry a rate;
    # the first scheduler tick is a window boundary and its push must still reach all three workers
    # within one mini-batch (10 ms pause + compute) plus the scheduler's send and thread hops; bound 0.5 s
    # on a loaded host (a pull reply could not have brought it at all: there was none)
    step_s = 0.01

    def global_loss(total):
        return 1.0

    opts = dict(gamma_s=100.0, floor_s=0.0, window_s=100.0, epoch_s=1000.0)
    ps, engines, _, _ = _run("ADSP", 0, opts, [40, 40, 40], step_s, events_dir=tmp_path, global_loss=global_loss)
    assert all(e.commits == 0 for e in engines)  # not one commit (pull) happened before the flush
    sent = {r: t for seq, r, rate, restart, t in ps.rate_broadcaster.sent if seq == 1}
    assert sorted(sent) == [0, 1, 2]
    for e in engines:
        seq, rate, restart, t_recv = e.rates_received[0]
        assert (seq, rate, restart) == (1, 1.0, True) and e.control == 1.0
        latency = t_recv - sent[e.worker]
        assert 0.0 <= latency < 0.5, latency
    _, recs = read_events(tmp_path / "events-ps.jsonl")
    assert len([r for r in recs if r["kind"] == "rate_push"]) >= 3


def test_windows_judged_after_two_commits_at_the_rate(tmp_path):
    # from the PS's event log (independently of the policy's counters): between a window boundary's
    # rate push and the window's judgement, every worker began >= 2 pushes
    calls = []

    def global_loss(total):
        calls.append(1)
        return 1.0 / (1.0 + 0.2 * len(calls)) + 0.1

    opts = dict(gamma_s=0.1, floor_s=0.0, window_s=0.05, epoch_s=100.0)
    _run("ADSP", 0, opts, [150, 150, 150], 0.01, events_dir=tmp_path, global_loss=global_loss)
    _, recs = read_events(tmp_path / "events-ps.jsonl")
    pushes = {w: sorted(r["t_s"] for r in recs if r["kind"] == "push" and r["worker"] == w) for w in range(3)}
    # a boundary is the moment the PS took the window's base count (rate_push's boundary_s: before any of the
    # seq's sends, whose own t_s each sender thread stamps later; under load a push can begin in between)
    boundaries = sorted({(r["seq"], r["boundary_s"]) for r in recs if r["kind"] == "rate_push" and r["restart"]})
    assert all(b <= r["t_s"] for r in recs if r["kind"] == "rate_push" and r["restart"]
               for seq, b in boundaries if seq == r["seq"])
    judged = [r for r in recs if r["kind"] == "schedule" and r["event"] == "window"]
    assert judged, "no window was judged"
    for win in judged:
        starts = [t for seq, t in boundaries if t <= win["t_s"]]
        b = max(starts)  # the boundary that began this window (the last one before its judgement)
        for w in range(3):
            n = sum(1 for t in pushes[w] if b < t <= win["t_s"])
            assert n >= MIN_WINDOW_COMMITS, (win, w, n)
    assert any(r["held_s"] > 0 for r in judged)  # the rule held at least one window past its nominal end


def _curve(tb, lb, a1sq, t, a3=0.2):
    """The paper's loss model through (tb, lb): 1 / (a1^2 (t - tb) + 1 / (lb - a3)) + a3."""
    return 1.0 / (a1sq * (t - tb) + 1.0 / (lb - a3)) + a3


def test_window_ready_counts_commits_since_the_push():
    # 3 samples per window: the middle one waits for every worker's first commit at the rate, the last
    # (which judges the window) for the second; a commit under way at the push does not count
    p = ADSP(gamma_s=100.0, window_s=2.0, epoch_s=1000.0, target_loss=0.5)
    v = _view()
    p.schedule(0.0, v, 1.0)  # boundary: rates out, first sample
    p.rates_pushed({1})  # worker 1 was mid-commit: that commit does not count
    assert not p.wants_loss(1.0)  # the middle sample is due by the clock, but nobody has committed
    assert p.schedule(1.0, v, 1.0) == []
    _commit(p, 0), _commit(p, 1), _commit(p, 2)
    assert p.window_commits() == 0 and not p.wants_loss(1.1)  # worker 1's first commit was the one under way
    _commit(p, 1)
    assert p.window_commits() == 1 and p.wants_loss(1.2)
    p.schedule(1.2, v, _curve(0.0, 1.0, 0.1, 1.2))
    assert not p.wants_loss(2.0)  # the end is due by the clock, but nobody has committed twice
    assert [r for r in p.schedule(2.0, v, _curve(0.0, 1.0, 0.1, 2.0)) if r["event"] == "window"] == []
    _commit(p, 0), _commit(p, 1), _commit(p, 2)
    assert p.window_ready() and p.wants_loss(2.5)
    recs = p.schedule(2.5, v, _curve(0.0, 1.0, 0.1, 2.5))
    win = [r for r in recs if r["event"] == "window"]
    assert len(win) == 1 and win[0]["held_s"] == pytest.approx(0.5) and win[0]["fit_ok"]
    assert win[0]["times_s"] == [0.0, 1.2, 2.5]
    assert [r for r in recs if r["event"] == "rates"][0]["k"] == 2  # next window: k + 1, pushed
    assert not p.window_ready()  # a new window: counts start again


def test_unusable_fit_measures_again():
    s = CommitRateSearch(window_s=2.0, epoch_s=100.0, target_loss=0.5)
    recs = []
    for t, loss in ((0.0, 1.0), (1.0, 1.0), (2.0, 1.0)):  # flat: no usable fit
        recs += s.add_loss(t, loss)
    assert recs[-1]["event"] == "window" and recs[-1]["remeasure"] and not recs[-1]["fit_ok"]
    assert s.k == 1 and s.searching and s.remeasured == 1  # k = 1 again, not a win for k = 2 by default
    for t in (3.0, 4.0):  # k = 1 measured again, now falling: usable
        s.add_loss(t, _curve(2.0, 1.0, 0.1, t))
    assert s.k == 2 and len(s.history) == 2 and s.history[1].fit.ok and s.history[1].k == 1
    flat = _curve(2.0, 1.0, 0.1, 4.0)
    for t in (5.0, 6.0):  # k + 1 unusable: measured again, the search does not settle on k = 1 by default
        s.add_loss(t, flat)
    assert s.searching and s.k == 2 and not s.decisions and s.remeasured == 2


def test_paper_mode_restarts_each_epoch_at_one():
    for mode, expect in (("paper", 1), ("code", 3)):
        p = ADSP(gamma_s=1000.0, window_s=2.0, epoch_s=10.0, mode=mode)
        p.search.k, p.search.searching, p.search.window = 3, False, None  # an epoch that chose k = 3
        v = _view()
        p.schedule(0.0, v, 1.0)
        recs = p.schedule(10.0, v, 0.5)  # the next epoch begins
        assert [r["k"] for r in recs if r["event"] == "search_start"] == [expect]
        assert [r["k"] for r in recs if r["event"] == "rates"] == [expect]


def test_a_rate_send_the_run_outlived_never_writes_to_its_closed_log(tmp_path):
    """The scheduler's sender threads may outlive the run (their links close at its end); once the run has ended the
    caller may close the PS's event log, so a failed send then writes nothing (before: ValueError in the thread)."""
    from rog.codecs.compression import RawCodec
    from rog.policies import make_policy
    from rog.rows import RowPartition
    from rog.runtime import EventLog, ParameterServer
    from rog.runtime.rate_broadcast import RateBroadcaster
    from rog.transport import LinkClosed

    class Closed:
        def send(self, msg):
            raise LinkClosed("connection is closed")

    log = EventLog(tmp_path / "events-ps.jsonl", "ps", "t")
    ps = ParameterServer(RowPartition.from_shapes([("w", (2, 2))]), 1, make_policy("BSP"), RawCodec(), events=log)
    b = RateBroadcaster(ps)
    b._send(Closed(), 0, 1, 2.0, True, 0.0)  # during the run: the failed push is logged with its error
    pushes = [e for e in read_events(tmp_path / "events-ps.jsonl")[1] if e.get("kind") == "rate_push"]
    assert len(pushes) == 1 and "LinkClosed" in pushes[0]["error"]
    with ps.cond:
        ps.ended = True
    log.close()
    b._send(Closed(), 0, 2, 2.0, True, 0.0)  # after it: nothing written, nothing raised
    assert b.sent == [] and len([e for e in read_events(tmp_path / "events-ps.jsonl")[1] if e.get("kind") == "rate_push"]) == 1
