"""Streams (ScaDLES): the buffer law (Eq. 2) on a simulated clock, truncation's bound, a take that
really waits, Table II from Eq. 3, rate traces and their errors, rate sets, batch policies, flags."""

from __future__ import annotations

import math

import pytest

from rog.streams import rates as R
from rog.streams.source import (ArrivalProcess, RateTrace, RateTraceError, StreamBuffer, eq3_buffer_samples,
                                load_rate_trace, persistence_buffer_samples, samples_gib)


class FakeClock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def run_iterations(buf, clock, batch, iter_s, T):
    """T iterations: take ``batch`` then compute ``iter_s``; returns the waits."""
    waits = []
    for _ in range(T):
        waits.append(buf.take(batch).wait_s)
        clock.sleep(iter_s)
    return waits


@pytest.mark.parametrize("rate,batch,iter_s,T", [(50.0, 16, 0.5, 400), (333.0, 64, 0.3, 1000), (12.5, 8, 1.0, 250)])
def test_persistence_buffer_follows_eq2(rate, batch, iter_s, T):
    clock = FakeClock()
    buf = StreamBuffer(ArrivalProcess(rate), "persistence", clock=clock, sleep=clock.sleep)
    buf.start()
    assert iter_s * rate >= batch  # the accumulating regime Eq. 2 describes
    waits = run_iterations(buf, clock, batch, iter_s, T)
    assert max(waits) == 0.0
    buf._advance(clock())
    expected = persistence_buffer_samples(iter_s, rate, batch, T)  # (t S - b) T + S
    assert abs(buf.held - expected) <= 1.0  # whole samples: the floor of the arrivals
    assert buf.dropped == 0


@pytest.mark.parametrize("rate,batch,iter_s", [(50.0, 16, 0.5), (333.0, 64, 0.3), (20.0, 64, 0.3)])
def test_truncate_never_holds_more_than_max_rate_batch(rate, batch, iter_s):
    clock = FakeClock()
    buf = StreamBuffer(ArrivalProcess(rate), "truncate", max_batch=batch, clock=clock, sleep=clock.sleep)
    buf.start()
    peak = 0
    for _ in range(300):
        r = buf.take(batch)
        peak = max(peak, r.buffer_before)
        clock.sleep(iter_s)
    assert peak <= max(math.ceil(rate), batch)
    # conservation: every arrival was taken, dropped or is still held
    buf._advance(clock())
    assert buf.arrived_n == buf.consumed + buf.dropped + buf.held


def test_starved_take_waits_b_over_s_per_iteration():
    rate, batch, iter_s = 20.0, 32, 0.4  # t S = 8 < b: starved
    clock = FakeClock()
    buf = StreamBuffer(ArrivalProcess(rate), "persistence", clock=clock, sleep=clock.sleep)
    buf.start()
    waits = run_iterations(buf, clock, batch, iter_s, 50)
    # steady state: each iteration lasts b / S, the wait is b / S - t
    assert sum(waits[10:]) / 40 == pytest.approx(batch / rate - iter_s, abs=2e-3)


def test_take_really_blocks_in_wall_time():
    """20 samples at 100/s after the prefill: the take blocks at least the arrival time (less a fraction of a
    sample in flight) and reports a wait no longer than it really blocked; the wall time (0.17-0.6 s) and the
    reported wait within 0.02 s of it: benchmarks/timing/streams.py (bench)."""
    from benchmarks.timing import streams as TS

    t = TS.blocking_take()
    assert t["wall_s"] >= 0.17
    assert 0.17 <= t["wait_s"] <= t["wall_s"]


@pytest.mark.bench
def test_bench_take_blocks_b_over_s_in_wall_time():
    from benchmarks.timing import streams as TS

    for f in TS.take_figures():
        assert f["ok"], f


# Table II: data accumulated with persistence (GB) at b = 64; Eq. 3 x 3 KiB per sample
TABLE_II = [  # (model iteration time s, rate, T, paper GB)
    (1.2, 100, 1e3, 0.35), (1.2, 100, 1e4, 3.5), (1.2, 100, 1e5, 34.3),
    (1.2, 600, 1e3, 2.06), (1.2, 600, 1e4, 20.6), (1.2, 600, 1e5, 200.6),
    (1.6, 100, 1e3, 0.47), (1.6, 100, 1e4, 4.69), (1.6, 100, 1e5, 46.8),
    (1.6, 600, 1e3, 2.75), (1.6, 600, 1e4, 27.5), (1.6, 600, 1e5, 274.8),
]


@pytest.mark.parametrize("t,S,T,gb", TABLE_II)
def test_table_ii_from_eq3_within_3_percent(t, S, T, gb):
    ours = samples_gib(eq3_buffer_samples(t, S, T))
    assert abs(ours - gb) / gb <= 0.03


def test_rate_trace_arrivals_and_inverse(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("t_s,samples_per_s\n0,10\n2,40\n3,5\n")
    tr = load_rate_trace(p)
    proc = ArrivalProcess(tr)
    assert proc.arrived(2.0) == pytest.approx(20.0)
    assert proc.arrived(2.5) == pytest.approx(40.0)
    assert proc.arrived(4.0) == pytest.approx(65.0)  # the last rate holds
    for n in (5.0, 20.0, 50.0, 61.0):
        assert proc.arrived(proc.time_of(n)) == pytest.approx(n)
    assert tr.mean_rate == pytest.approx((20 + 40 + 5) / 4)


@pytest.mark.parametrize("text,needle", [
    ("t_s,samples_per_s\n0,10\n1,abc\n", ":3:"),
    ("0,10\n1,0\n", ":2: rate 0"),
    ("0,10\n0.5,5\n0.5,6\n", ":3: time 0.5 does not increase"),
    ("1,10\n", ":1: the first time must be 0"),
    ("0,10,3\n", ":1: expected 2"),
    ("# nothing\n", "no samples"),
])
def test_malformed_rate_trace_names_file_and_line(tmp_path, text, needle):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(RateTraceError) as e:
        load_rate_trace(p)
    msg = str(e.value)
    assert str(p) in msg and needle in msg and "\n" not in msg


def test_rates_must_be_positive():
    with pytest.raises(ValueError):
        ArrivalProcess(0.0)
    with pytest.raises(ValueError):
        RateTrace((0.0,), (-1.0,))


def test_rate_sets_scaled_and_seeded():
    a = R.draw_rates("S1", 16, seed=3)
    assert a == R.draw_rates("S1", 16, seed=3) and a != R.draw_rates("S1", 16, seed=4)
    half = math.sqrt(3) * 24
    assert all(R.RATE_FLOOR <= x <= 38 + half for x in a)
    scale = R.set_scale(32, 0.28)
    assert scale == pytest.approx(0.5 * 1.2 / 0.28)
    b = R.draw_rates("S1", 16, seed=3, scale=scale)
    assert [round(x * scale, 1) for x in a] == pytest.approx(b, abs=0.11)


def test_batch_policies():
    assert R.batch_size("fixed", 500.0, 1.0, 32) == 32
    assert R.batch_size("rate_proportional", 3.0, 1.0, 32) == 8
    assert R.batch_size("rate_proportional", 5000.0, 1.0, 32) == 1024
    assert R.batch_size("rate_proportional", 81.0, 0.5, 32) == 40


def _parse(argv):
    from rog.experiment.cli import parse_args

    return parse_args(["--testbed", "loopback", *argv])


@pytest.mark.parametrize("argv,needle", [
    (["--stream-rate", "0"], "--stream-rate"),
    (["--stream-rate", "10,20"], "--stream-rate: got 2 rates for 4 workers"),
    (["--stream-rate", "x"], "--stream-rate"),
    (["--batch-policy", "rate_proportional"], "--batch-policy applies to streaming runs"),
    (["--stream-rate", "10", "--stream-set", "S1"], "exclude each other"),
    (["--stream-rate", "10", "--batch-window-s", "-1"], "--batch-window-s"),
    (["--stream-trace", "/nonexistent/rates.csv"], "--stream-trace: /nonexistent/rates.csv"),
])
def test_bad_stream_flags_one_line(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        _parse(argv)
    assert e.value.code == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert len(err) == 1 and needle in err[0]


def test_malformed_trace_flag_names_line(tmp_path, capsys):
    p = tmp_path / "rates.csv"
    p.write_text("0,10\n1,-3\n")
    with pytest.raises(SystemExit):
        _parse(["--stream-trace", str(p)])
    err = capsys.readouterr().err
    assert f"{p}:2" in err


def test_stream_config_resolved(tmp_path):
    from rog.experiment.stream_options import resolve

    a = _parse(["--stream-set", "S1", "--batch-policy", "rate_proportional", "--stream-buffer", "truncate"])
    st = resolve(a, 0.28, 32)
    assert st["source"] == "set" and st["buffer"] == "truncate" and len(st["rates"]) == 4
    assert st["window_s"] == pytest.approx(0.28 / 1.2)
    # batch = clip(S_here x window, 8, 1024) = b_fixed x S_paper / 64
    paper = R.draw_rates("S1", 4, 0)
    for b, s in zip(st["batches"], paper):
        assert b == min(max(round(s * 32 / 64), 8), 1024) or abs(b - s * 32 / 64) <= 1
    with pytest.raises(Exception, match="unpaced"):
        resolve(a, None, 32)


def test_data_wait_is_idle_power_not_stall():
    from rog.power.energy import model_energy_j, state_durations_s, timeline_from_events

    recs = [dict(kind="data_wait", t_s=0.0, iteration=1, duration_s=2.0),
            dict(kind="compute", t_s=2.0, iteration=1, duration_s=1.0),
            dict(kind="stall", t_s=3.0, iteration=1, duration_s=1.0, reason="gate")]
    tl = timeline_from_events(recs)
    d = state_durations_s(tl, 0.0, 4.0)
    assert d["stall"] == pytest.approx(1.0) and d["idle"] == pytest.approx(2.0) and d["compute"] == pytest.approx(1.0)
    watts = dict(compute=13.35, communication=4.25, stall=4.04, idle=1.5)
    assert model_energy_j(tl, watts, 0.0, 4.0) == pytest.approx(2 * 1.5 + 13.35 + 4.04)
