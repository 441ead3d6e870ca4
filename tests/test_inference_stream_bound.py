"""The row-band bound of the per-layer timeline (``multi_timeline(..., stream=True)``): by hand on two plans, and
never slower than the timeline without it on random costs."""

from __future__ import annotations

import random

import pytest

from rog.inference.costmodel import WIRE_FACTOR
from rog.inference.loss import MultiCosts, multi_timeline
from random_costs import random_multi_costs

RATE = 8 * WIRE_FACTOR  # Mbit/s at which n bytes take n / 1e6 seconds


def test_merge_to_robot_by_hand():
    # head 0.1 s; up 0.1 s (0.1 -> 0.2); server part 0.2 -> 0.5, robot part 0.1 -> 0.3; merge down 0.4 s; tail 0.05
    c = MultiCosts(0.1, ((100_000, 0, 0.2, 0.3),), "robot", 400_000, 0, 0.05)
    # without: the merge leaves at 0.5 and lands at 0.9, then the tail: 0.95
    assert multi_timeline(c, 0.0, 0.0, RATE) == pytest.approx(0.95)
    # streamed: it may leave when the server's part starts (0.2) and lands at max(0.2 + 0.4, 0.5) = 0.6: 0.65
    assert multi_timeline(c, 0.0, 0.0, RATE, stream=True) == pytest.approx(0.65)


def test_merge_to_server_by_hand():
    # as above, merging on the server, output 0.05 s down
    c = MultiCosts(0.1, ((100_000, 0, 0.2, 0.3),), "server", 400_000, 50_000, 0.05)
    # without: the robot's rows leave at 0.3 (uplink free since 0.2), land at 0.7; tail to 0.75; output to 0.80
    assert multi_timeline(c, 0.0, 0.0, RATE) == pytest.approx(0.80)
    # streamed: from the robot part's start 0.1, queued behind the up message to 0.2, lands at max(0.6, 0.3) = 0.6;
    # tail to max(0.5, 0.6) + 0.05 = 0.65; output (a global tail's: not streamed) to 0.70
    assert multi_timeline(c, 0.0, 0.0, RATE, stream=True) == pytest.approx(0.70)


def test_the_robots_halo_rows_are_never_streamed():
    # only an up message before the first segment and no merge bytes: nothing to stream, the same latency
    c = MultiCosts(0.1, ((100_000, 0, 0.2, 0.3), (50_000, 0, 0.1, 0.1)), "robot", 0, 0, 0.05)
    assert multi_timeline(c, 0.0, 0.0, RATE, stream=True) == pytest.approx(multi_timeline(c, 0.0, 0.0, RATE))


def test_streaming_never_slows_a_plan():
    rng = random.Random(7)
    for _ in range(500):
        c = random_multi_costs(rng)
        ser, ov, rate = rng.uniform(0, 1e-8), rng.uniform(0, 2e-3), rng.uniform(5, 200)
        assert multi_timeline(c, ser, ov, rate, stream=True) <= multi_timeline(c, ser, ov, rate) + 1e-12
