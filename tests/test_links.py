"""Modelled links: transfer times computed by hand."""

import math

import numpy as np
import pytest

from rog.links import InfiniteLink, RateTrace, constant_link

MB = 1e6 / 8  # bytes per second at 1 Mbit/s


def test_two_rates_by_hand():
    # 8 Mbit/s = 1e6 B/s for [0, 1), then 16 Mbit/s = 2e6 B/s forever
    tr = RateTrace([0.0, 1.0], [8.0, 16.0])
    # from 0.5 s: 0.5 s at 1e6 B/s carries 500,000 B; the other 1,500,000 B take 0.75 s at 2e6 B/s
    assert tr.transfer_end_s(0.5, 2_000_000) == pytest.approx(1.75)
    # entirely inside the first piece: 250,000 B from 0.5 s take 0.25 s
    assert tr.transfer_end_s(0.5, 250_000) == pytest.approx(0.75)
    # ending exactly on the breakpoint
    assert tr.transfer_end_s(0.5, 500_000) == pytest.approx(1.0)
    # starting inside the second piece
    assert tr.transfer_end_s(3.0, 1_000_000) == pytest.approx(3.5)
    assert tr.bytes_by(0.5, 1.5) == pytest.approx(500_000 + 1_000_000)
    assert tr.bytes_by(2.0, 2.0) == 0.0
    assert tr.rate_mbit_at(0.999) == 8.0 and tr.rate_mbit_at(1.0) == 16.0 and tr.rate_mbit_at(99) == 16.0


def test_array_of_cumulative_sizes():
    tr = RateTrace([0.0, 1.0], [8.0, 16.0])
    ends = tr.transfer_end_s(0.0, np.array([0, 500_000, 1_000_000, 3_000_000]))
    np.testing.assert_allclose(ends, [0.0, 0.5, 1.0, 2.0])


def test_outage_makes_the_transfer_wait():
    # 8 Mbit/s on [0, 1), nothing on [1, 3), 4 Mbit/s (500,000 B/s) after
    tr = RateTrace([0.0, 1.0, 3.0], [8.0, 0.0, 4.0])
    # from 0.5 s: 500,000 B by 1 s, wait 2 s, then 500,000 B take 1 s -> 4.0 s
    assert tr.transfer_end_s(0.5, 1_000_000) == pytest.approx(4.0)
    # starting in the outage: nothing moves until 3 s
    assert tr.transfer_end_s(2.0, 250_000) == pytest.approx(3.5)
    # the last byte of the first piece arrives at 1 s, not after the outage
    assert tr.transfer_end_s(0.0, 1_000_000) == pytest.approx(1.0)
    assert tr.bytes_by(1.0, 3.0) == 0.0
    assert tr.bytes_by(0.0, 4.0) == pytest.approx(1_000_000 + 500_000)
    # zero bytes finish at once, even in an outage
    assert tr.transfer_end_s(2.0, 0) == 2.0


def test_dead_forever_is_infinite():
    tr = RateTrace([0.0, 2.0], [8.0, 0.0])  # 2,000,000 B then nothing, ever
    assert tr.transfer_end_s(0.0, 2_000_000) == pytest.approx(2.0)
    assert tr.transfer_end_s(0.0, 2_000_001) == math.inf
    assert tr.transfer_end_s(5.0, 1) == math.inf
    ends = tr.transfer_end_s(1.0, np.array([500_000, 1_500_000]))
    assert ends[0] == pytest.approx(1.5) and ends[1] == math.inf
    assert tr.bytes_by(1.0, 100.0) == pytest.approx(1_000_000)


def test_loop_repeats_the_trace():
    # period 3 s: 8 Mbit/s on [0, 1), 0 on [1, 3); 1e6 B per period
    tr = RateTrace([0.0, 1.0], [8.0, 0.0], loop=True, period_s=3.0)
    assert tr.rate_mbit_at(3.5) == 8.0 and tr.rate_mbit_at(4.5) == 0.0
    # from 0.5: 500,000 B by 1 s; next 1,000,000 B during [3, 4); the last 500,000 B in [6, 6.5)
    assert tr.transfer_end_s(0.5, 2_000_000) == pytest.approx(6.5)
    # exactly one more period's worth ends when the next period's sending stops (4 s), not at 6 s
    assert tr.transfer_end_s(1.0, 1_000_000) == pytest.approx(4.0)
    assert tr.bytes_by(0.0, 9.0) == pytest.approx(3_000_000)
    assert tr.bytes_by(2.0, 3.25) == pytest.approx(250_000)


def test_loop_all_zero_is_infinite():
    tr = RateTrace([0.0], [0.0], loop=True, period_s=1.0)
    assert tr.transfer_end_s(0.0, 1) == math.inf
    assert tr.transfer_end_s(0.0, 0) == 0.0


def test_constant_and_infinite_links():
    c = constant_link(80.0)  # 1e7 B/s
    assert c.transfer_end_s(2.0, 5_000_000) == pytest.approx(2.5)
    assert c.bytes_by(0.0, 0.1) == pytest.approx(1e6)
    inf = constant_link(math.inf)
    assert isinstance(inf, InfiniteLink)
    assert inf.transfer_end_s(1.25, 10**12) == 1.25
    np.testing.assert_array_equal(inf.transfer_end_s(1.25, np.array([1, 2])), [1.25, 1.25])
    assert inf.bytes_by(0.0, 1e-9) == math.inf and inf.bytes_by(1.0, 1.0) == 0.0


def test_transfer_end_inverts_bytes_by():
    rng = np.random.default_rng(3)
    times = np.concatenate([[0.0], np.cumsum(rng.uniform(0.1, 1.0, 40))])
    rates = rng.choice([0.0, 1.0, 5.0, 50.0], size=times.size)
    rates[-1] = 10.0
    tr = RateTrace(times, rates)
    for start in (0.0, 0.37, 5.5, 17.0):
        for nbytes in (1.0, 1e3, 1e5, 3e6):
            end = tr.transfer_end_s(start, nbytes)
            assert tr.bytes_by(start, end) == pytest.approx(nbytes, rel=1e-9)
            # and not a moment earlier: just before the end fewer bytes are through
            assert tr.bytes_by(start, max(start, end - 1e-6)) < nbytes


def test_scaled_and_csv(tmp_path):
    tr = RateTrace([0.0, 1.0], [8.0, 16.0]).scaled(rate_factor=0.5, time_factor=2.0)
    # now 4 Mbit/s (500,000 B/s) for 2 s, then 8 Mbit/s
    assert tr.transfer_end_s(0.0, 1_500_000) == pytest.approx(2.5)
    p = tmp_path / "t.csv"
    p.write_text("t_s,mbps\n0,8\n1,16\n")
    assert RateTrace.from_csv(p).transfer_end_s(0.5, 2_000_000) == pytest.approx(1.75)
    bad = tmp_path / "bad.csv"
    bad.write_text("t_s,mbps\n0,8\n1,x\n")
    with pytest.raises(ValueError, match=r"bad\.csv:3"):
        RateTrace.from_csv(bad)
    hdr = tmp_path / "hdr.csv"
    hdr.write_text("time,rate\n0,8\n")
    with pytest.raises(ValueError, match="header"):
        RateTrace.from_csv(hdr)


@pytest.mark.parametrize(
    "args, kwargs, word",
    [
        (([], []), {}, "times_s is empty"),
        (([0.0, 1.0], [1.0]), {}, "one rate per time"),
        (([0.5], [1.0]), {}, "start at 0"),
        (([0.0, 1.0, 1.0], [1.0, 2.0, 3.0]), {}, "strictly increasing"),
        (([0.0, 1.0], [1.0, -2.0]), {}, r"rate_mbit\[1\]"),
        (([0.0], [math.nan]), {}, "rate_mbit"),
        (([0.0, 1.0], [1.0, 2.0]), {"loop": True}, "period_s"),
        (([0.0, 1.0], [1.0, 2.0]), {"loop": True, "period_s": 1.0}, "period_s"),
        (([0.0], [1.0]), {"period_s": 3.0}, "loop=True"),
    ],
)
def test_validation(args, kwargs, word):
    with pytest.raises(ValueError, match=word):
        RateTrace(*args, **kwargs)


def test_query_validation():
    tr = RateTrace.constant(8.0)
    with pytest.raises(ValueError, match="start_s"):
        tr.transfer_end_s(-1.0, 10)
    with pytest.raises(ValueError, match="nbytes"):
        tr.transfer_end_s(0.0, -1)
    with pytest.raises(ValueError, match="end_s"):
        tr.bytes_by(2.0, 1.0)
