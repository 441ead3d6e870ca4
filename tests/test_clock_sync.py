"""Clock offsets between worker hosts and the PS (rog.runtime.clock_sync): the NTP arithmetic by hand,
the messages, and the exchange inside a real ParameterServer / WorkerEngine run over loopback TCP with
worker event clocks deliberately skewed (ROG_CLOCK_SKEW_S): the PS's estimate equals the injected
skew within half the measured delay."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rog.codecs.compression import RawCodec
from rog.local_update import LocalUpdate
from rog.policies import make_policy
from rog.runtime import EventLog, ParameterServer, WorkerEngine, aligned_zeros
from rog.runtime.clock_sync import (CLOCK_SKEW_ENV, ClockOffsets, ClockSample, best_sample, clock_skew_s,
                                    read_offsets_file, worker_offset_s, write_clock_offsets)
from rog.runtime.messages import ClockEcho, ClockProbe, ClockReport
from rog.transport import ProtocolError
from rog.transport.messages import MessageParser, encode_message
from conftest import run_ps_team
from test_runtime_server import CHUNK, PART, RULE
from test_runtime_sockets import socket_pairs

SKEWS_S = (7.5, -4.25)  # worker 0's clock runs 7.5 s ahead of the PS's, worker 1's 4.25 s behind
INJECT_EPS_S = 1e-3  # an event log maps monotonic to wall time by two reads one after the other (microseconds apart)


def test_sample_arithmetic_by_hand():
    # true offset +5 s (PS ahead), 10 ms out, 2 ms at the PS, 30 ms back (asymmetric)
    s = ClockSample(t0_s=100.0, t1_s=105.010, t2_s=105.012, t3_s=100.042)
    assert s.offset_s == pytest.approx(4.990, abs=1e-9)  # ((5.010) + (4.970)) / 2
    assert s.delay_s == pytest.approx(0.040, abs=1e-9)  # 42 ms round trip - 2 ms at the PS
    assert abs(s.offset_s - 5.0) <= s.delay_s / 2 + 1e-9  # the bound holds for any split of the delay
    slow = ClockSample(100.0, 105.300, 105.302, 100.402)  # a queued exchange: 400 ms delay
    assert best_sample([slow, s, slow]) == s
    with pytest.raises(ValueError, match="no clock samples"):
        best_sample([])


def test_messages_round_trip_and_reject_bad_bodies():
    msgs = [ClockProbe(3, 1.7e9 + 0.25), ClockEcho(3, 1.7e9, 1.7e9 + 5.0, 1.7e9 + 5.001),
            ClockReport(1, ((1.0, 2.0, 3.0, 4.0), (5.0, 6.0, 7.0, 8.0)))]
    for m in msgs:
        assert MessageParser().feed(encode_message(m)) == [m]
    with pytest.raises(ValueError):
        ClockProbe(1, float("nan")).pack_body()
    with pytest.raises(ValueError, match="phase"):
        ClockReport(2, ((1.0, 2.0, 3.0, 4.0),)).pack_body()
    body = ClockReport(0, ((1.0, 2.0, 3.0, 4.0),)).pack_body()
    with pytest.raises(ProtocolError):
        ClockReport.unpack_body(body[:-8])  # says 1 sample, holds 3.5 times
    with pytest.raises(ProtocolError):
        ClockReport.unpack_body(body[:5] + np.array([1.0, np.inf, 3.0, 4.0]).tobytes())


def test_skew_env_is_checked(monkeypatch):
    monkeypatch.delenv(CLOCK_SKEW_ENV, raising=False)
    assert clock_skew_s() == 0.0
    monkeypatch.setenv(CLOCK_SKEW_ENV, "-2.5")
    assert clock_skew_s() == -2.5
    monkeypatch.setenv(CLOCK_SKEW_ENV, "soon")
    with pytest.raises(ValueError, match=CLOCK_SKEW_ENV):
        clock_skew_s()


def test_skewed_worker_clocks_are_estimated_over_loopback(tmp_path, monkeypatch):
    W, N = len(SKEWS_S), 3
    monkeypatch.delenv(CLOCK_SKEW_ENV, raising=False)
    ps_events = EventLog(tmp_path / "events-ps.jsonl", "ps", "t")  # the PS's clock: not skewed
    worker_events = []
    for k, skew in enumerate(SKEWS_S):  # each worker's event clock is off by its skew, as a separate host's
        monkeypatch.setenv(CLOCK_SKEW_ENV, repr(skew))
        worker_events.append(EventLog(tmp_path / f"events-w{k}.jsonl", f"w{k}", "t"))
    monkeypatch.delenv(CLOCK_SKEW_ENV)
    for k, skew in enumerate(SKEWS_S):
        assert worker_events[k].origin_unix_s - ps_events.origin_unix_s == pytest.approx(skew, abs=0.05)

    ends, ps_ends = zip(*socket_pairs(W, None))  # loopback TCP, unshaped
    policy = lambda: make_policy("BSP", 0)  # noqa: E731
    ps = ParameterServer(PART, W, policy(), RawCodec(), events=ps_events, chunk_bytes=CHUNK, wait_timeout_s=30.0,
                         join_timeout_s=30.0)
    engines = {}

    def worker(k, link):
        params = aligned_zeros(PART.n_elements)
        eng = WorkerEngine(link, PART, params, policy(), RawCodec(), LocalUpdate(PART.n_elements, RULE),
                           chunk_bytes=CHUNK, wait_timeout_s=30.0, events=worker_events[k], clock_sync=True)
        engines[k] = eng
        eng.join(30.0)
        rng = np.random.default_rng(k)
        for _ in range(N):
            eng.step(rng.standard_normal(PART.n_elements).astype(np.float32))
        eng.flush()
        eng.close()

    run_ps_team(ps, worker, W, ends=list(zip(ends, ps_ends)), ps_join_s=60.0)

    # the exact offset of the two event clocks (each is origin_unix_s + monotonic - origin_s: their difference is
    # a constant), independent of the exchange; it is the injected skew up to the clock reads
    true_offset = [(ps_events.origin_unix_s - ps_events.origin_s) - (w.origin_unix_s - w.origin_s) for w in worker_events]
    for k, skew in enumerate(SKEWS_S):
        assert abs(true_offset[k] + skew) <= INJECT_EPS_S
    path = tmp_path / "clock_offsets.json"
    write_clock_offsets(path, ps.clock_offsets, ps_events.origin_unix_s)
    doc = read_offsets_file(path)
    print("injected vs estimated (s):")
    for k, skew in enumerate(SKEWS_S):
        entry = doc["workers"][f"w{k}"]
        for phase in ("join", "end"):
            est = entry[phase]
            assert est["exchanges"] == 8
            assert 0 <= est["delay_s"] < 0.5
            # PS clock - worker clock (= -skew): the estimate is within half the exchange's delay of it
            assert abs(est["offset_s"] - true_offset[k]) <= est["delay_s"] / 2 + 1e-9, (k, phase, est, true_offset[k])
            print(f"  w{k} {phase}: injected {-skew:+.6f} (exact {true_offset[k]:+.7f}), estimated {est['offset_s']:+.7f}, "
                  f"delay {est['delay_s']:.6f}")
            # the worker's own view (its best exchange) is the same estimate
            assert engines[k].clock_estimates[phase].offset_s == pytest.approx(est["offset_s"], abs=1e-12)
        offset, delay = worker_offset_s(entry)
        assert abs(offset - true_offset[k]) <= delay / 2 + 1e-9
    assert json.loads(path.read_text())["reference"] == "ps"


def test_nothing_written_without_reports(tmp_path):
    path = tmp_path / "clock_offsets.json"
    write_clock_offsets(path, ClockOffsets(), 0.0)
    assert not path.exists() and read_offsets_file(path) is None
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="clock_offsets.json"):
        read_offsets_file(path)
