"""Row importance (worker and server side) and the artifact's send order, by hand on tiny partitions."""

import numpy as np
import pytest

from rog.policies.importance import send_order, server_importance, worker_importance
from rog.rows import RowPartition


@pytest.fixture
def part():
    # a: (4,300) -> rows 0..3 ; b: (10,) -> row 4 ; c: (3,400) -> rows 5..7
    p = RowPartition.from_shapes([("a", (4, 300)), ("b", (10,)), ("c", (3, 400))])
    assert p.n_rows == 8 and list(p.row_tensor) == [0, 0, 0, 0, 1, 2, 2, 2]
    return p


SCALE = np.array([0.4, 0.1, 0.9], dtype=np.float32)  # max + 0.1 = 1.0 ; max + 1 = 1.9
PUSH_ITER = np.array([3, 1, 3, 2, 0, 3, 3, 1])  # max 3 -> staleness [0,2,0,1,3,0,0,2]


def test_worker_importance_by_hand(part):
    imp = worker_importance(PUSH_ITER, SCALE, part)
    expected = [0.4, 2.4, 0.4, 1.4, 3.1, 0.9, 0.9, 2.9]
    np.testing.assert_allclose(imp, expected, rtol=1e-6)
    assert imp.dtype == np.float64


def test_worker_magnitude_term_only_breaks_ties(part):
    # a huge scale on the fresh tensor must not lift it above a row one iteration staler
    scale = np.array([1e6, 0.0, 0.0])
    imp = worker_importance(np.array([5, 5, 5, 5, 4, 4, 4, 4]), scale, part)
    assert imp[:4].max() < 1.0 <= imp[4:].min()


def test_server_importance_by_hand(part):
    upd = np.array([2, 0, 1, 2, 0, 0, 3, 1])
    imp = server_importance(upd, SCALE, part)
    t = np.array([0.4, 0.1, 0.9]) / 1.9
    expected = upd + t[[0, 0, 0, 0, 1, 2, 2, 2]]
    np.testing.assert_allclose(imp, expected, rtol=1e-6)
    order = send_order(imp, 8, SCALE, part)
    assert order.tolist() == [6, 0, 3, 7, 2, 5, 1, 4]  # ties 0/3 by id


def test_zero_scales_give_pure_staleness(part):
    imp = worker_importance(PUSH_ITER, np.zeros(3), part)
    np.testing.assert_array_equal(imp, [0, 2, 0, 1, 3, 0, 0, 2])


@pytest.mark.parametrize(
    "prefix,expected",
    [
        (3, [4, 7, 1, 5, 6, 0, 2, 3]),  # head by importance; rest by tensor scale c (0.9) > a (0.4)
        (0, [5, 6, 7, 0, 1, 2, 3, 4]),  # all by tensor scale: c, a, b
        (8, [4, 7, 1, 3, 5, 6, 0, 2]),  # all by importance, ties by id
        (5, [4, 7, 1, 3, 5, 6, 0, 2]),
    ],
)
def test_send_order_by_hand(part, prefix, expected):
    imp = worker_importance(PUSH_ITER, SCALE, part)
    order = send_order(imp, prefix, SCALE, part)
    assert order.dtype == np.int64
    assert order.tolist() == expected


def test_send_order_first_rows_lead_the_head(part):
    imp = worker_importance(PUSH_ITER, SCALE, part)  # [0.4,2.4,0.4,1.4,3.1,0.9,0.9,2.9]
    # forced 0 and 6 first (by importance: 6 then 0), then the best other row (4) fills the prefix of 3
    assert send_order(imp, 3, SCALE, part, first_rows=[0, 6]).tolist() == [6, 0, 4, 5, 7, 1, 2, 3]
    # more forced rows than the prefix: the head grows to hold them all
    assert send_order(imp, 1, SCALE, part, first_rows=[2, 5, 1, 5]).tolist() == [1, 5, 2, 6, 7, 0, 3, 4]
    # no forced rows: same as without
    assert send_order(imp, 3, SCALE, part, first_rows=[]).tolist() == send_order(imp, 3, SCALE, part).tolist()


def test_stable_ties_keep_tensor_runs_contiguous():
    # a: (12,100) rows 0..11 ; b: (10,) row 12 ; c: (6,200) rows 13..18
    p = RowPartition.from_shapes([("a", (12, 100)), ("b", (10,)), ("c", (6, 200))])
    push_iter = np.array([5] * 4 + [3] * 4 + [4] * 4 + [5] + [3] * 3 + [5] * 3)
    scale = np.array([0.5, 0.2, 0.8])
    imp = worker_importance(push_iter, scale, p)
    order = send_order(imp, p.n_rows, scale, p)
    assert order.tolist() == [13, 14, 15, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 0, 1, 2, 3, 12]
    assert p.segments(order).tolist() == [[13, 3], [4, 8], [16, 3], [0, 4], [12, 1]]
    # equal staleness everywhere: head = top tensor, rest by scale -> one segment per tensor
    flat = send_order(worker_importance(np.full(19, 7), scale, p), 8, scale, p)
    assert p.segments(flat).tolist() == [[13, 6], [0, 12], [12, 1]]


def test_send_order_is_a_permutation_on_a_large_partition():
    rng = np.random.default_rng(0)
    p = RowPartition.from_shapes([(f"t{k}", (int(rng.integers(1, 400)), 64)) for k in range(60)] + [("bias", (7,))])
    push_iter = rng.integers(0, 6, p.n_rows)
    scale = rng.random(p.n_tensors)
    imp = worker_importance(push_iter, scale, p)
    for prefix in (0, p.n_rows // 3, p.n_rows):
        order = send_order(imp, prefix, scale, p)
        assert np.array_equal(np.sort(order), np.arange(p.n_rows))
        # the head really is the top `prefix` by importance
        if prefix:
            assert imp[order[:prefix]].min() >= np.delete(imp, order[:prefix]).max(initial=-np.inf)


def test_bad_inputs_are_value_errors(part):
    with pytest.raises(ValueError, match="row_push_iter"):
        worker_importance(np.zeros(7), SCALE, part)
    with pytest.raises(ValueError, match="tensor_scale"):
        worker_importance(PUSH_ITER, np.zeros(2), part)
    with pytest.raises(ValueError, match="tensor_scale"):
        worker_importance(PUSH_ITER, np.array([0.1, np.nan, 0.2]), part)
    with pytest.raises(ValueError, match="tensor_scale"):
        server_importance(np.zeros(8), np.array([0.1, -1.0, 0.2]), part)
    with pytest.raises(ValueError, match="updates_since_pull"):
        server_importance(-np.ones(8), SCALE, part)
    imp = worker_importance(PUSH_ITER, SCALE, part)
    with pytest.raises(ValueError, match="prefix_rows"):
        send_order(imp, 9, SCALE, part)
    with pytest.raises(ValueError, match="importance"):
        send_order(np.full(8, np.inf), 2, SCALE, part)
    with pytest.raises(ValueError, match="first_rows"):
        send_order(imp, 2, SCALE, part, first_rows=[8])
