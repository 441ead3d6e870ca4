"""Rows: the paper's split rule, the flat layout, segments, element indices, gather/scatter."""

from __future__ import annotations

import numpy as np
import pytest

from rog.rows import SHORT_SEGMENT_ELEMENTS, RowPartition, ranges_index, rows_of_shape


def _ref_elements(part: RowPartition, rows) -> np.ndarray:
    """Per-row Python reference for element_index."""
    out: list[int] = []
    for r in rows:
        out.extend(range(int(part.row_start[r]), int(part.row_start[r + 1])))
    return np.asarray(out, dtype=np.int64)


def _mixed_partition() -> RowPartition:
    """Short rows, long rows (> SHORT_SEGMENT_ELEMENTS) and single-row tensors, interleaved."""
    return RowPartition.from_shapes(
        [
            ("conv.weight", (16, 4, 3, 3)),  # 576 elements < 1000: one row
            ("dw.weight", (200, 1, 3, 3)),  # 1800 elements: 200 rows of 9
            ("fc1.weight", (30, 100)),  # 30 rows of 100
            ("fc1.bias", (30,)),  # 1-D: one row
            ("big.weight", (3, SHORT_SEGMENT_ELEMENTS + 904)),  # rows longer than the short threshold
            ("scalar", ()),  # one element, one row
            ("fc2.weight", (12, 250)),  # 12 rows of 250
        ]
    )


# ---------------------------------------------------------------- the paper's rule
@pytest.mark.parametrize(
    "shape, rows",
    [
        ((5000,), 1),  # 1-D, however long: one row
        ((999,), 1),
        ((37, 27), 1),  # 2-D with 999 elements: too small to split
        ((40, 25), 40),  # 2-D with exactly 1000 elements: split along dim 0
        ((1000, 1), 1000),  # 1000 rows of one element
        ((1, 1000), 1),  # one row of 1000 elements
        ((64, 32, 3, 3), 64),  # 4-D conv: out rows of in*k*k
        ((8, 3, 3, 3), 1),  # 4-D with 216 elements: one row
        ((), 1),  # scalar
    ],
)
def test_rows_of_shape_follows_the_paper(shape, rows):
    assert rows_of_shape(shape) == rows
    part = RowPartition.from_shapes([("t", shape)])
    numel = int(np.prod(shape)) if shape else 1
    assert part.n_rows == rows
    assert part.n_elements == numel
    assert np.all(part.row_elements == numel // rows)


def test_conv_rows_are_in_times_k_times_k():
    part = RowPartition.from_shapes([("w", (64, 32, 3, 3)), ("b", (64,))])
    assert part.n_rows == 65
    assert part.row_elements[0] == 32 * 9 and part.row_elements[63] == 288
    assert part.row_elements[64] == 64  # the bias is one row
    assert part.row_tensor.tolist() == [0] * 64 + [1]


def test_linear_layer_from_module():
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(40, 25), torch.nn.Linear(25, 3))
    part = RowPartition.from_module(model)
    # 25x40 = 1000 -> 25 rows; bias (25,) -> 1; 3x25 = 75 -> 1; bias (3,) -> 1
    assert part.names == ("0.weight", "0.bias", "1.weight", "1.bias")
    assert part.n_rows == 28
    assert part.n_elements == 1000 + 25 + 75 + 3


# ---------------------------------------------------------------- layout
def test_rows_are_contiguous_in_the_flat_buffer():
    part = _mixed_partition()
    rs = part.row_start
    assert rs[0] == 0 and rs[-1] == part.n_elements
    assert np.all(np.diff(rs) > 0)
    # each tensor's rows start at its offset and tile it exactly
    for t in range(part.n_tensors):
        r0, r1 = part.tensor_first_row[t], part.tensor_first_row[t + 1]
        assert rs[r0] == part.tensor_offset[t] and rs[r1] == part.tensor_offset[t + 1]
        assert np.all(part.row_tensor[r0:r1] == t)
    assert part.tensor_rows.tolist() == [1, 200, 30, 1, 3, 1, 12]
    assert np.array_equal(part.row_bytes, 4 * part.row_elements)


def test_partitions_compare_by_names_and_shapes():
    a, b = _mixed_partition(), _mixed_partition()
    assert a == b and hash(a) == hash(b)
    assert a != RowPartition.from_shapes([("conv.weight", (16, 4, 3, 3))])
    assert a.row_start_list == a.row_start.tolist() and a.row_tensor_list == a.row_tensor.tolist()


def test_views_are_views():
    part = _mixed_partition()
    flat = np.arange(part.n_elements, dtype=np.float32)
    w = part.tensor_view(flat, 2)
    assert w.shape == (30, 100) and np.shares_memory(w, flat)
    assert w[3, 7] == part.tensor_offset[2] + 3 * 100 + 7
    assert part.tensor_view(flat, 5).shape == ()
    row = part.row_view(flat, 5)  # row 5 = dw row 4
    assert np.array_equal(row, np.arange(576 + 4 * 9, 576 + 5 * 9, dtype=np.float32))


def test_row_windows_index_rows_by_start():
    part = _mixed_partition()
    flat = np.random.default_rng(0).standard_normal(part.n_elements).astype(np.float32)
    rows = np.array([1, 7, 200, 3])  # dw rows, all 9 elements
    win = part.row_windows(flat, 9)
    got = win[part.row_start[rows]]
    assert np.array_equal(got, np.stack([part.row_view(flat, r) for r in rows]))
    win[part.row_start[rows]] = 0.0  # writes go through to the buffer
    assert all(np.all(part.row_view(flat, r) == 0) for r in rows)


# ---------------------------------------------------------------- segments and indices
def test_segments_on_hand_written_orders():
    # tensor A: rows 0-3, tensor B: row 4, tensor C: rows 5-7
    part = RowPartition.from_shapes([("A", (4, 250)), ("B", (10,)), ("C", (3, 400))])
    assert part.n_rows == 8
    assert part.segments([2, 3, 4, 5, 7, 6, 0]).tolist() == [[2, 2], [4, 1], [5, 1], [7, 1], [6, 1], [0, 1]]
    assert part.segments([0, 1, 2, 3]).tolist() == [[0, 4]]
    assert part.segments([3, 4, 5, 6]).tolist() == [[3, 1], [4, 1], [5, 2]]  # ids run on, tensors do not
    assert part.segments([1, 0]).tolist() == [[1, 1], [0, 1]]  # descending ids are separate runs
    assert part.segments([]).shape == (0, 2)


def test_segment_elements_are_the_rows_element_ranges():
    part = RowPartition.from_shapes([("A", (4, 250)), ("B", (10,)), ("C", (3, 400))])
    start, stop = part.segment_elements(np.array([[1, 2], [4, 1], [6, 2]]))
    assert start.tolist() == [250, 1000, 1410]
    assert stop.tolist() == [750, 1010, 2210]


def test_element_index_matches_per_row_reference():
    part = _mixed_partition()
    rng = np.random.default_rng(1)
    for _ in range(20):
        rows = rng.choice(part.n_rows, size=int(rng.integers(0, 60)), replace=False)
        assert np.array_equal(part.element_index(rows), _ref_elements(part, rows))
    assert part.element_index([]).size == 0


def test_ranges_index_by_hand():
    assert ranges_index([5, 0, 10], [2, 3, 1]).tolist() == [5, 6, 0, 1, 2, 10]
    assert ranges_index([3, 7], [0, 2]).tolist() == [7, 8]
    assert ranges_index([], []).size == 0


def test_gather_scatter_round_trip_on_random_row_sets():
    part = _mixed_partition()
    rng = np.random.default_rng(2)
    src = rng.standard_normal(part.n_elements).astype(np.float32)
    for trial in range(30):
        k = int(rng.integers(1, part.n_rows + 1))
        rows = rng.choice(part.n_rows, size=k, replace=False)
        if trial % 3 == 0:
            rows = np.sort(rows)  # long runs: the slice path
        vals = part.gather(src, rows)
        assert np.array_equal(vals, src[_ref_elements(part, rows)])
        dst = np.zeros_like(src)
        part.scatter(dst, rows, vals)
        mask = np.zeros(part.n_elements, dtype=bool)
        mask[_ref_elements(part, rows)] = True
        assert np.array_equal(dst[mask], src[mask])
        assert not dst[~mask].any()


def test_rows_mask():
    part = _mixed_partition()
    m = part.rows_mask([0, 5, 246])
    assert m.dtype == bool and m.sum() == 3 and m[[0, 5, 246]].all()


def test_tensor_mean_abs_matches_numpy():
    part = _mixed_partition()
    flat = np.random.default_rng(3).standard_normal(part.n_elements).astype(np.float32)
    ref = [np.abs(flat[a:b].astype(np.float64)).mean() for a, b in zip(part.tensor_offset[:-1], part.tensor_offset[1:])]
    np.testing.assert_allclose(part.tensor_mean_abs(flat), ref, rtol=1e-6)
    assert np.array_equal(part.tensor_sum_abs(part.new_flat()), np.zeros(part.n_tensors))


def test_tensor_sums_do_not_depend_on_the_buffer_address():
    """The same values at another alignment give the same bits (a BLAS sasum would not)."""
    part = RowPartition.from_shapes([("big", (300, 1000)), ("small", (77,))])
    x = np.random.default_rng(4).standard_normal(part.n_elements).astype(np.float32)
    raw = np.empty(part.n_elements + 16, dtype=np.float32)
    results = set()
    for shift in range(16):
        y = raw[shift : shift + part.n_elements]
        y[:] = x
        results.add(part.tensor_sum_abs(y).tobytes())
    assert len(results) == 1


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "shapes, match",
    [
        ([], "at least one tensor"),
        ([("a", (3, -1))], "negative dimension"),
        ([("a", (0, 5))], "no elements"),
        ([("a", (3,)), ("a", (4,))], "appears twice"),
    ],
)
def test_bad_shapes_are_rejected(shapes, match):
    with pytest.raises(ValueError, match=match):
        RowPartition.from_shapes(shapes)


def test_bad_row_ids_are_rejected_with_the_range():
    part = _mixed_partition()
    for bad in ([part.n_rows], [-1], [0, part.n_rows + 5]):
        with pytest.raises(ValueError, match=rf"\[0, {part.n_rows}\)"):
            part.segments(bad)
        with pytest.raises(ValueError, match="must lie in"):
            part.element_index(bad)
    with pytest.raises(ValueError, match="1-D"):
        part.segments([[0, 1]])
    with pytest.raises(ValueError, match="integer"):
        part.segments([0.5])
    with pytest.raises(ValueError, match="row id"):
        part.row_view(part.new_flat(), part.n_rows)


def test_bad_buffers_are_rejected():
    part = _mixed_partition()
    with pytest.raises(ValueError, match="float32"):
        part.tensor_mean_abs(np.zeros(part.n_elements, dtype=np.float64))
    with pytest.raises(ValueError, match="shape"):
        part.tensor_mean_abs(np.zeros(part.n_elements + 1, dtype=np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        part.tensor_mean_abs(np.zeros(2 * part.n_elements, dtype=np.float32)[::2])
    with pytest.raises(ValueError, match="expected"):
        part.scatter(part.new_flat(), [0, 1], np.zeros(3, dtype=np.float32))
