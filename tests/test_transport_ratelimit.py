"""The sender-side token bucket, on a virtual clock (exact, no real time spent)."""

from __future__ import annotations

import pytest

from rog.transport import TokenBucket, VirtualClock


def test_constant_rate_grants_bytes_at_the_closed_form_times():
    clock = VirtualClock()
    bucket = TokenBucket(8.0, burst_bytes=1000, clock=clock)  # 8 Mbit/s = 1e6 bytes/s
    granted = 0
    for n in [300, 500, 700, 1000, 50, 999] * 20:
        assert bucket.acquire(n)
        granted += n
        # bytes B are available once burst + rate * t >= B
        assert clock.now() == pytest.approx(max(0.0, (granted - 1000) / 1e6), abs=1e-9)


def test_an_outage_makes_writes_wait_and_the_trace_is_followed():
    clock = VirtualClock()

    def trace(t_s):  # 8 Mbit/s, outage in [1, 2), then 16 Mbit/s
        return 8.0 if t_s < 1.0 else (0.0 if t_s < 2.0 else 16.0)

    step = 0.005
    bucket = TokenBucket(trace, burst_bytes=2000, clock=clock, max_step_s=step)
    total = 0
    while total < 3_000_000:
        assert bucket.acquire(1500)
        total += 1500
    # by hand: 2000 burst + 1e6 B in [0, 1) + nothing in [1, 2) + 2e6 B/s after 2 s
    expected_t = 2.0 + (total - 2000 - 1_000_000) / 2e6
    assert clock.now() == pytest.approx(expected_t, abs=2 * step)


def test_until_gives_up_without_taking_tokens():
    clock = VirtualClock()
    bucket = TokenBucket(lambda t: 0.0, burst_bytes=1000, clock=clock)  # a permanent outage
    assert bucket.acquire(1000)
    assert not bucket.acquire(10, until=0.25)
    assert clock.now() == pytest.approx(0.25)
    assert bucket.bytes_granted == 1000


def test_a_write_larger_than_the_bucket_goes_into_debt():
    clock = VirtualClock()
    bucket = TokenBucket(8.0, burst_bytes=1000, clock=clock)
    assert bucket.acquire(5000)  # a full bucket lets it go at once
    assert clock.now() == 0.0
    assert bucket.acquire(1)  # waits for the 4000-byte debt plus the byte
    assert clock.now() == pytest.approx(4001 / 1e6)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_rates_are_named(bad):
    bucket = TokenBucket(lambda t: bad, burst_bytes=10, clock=VirtualClock())
    bucket.acquire(10)
    with pytest.raises(ValueError, match="rate_mbit_at"):
        bucket.acquire(10)
    with pytest.raises(ValueError, match="rate_mbit_at"):
        TokenBucket(bad)
