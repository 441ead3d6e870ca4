"""The RSP and SSP gates, lagging rows and staleness helpers on hand-written version tables."""

import numpy as np
import pytest

from rog.policies.staleness import (
    blocking_workers,
    lagging_rows,
    max_row_staleness,
    row_staleness,
    rsp_ready,
    ssp_ready,
    worker_staleness,
)

# 3 workers x 4 rows
VERSIONS = np.array([[5, 5, 4, 5], [3, 4, 4, 4], [5, 5, 5, 5]])
PUSH_ITER = np.array([5, 4, 5])
ALL = np.array([True, True, True])


def test_rsp_gate_boundary():
    # min(versions) = 3: worker 0 (n=5) is 2 ahead, worker 1 (n=4) is 1 ahead
    assert rsp_ready(VERSIONS, PUSH_ITER, 0, 2, ALL)  # n - min == s passes
    assert not rsp_ready(VERSIONS, PUSH_ITER, 0, 1, ALL)  # == s + 1 blocks
    assert rsp_ready(VERSIONS, PUSH_ITER, 1, 1, ALL)
    assert not rsp_ready(VERSIONS, PUSH_ITER, 1, 0, ALL)


def test_ssp_gate_boundary():
    # min(push_iter) = 4
    assert ssp_ready(PUSH_ITER, 0, 1, ALL)
    assert not ssp_ready(PUSH_ITER, 0, 0, ALL)
    assert ssp_ready(PUSH_ITER, 1, 0, ALL)


def test_rsp_is_stricter_than_ssp_when_rows_lag():
    # same push counts, SSP(1) lets worker 0 go; RSP(1) does not (row 0 of worker 1 is at 3)
    assert ssp_ready(PUSH_ITER, 0, 1, ALL) and not rsp_ready(VERSIONS, PUSH_ITER, 0, 1, ALL)


def test_inactive_workers_do_not_count():
    active = np.array([True, False, True])
    assert rsp_ready(VERSIONS, PUSH_ITER, 0, 1, active)  # min over workers 0, 2 is 4
    assert not rsp_ready(VERSIONS, PUSH_ITER, 0, 0, active)
    assert ssp_ready(PUSH_ITER, 0, 0, active)  # min push_iter over 0, 2 is 5
    assert rsp_ready(VERSIONS, PUSH_ITER, 0, 0, np.zeros(3, dtype=bool))  # nobody to wait for


def test_bsp_semantics_at_threshold_zero():
    n = 7
    full = np.full((3, 4), n)
    assert rsp_ready(full, np.full(3, n), 0, 0, ALL)
    one_row_behind = full.copy()
    one_row_behind[2, 3] = n - 1
    assert not rsp_ready(one_row_behind, np.full(3, n), 0, 0, ALL)


def test_second_level_within_one_worker():
    # one worker alone: its own oldest row bounds it
    v = np.array([[5, 2, 5]])
    assert not rsp_ready(v, np.array([5]), 0, 2, np.array([True]))
    assert rsp_ready(v, np.array([5]), 0, 3, np.array([True]))


def test_lagging_rows_by_hand():
    # fastest active = 5; worker 1's row staleness = [2, 1, 1, 1]
    assert lagging_rows(VERSIONS, PUSH_ITER, 1, 2, ALL).tolist() == [0]  # staleness > 1
    assert lagging_rows(VERSIONS, PUSH_ITER, 1, 1, ALL).tolist() == [0, 1, 2, 3]  # staleness > 0
    assert lagging_rows(VERSIONS, PUSH_ITER, 1, 3, ALL).tolist() == []
    assert lagging_rows(VERSIONS, PUSH_ITER, 0, 1, ALL).tolist() == [2]
    out = lagging_rows(VERSIONS, PUSH_ITER, 1, 2, ALL)
    assert out.dtype == np.int64
    # an evicted worker is never asked; an evicted fastest worker does not set the max
    assert lagging_rows(VERSIONS, PUSH_ITER, 1, 1, np.array([True, False, True])).tolist() == []
    assert lagging_rows(VERSIONS, np.array([9, 4, 5]), 1, 2, np.array([False, True, True])).tolist() == [0]


def test_lagging_rows_lookahead_zero_asks_only_for_blocking_rows():
    # fastest active = 5; worker 1's row staleness = [2, 1, 1, 1]; lookahead 0: staleness > s
    assert lagging_rows(VERSIONS, PUSH_ITER, 1, 1, ALL, lookahead=0).tolist() == [0]  # 2 > 1
    assert lagging_rows(VERSIONS, PUSH_ITER, 1, 2, ALL, lookahead=0).tolist() == []  # nothing blocks at s=2
    assert lagging_rows(VERSIONS, PUSH_ITER, 1, 0, ALL, lookahead=0).tolist() == [0, 1, 2, 3]
    # lookahead 2 reaches two iterations ahead: staleness > s - 2
    assert lagging_rows(VERSIONS, PUSH_ITER, 1, 2, ALL, lookahead=2).tolist() == [0, 1, 2, 3]
    # with lookahead 0 the asked rows are exactly those that keep the fastest worker's gate shut
    for s in range(4):
        asked = set()
        for w in range(3):
            asked |= {(w, int(i)) for i in lagging_rows(VERSIONS, PUSH_ITER, w, s, ALL, lookahead=0)}
        blocking = {(w, i) for w in range(3) for i in range(4) if PUSH_ITER.max() - VERSIONS[w, i] > s}
        assert asked == blocking
        assert rsp_ready(VERSIONS, PUSH_ITER, 0, s, ALL) == (not blocking)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="lookahead"):
            lagging_rows(VERSIONS, PUSH_ITER, 1, 2, ALL, lookahead=bad)


def test_lagging_rows_unblock_the_gate():
    # delivering exactly the lagging rows at the fastest iteration opens every gate at threshold s
    s = 2
    v = VERSIONS.copy()
    for w in range(3):
        rows = lagging_rows(v, PUSH_ITER, w, s, ALL)
        v[w, rows] = PUSH_ITER[w]
    assert all(rsp_ready(v, PUSH_ITER, w, s, ALL) for w in range(3))


def test_blocking_workers_and_staleness_helpers():
    assert blocking_workers(VERSIONS, PUSH_ITER, 0, 1, ALL).tolist() == [1]
    assert blocking_workers(VERSIONS, PUSH_ITER, 0, 2, ALL).tolist() == []
    assert blocking_workers(VERSIONS, PUSH_ITER, 0, 0, ALL).tolist() == [0, 1]
    assert worker_staleness(PUSH_ITER, 1, ALL) == 1
    assert worker_staleness(PUSH_ITER, 0, ALL) == 0
    assert row_staleness(VERSIONS, PUSH_ITER, 1, ALL).tolist() == [2, 1, 1, 1]
    assert max_row_staleness(VERSIONS, PUSH_ITER, 1, ALL) == 2
    assert max_row_staleness(VERSIONS, PUSH_ITER, 2, ALL) == 0


def test_full_delivery_makes_rsp_equal_ssp():
    rng = np.random.default_rng(1)
    for _ in range(200):
        w = int(rng.integers(1, 6))
        push_iter = rng.integers(0, 12, w)
        versions = np.repeat(push_iter[:, None], 5, axis=1)  # every row delivered every time
        active = rng.random(w) < 0.8
        s = int(rng.integers(0, 5))
        for r in range(w):
            assert rsp_ready(versions, push_iter, r, s, active) == ssp_ready(push_iter, r, s, active)


def test_bad_inputs_are_value_errors():
    with pytest.raises(ValueError, match="worker"):
        rsp_ready(VERSIONS, PUSH_ITER, 3, 1, ALL)
    with pytest.raises(ValueError, match="threshold"):
        ssp_ready(PUSH_ITER, 0, -1, ALL)
    with pytest.raises(ValueError, match="active"):
        ssp_ready(PUSH_ITER, 0, 1, np.array([True, True]))
    with pytest.raises(ValueError, match="versions"):
        rsp_ready(VERSIONS[:2], PUSH_ITER, 0, 1, ALL)
    with pytest.raises(ValueError, match="push_iter"):
        ssp_ready(np.zeros((2, 2)), 0, 1, ALL)
