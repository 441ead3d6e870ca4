"""The pull's link points from frame arrivals, and the goodput the regression reads from them."""

import pytest

from rog.schedules.estimate import LinkEstimate, arrival_points


def test_arrival_points_span_completions_and_skip_the_start():
    # frames (t, bytes, completes): the first frame (t = 1.0) starts the clock and its bytes are left out
    arrivals = [(1.0, 500, True), (1.1, 1000, False), (1.2, 1000, True), (1.25, 500, True), (1.45, 2000, True)]
    pts = arrival_points(arrivals)
    assert [b for b, _ in pts] == [2000.0, 500.0, 2000.0]
    assert [s for _, s in pts] == pytest.approx([0.2, 0.05, 0.2])


def test_arrival_points_of_one_frame_or_none():
    assert arrival_points([]) == []
    assert arrival_points([(3.0, 800, True)]) == []


def test_segments_completed_by_one_frame_do_not_understate_goodput():
    # a link at exactly 10 kB/s; frames of 1000 B; small segments complete together in one frame.
    rate = 10_000.0
    arrivals = []
    t = 0.0
    completes = [False, True, True, False, False, True, True, False, True, False, True]
    for k, c in enumerate(completes):
        t += 1000 / rate
        arrivals.append((t, 1000, c))
    pts = arrival_points(arrivals)
    assert sum(b for b, _ in pts) == 1000 * (len(completes) - 1)
    est = LinkEstimate()
    for b, s in pts:
        est.add("pull", b, s)
    dt_s, bytes_per_s = est.fit("pull")
    assert bytes_per_s == pytest.approx(rate, rel=1e-6)
    assert dt_s == pytest.approx(0.0, abs=1e-9)


def test_pull_start_is_the_median_of_recent_starts():
    est = LinkEstimate()
    assert est.pull_start_s() == 0.0
    for s in (0.002, 0.084, 0.003, 0.001, float("nan"), -1.0):  # one slow first serve; bad values dropped
        est.add_pull_start(s)
    assert est.pull_start_s() == pytest.approx(0.0025)
