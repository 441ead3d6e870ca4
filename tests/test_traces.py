"""Bandwidth traces: readers, file:line validation, and every transformation against hand-computed values."""

import math

import numpy as np
import pytest

from rog.links import BYTES_PER_MBIT, RateTrace
from rog.traces import (
    REPLAY_MODES,
    Trace,
    TraceError,
    apply_replay_mode,
    load_trace,
    load_traces_dir,
    worker_traces,
)


@pytest.fixture
def hand():
    """8 Mbit/s on [0, 1), 0 on [1, 3), 4 on [3, 5); period 5 s, 16 Mbit per pass."""
    return Trace(np.array([0.0, 1.0, 3.0]), np.array([8.0, 0.0, 4.0]), "hand", hold_after_s=2.0)


def write(tmp_path, name, content):
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    return p


# ---------------------------------------------------------------------- readers
def test_csv_reader(tmp_path):
    p = write(tmp_path, "a.csv", "t_s,mbps\n0.000,10.5\n0.5,0\n1.0,20\n")
    t = load_trace(p)
    np.testing.assert_array_equal(t.times_s, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(t.rate_mbit, [10.5, 0.0, 20.0])
    assert t.hold_s == 0.5 and t.duration_s == 1.5 and t.source == str(p)


def test_csv_header_tolerates_case_spaces_comments_bom_and_is_shifted_to_zero(tmp_path):
    p = write(tmp_path, "a.csv", "\ufeff# comment\n\n T_s , MBPS \n2.0, 1\n3.0 ,2\n\n")
    t = load_trace(p)
    np.testing.assert_array_equal(t.times_s, [0.0, 1.0])
    np.testing.assert_array_equal(t.rate_mbit, [1.0, 2.0])


def test_record_reader_with_unix_timestamps(tmp_path):
    # the artifact's bw_records: 'seconds Mbps', whitespace separated, absolute timestamps
    p = write(tmp_path, "outdoors.txt", "1650000000.25 30.5\n1650000000.75\t12\n1650000001.25   0.0\n")
    t = load_trace(p)
    np.testing.assert_allclose(t.times_s, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(t.rate_mbit, [30.5, 12.0, 0.0])
    assert t.duration_s == pytest.approx(1.5)


def test_record_reader_with_elapsed_seconds(tmp_path):
    p = write(tmp_path, "r.txt", "0 5\n0.1 6\n0.3 7\n")
    t = load_trace(p)
    np.testing.assert_allclose(t.times_s, [0.0, 0.1, 0.3])
    # median of the intervals 0.1 and 0.2
    assert t.hold_s == pytest.approx(0.15)


def test_hold_directive_and_override(tmp_path):
    p = write(tmp_path, "h.csv", "# hold_after_s=2.5\nt_s,mbps\n0,1\n1,2\n")
    assert load_trace(p).duration_s == 3.5
    assert load_trace(p, hold_after_s=0.25).duration_s == 1.25


BAD = [
    # (name, content, line, words in the message)
    ("empty", "", 1, "empty file"),
    ("comments only", "# nothing\n\n   \n", 1, "empty file"),
    ("bad header", "time,rate\n0,1\n1,2\n", 1, "bad header"),
    ("csv without header", "0,1\n1,2\n", 1, "add it as the first line"),
    ("header only", "t_s,mbps\n", 2, "no samples"),
    ("csv non-numeric rate", "t_s,mbps\n0,1\n0.5,abc\n", 3, "non-numeric"),
    ("csv empty field", "t_s,mbps\n0,1\n,2\n", 3, "non-numeric"),
    ("record non-numeric", "0 1\n0.5 fast\n", 2, "non-numeric"),
    ("record with a header", "time bw\n0 1\n1 2\n", 1, "non-numeric"),
    ("csv three columns", "t_s,mbps\n0,1,2\n1,2\n", 2, "expected 2 columns"),
    ("record one column", "0 1\n0.5\n", 2, "expected 2 columns"),
    ("record three columns", "0 1 2\n", 1, "expected 2 columns"),
    ("time goes backwards", "t_s,mbps\n0,1\n1,2\n0.5,3\n", 4, "backwards"),
    ("duplicate time", "0 1\n1 2\n1 3\n", 3, "duplicate time"),
    ("negative rate", "t_s,mbps\n0,1\n0.5,-2\n", 3, "negative rate"),
    ("nan rate", "0 1\n0.5 nan\n", 2, "not finite"),
    ("inf rate", "t_s,mbps\n0,inf\n1,2\n", 2, "not finite"),
    ("inf time", "0 1\ninf 2\n", 2, "not a finite number"),
    ("single sample", "t_s,mbps\n# one\n0,5\n", 3, "only one sample"),
    ("bad hold directive", "# hold_after_s=-1\n0 1\n1 2\n", 1, "hold_after_s"),
    ("blank lines count", "\n\nt_s,mbps\n0,1\n\n0.5,-1\n", 6, "negative rate"),
    ("not utf-8", b"0 1\n1 \xff\xfe\n", 2, "UTF-8"),
]


@pytest.mark.parametrize("name,content,line,words", BAD, ids=[b[0] for b in BAD])
def test_bad_files_name_file_and_line(tmp_path, name, content, line, words):
    p = write(tmp_path, "bad.csv" if "csv" in name else "bad.txt", content)
    with pytest.raises(TraceError) as info:
        load_trace(p)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.path == str(p) and err.line == line
    assert str(err).startswith(f"{p}:{line}: ")
    assert words in str(err)


def test_load_traces_dir(tmp_path):
    write(tmp_path, "a.csv", "t_s,mbps\n0,1\n1,2\n")
    write(tmp_path, "b.txt", "0 3\n2 4\n")
    write(tmp_path, "README.md", "not a trace")
    got = load_traces_dir(tmp_path)
    assert sorted(got) == ["a", "b"]
    assert got["b"].duration_s == 4.0
    write(tmp_path, "a.txt", "0 1\n1 2\n")
    with pytest.raises(ValueError, match="two traces named 'a'"):
        load_traces_dir(tmp_path)


def test_load_traces_dir_empty_or_missing(tmp_path):
    with pytest.raises(ValueError, match="no \\*.csv or \\*.txt"):
        load_traces_dir(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        load_traces_dir(tmp_path / "nope")


def test_bad_file_inside_a_dir_names_the_file(tmp_path):
    p = write(tmp_path, "x.csv", "t_s,mbps\n0,1\n1,-1\n")
    with pytest.raises(TraceError) as info:
        load_traces_dir(tmp_path)
    assert info.value.path == str(p) and info.value.line == 3


# ---------------------------------------------------------------------- the Trace object
@pytest.mark.parametrize("kwargs,words", [
    (dict(times_s=[0.5, 1.0], rate_mbit=[1, 2]), "start at 0"),
    (dict(times_s=[0.0, 1.0, 1.0], rate_mbit=[1, 2, 3]), "strictly increasing"),
    (dict(times_s=[0.0, 1.0], rate_mbit=[1, -2]), "rate_mbit must be finite and >= 0"),
    (dict(times_s=[0.0, 1.0], rate_mbit=[1, np.nan]), "rate_mbit must be finite"),
    (dict(times_s=[0.0, 1.0], rate_mbit=[1]), "same, non-zero length"),
    (dict(times_s=[0.0], rate_mbit=[1]), "needs hold_after_s"),
    (dict(times_s=[0.0, 1.0], rate_mbit=[1, 2], hold_after_s=0.0), "hold_after_s must be"),
])
def test_constructor_rejects_bad_fields(kwargs, words):
    with pytest.raises(ValueError, match=words):
        Trace(**kwargs)


def test_trace_is_immutable(hand):
    with pytest.raises(ValueError):
        hand.rate_mbit[0] = 1.0
    with pytest.raises(AttributeError):
        hand.source = "x"


def test_hand_values(hand):
    assert hand.duration_s == 5.0
    assert hand.mean_mbit == pytest.approx(16 / 5)
    got = hand.rate_at(np.array([0.0, 0.5, 1.0, 2.9, 3.0, 4.99, 5.0, 6.0, 8.5]))
    np.testing.assert_array_equal(got, [8, 8, 0, 0, 4, 4, 8, 0, 4])
    assert hand.rate_at(0.999) == 8.0
    assert hand.integral_mbit_s(0.0, 5.0) == pytest.approx(16.0)
    assert hand.integral_mbit_s(0.5, 3.5) == pytest.approx(4 + 0 + 2)
    # across the wrap: [4, 5) at 4, [5, 6) at 8, [6, 7) at 0
    assert hand.integral_mbit_s(4.0, 7.0) == pytest.approx(12.0)
    assert hand.integral_mbit_s(0.0, 50.0) == pytest.approx(160.0)
    np.testing.assert_allclose(hand.integral_mbit_s(np.array([0.0, 1.0]), np.array([1.0, 4.0])), [8.0, 4.0])
    with pytest.raises(ValueError):
        hand.rate_at(-1.0)
    with pytest.raises(ValueError):
        hand.integral_mbit_s(2.0, 1.0)


def test_default_hold_is_the_median_interval():
    t = Trace([0.0, 1.0, 3.0, 3.5], [1, 2, 3, 4])  # intervals 1, 2, 0.5 -> median 1
    assert t.hold_s == 1.0 and t.duration_s == 4.5


def test_resampled_by_hand(hand):
    r = hand.resampled(2.0)
    np.testing.assert_array_equal(r.times_s, [0.0, 2.0, 4.0])
    np.testing.assert_allclose(r.rate_mbit, [4.0, 2.0, 4.0])  # (8+0)/2, (0+4)/2, 4 over the cut last bin
    assert r.duration_s == 5.0 and r.mean_mbit == pytest.approx(hand.mean_mbit)
    fine = hand.resampled(0.5)
    assert fine.n_samples == 10
    np.testing.assert_allclose(fine.rate_at(np.arange(10) * 0.5 + 0.1), hand.rate_at(np.arange(10) * 0.5 + 0.1))


def test_offset_by_hand(hand):
    o = hand.offset(2.0)
    np.testing.assert_allclose(o.times_s, [0.0, 1.0, 3.0, 4.0])
    np.testing.assert_array_equal(o.rate_mbit, [0.0, 4.0, 8.0, 0.0])
    assert o.duration_s == pytest.approx(5.0) and o.mean_mbit == pytest.approx(hand.mean_mbit)
    assert hand.offset(7.0) == o  # one period later is the same point
    on_break = hand.offset(3.0)
    np.testing.assert_allclose(on_break.times_s, [0.0, 2.0, 3.0])
    np.testing.assert_array_equal(on_break.rate_mbit, [4.0, 8.0, 0.0])
    assert on_break.hold_s == pytest.approx(2.0)
    assert hand.offset(0.0) == hand
    ts = np.linspace(0, 20, 401)
    np.testing.assert_array_equal(o.rate_at(ts), hand.rate_at(ts + 2.0))


def test_window_and_looped_by_hand(hand):
    w = hand.window(0.5, 3.5)
    np.testing.assert_allclose(w.times_s, [0.0, 0.5, 2.5])
    np.testing.assert_array_equal(w.rate_mbit, [8.0, 0.0, 4.0])
    assert w.duration_s == pytest.approx(3.0)
    wrap = hand.window(4.0, 7.0)
    np.testing.assert_allclose(wrap.times_s, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(wrap.rate_mbit, [4.0, 8.0, 0.0])
    lp = hand.looped(12.0)
    np.testing.assert_allclose(lp.times_s, [0, 1, 3, 5, 6, 8, 10, 11])
    np.testing.assert_array_equal(lp.rate_mbit, [8, 0, 4, 8, 0, 4, 8, 0])
    assert lp.duration_s == pytest.approx(12.0)
    assert lp.integral_mbit_s(0, 12) == pytest.approx(16 + 16 + 8)
    with pytest.raises(ValueError, match="t0_s < t1_s"):
        hand.window(2.0, 2.0)


def test_scaling(hand):
    ts = hand.time_scaled(2.0)
    np.testing.assert_array_equal(ts.times_s, [0.0, 2.0, 6.0])
    assert ts.duration_s == 10.0 and ts.integral_mbit_s(0, 10) == pytest.approx(32.0)
    rs = hand.rate_scaled(0.5)
    np.testing.assert_array_equal(rs.rate_mbit, [4.0, 0.0, 2.0])
    assert rs.duration_s == 5.0
    with pytest.raises(ValueError, match="k must be"):
        hand.time_scaled(0.0)
    with pytest.raises(ValueError, match="k must be"):
        hand.rate_scaled(-1.0)
    assert "time_scaled(2)" in ts.source and ts.source.startswith("hand")


def test_stats_by_hand():
    t = Trace([0.0, 1.0, 2.0, 3.0], [10.0, 12.0, 6.0, 0.0], hold_after_s=1.0)
    s = t.stats()
    assert s["mean_mbit"] == pytest.approx(7.0)
    assert s["median_mbit"] == pytest.approx(8.0)
    assert s["p10_mbit"] == pytest.approx(1.8)  # linear interpolation between 0 and 6
    assert s["share_time_below_10pct_mean"] == pytest.approx(0.25)
    # 10 -> 12 is +20 %, 12 -> 6 is -50 %, 6 -> 0 is -100 %
    assert s["swing20_share"] == pytest.approx(1.0) and s["swing40_share"] == pytest.approx(2 / 3)
    assert s["swing20_per_s"] == pytest.approx(3 / 4) and s["swing40_per_s"] == pytest.approx(2 / 4)
    assert s["mean_interval_s"] == 1.0
    # 0 -> 0 is no swing, 0 -> 5 is one
    z = Trace([0.0, 1.0, 2.0], [0.0, 0.0, 5.0]).stats()
    assert z["swing20_share"] == pytest.approx(0.5)


def test_to_rate_trace_carries_the_same_bytes(hand):
    rt = hand.to_rate_trace()
    assert isinstance(rt, RateTrace) and rt.period_s == 5.0
    for t0, t1 in [(0.0, 5.0), (0.5, 3.5), (4.0, 7.0), (1.0, 23.0)]:
        assert rt.bytes_by(t0, t1) == pytest.approx(hand.integral_mbit_s(t0, t1) * BYTES_PER_MBIT)
    assert math.isinf(hand.to_rate_trace(loop=False).bytes_by(0, math.inf))


def test_csv_round_trip(tmp_path, hand):
    p = hand.to_csv(tmp_path / "h.csv")
    back = load_trace(p)
    assert back == hand  # the 2 s hold is not the median (1.5 s): written as a directive
    regular = Trace(np.arange(5) * 0.25, [1.0, 2.5, 0.0, 3.125, 7.0])
    p2 = regular.to_csv(tmp_path / "r.csv")
    assert p2.read_text().startswith("t_s,mbps\n")  # no directive: readable by RateTrace.from_csv
    assert load_trace(p2) == regular
    assert RateTrace.from_csv(p2).rate_mbit_at(0.6) == 0.0


# ---------------------------------------------------------------------- artifact holds and replay modes
@pytest.fixture
def long_trace():
    rng = np.random.default_rng(7)
    return Trace(np.arange(2000) * 0.5, rng.uniform(0, 100, 2000), "long")


def test_artifact_holds(long_trace):
    h = long_trace.with_artifact_holds(seed=3)
    np.testing.assert_array_equal(h.rate_mbit, long_trace.rate_mbit)
    extra = np.append(np.diff(h.times_s), h.hold_s) - np.append(np.diff(long_trace.times_s), long_trace.hold_s)
    held = extra > 1e-9
    assert 0.45 <= held.mean() <= 0.55  # Bernoulli(0.5) over 2000 samples
    assert extra[held].min() >= 10.0 and extra[held].max() <= 90.0
    assert extra[held].mean() == pytest.approx(50.0, rel=0.05)
    assert np.all(np.abs(extra[~held]) < 1e-9)
    assert h.duration_s == pytest.approx(long_trace.duration_s + extra.sum())
    assert h == long_trace.with_artifact_holds(seed=3)
    assert h != long_trace.with_artifact_holds(seed=4)
    assert long_trace.with_artifact_holds(seed=3, share=0.0) == long_trace
    few = long_trace.with_artifact_holds(seed=3, share=0.1, hold_s=(1.0, 2.0))
    extra_few = np.diff(few.times_s) - np.diff(long_trace.times_s)
    assert 0.07 <= np.mean(extra_few > 1e-9) <= 0.13
    assert extra_few[extra_few > 1e-9].min() >= 1.0 and extra_few.max() <= 2.0


def test_artifact_holds_validation(long_trace):
    with pytest.raises(ValueError, match="share"):
        long_trace.with_artifact_holds(0, share=1.5)
    with pytest.raises(ValueError, match="hold_s"):
        long_trace.with_artifact_holds(0, hold_s=(90, 10))


def test_artifact_hold_order_of_operations(long_trace):
    k = 0.25
    a = long_trace.with_artifact_holds(5).time_scaled(k)
    b = long_trace.time_scaled(k).with_artifact_holds(5, hold_s=(10 * k, 90 * k))
    np.testing.assert_allclose(a.times_s, b.times_s, rtol=1e-12, atol=1e-9)
    assert a.duration_s == pytest.approx(b.duration_s)
    c = apply_replay_mode(long_trace, "artifact", seed=5, time_scale=k)
    np.testing.assert_allclose(c.times_s, b.times_s, rtol=1e-12, atol=1e-9)


def test_replay_modes(long_trace):
    assert REPLAY_MODES == ("recorded", "artifact")
    assert apply_replay_mode(long_trace, "recorded") == long_trace
    rec = apply_replay_mode(long_trace, "recorded", time_scale=2.0)
    assert rec.duration_s == pytest.approx(2 * long_trace.duration_s)
    art = apply_replay_mode(long_trace, "artifact", seed=1)
    assert art.duration_s > long_trace.duration_s + 0.4 * 2000 * 10
    with pytest.raises(ValueError, match="mode must be one of"):
        apply_replay_mode(long_trace, "held")


# ---------------------------------------------------------------------- per-worker offsets
def test_worker_offsets_default(hand):
    ws = worker_traces(hand, 4)
    ts = np.linspace(0, 10, 201)
    for i, w in enumerate(ws):
        assert w.duration_s == pytest.approx(5.0)
        np.testing.assert_array_equal(w.rate_at(ts), hand.rate_at(ts + i * 1.25))
    assert ws[0] == hand


def test_worker_offsets_explicit_and_seeded(hand):
    ws = worker_traces(hand, 2, offsets_s=[0.5, 13.0])
    ts = np.linspace(0, 10, 201)
    np.testing.assert_array_equal(ws[1].rate_at(ts), hand.rate_at(ts + 3.0))
    seeded = worker_traces(hand, 4, seed=9)
    assert seeded[0] != hand  # a common random phase
    for i, w in enumerate(seeded):  # still evenly spread
        np.testing.assert_array_equal(w.rate_at(ts + 0.001), seeded[0].rate_at(ts + 0.001 + i * 1.25))
    assert worker_traces(hand, 4, seed=9) == seeded
    with pytest.raises(ValueError, match="one per worker"):
        worker_traces(hand, 3, offsets_s=[0.0])
    with pytest.raises(ValueError, match="n_workers"):
        worker_traces(hand, 0)
    with pytest.raises(ValueError, match="offsets_s must be"):
        worker_traces(hand, 1, offsets_s=[-1.0])
