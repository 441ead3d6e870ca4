"""Chunk planning: sizes, the mandatory boundary, order preservation, segment hygiene, errors."""

from __future__ import annotations

import numpy as np
import pytest

from rog.chunks import (
    ARTIFACT_CHUNK_SHARE,
    SMALL_TABLE,
    canonical_pairs,
    canonical_segments,
    chunk_bytes_for_share,
    plan_chunks,
)
from rog.rows import RowPartition


def _partition() -> RowPartition:
    return RowPartition.from_shapes(
        [
            ("a", (50, 40)),  # 50 rows of 40 elements
            ("b", (7,)),  # one row of 7
            ("c", (30, 100)),  # 30 rows of 100
            ("d", (4, 2500)),  # 4 rows of 2500 (bigger than the small chunks below)
            ("e", (100, 10)),  # 100 rows of 10
        ]
    )


def _check_plan(part, order, mandatory, sizes, chunk_bytes):
    plan = plan_chunks(part, order, mandatory, sizes, chunk_bytes)
    # the concatenated chunk rows are exactly the order
    assert np.array_equal(plan.rows(), order)
    assert plan.n_rows == len(order) == plan.rows_in(plan.n_chunks)
    # the mandatory prefix ends on a chunk boundary
    assert plan.rows_in(plan.mandatory_chunks) == mandatory
    assert np.array_equal(plan.rows(plan.mandatory_chunks), order[:mandatory])
    pos = 0
    for i, ch in enumerate(plan.chunks):
        rows = ch.rows()
        assert ch.n_rows == len(rows) > 0
        # segments never cross tensors and are runs of consecutive ids
        for first, n in ch.segments.tolist():
            assert n >= 1 and part.row_tensor[first] == part.row_tensor[first + n - 1]
        nbytes = sizes[rows].sum()
        # sizes near chunk_bytes: never over (unless one oversized row alone), and greedy: the
        # next row of the same part would not have fitted
        if nbytes > chunk_bytes:
            assert len(rows) == 1
        end = pos + len(rows)
        part_end = mandatory if pos < mandatory else len(order)
        if end < part_end:
            assert nbytes + sizes[order[end]] > chunk_bytes
        pos = end
    return plan


def test_plan_on_small_partitions_with_various_mandatory_prefixes():
    part = _partition()
    sizes = part.row_elements / 8.0  # sign bits
    rng = np.random.default_rng(0)
    for trial in range(40):
        k = int(rng.integers(1, part.n_rows + 1))
        order = rng.choice(part.n_rows, size=k, replace=False)
        if trial % 4 == 0:
            order = np.sort(order)
        mandatory = int(rng.integers(0, k + 1))
        chunk_bytes = int(rng.choice([30, 64, 200, 1000]))
        _check_plan(part, order, mandatory, sizes, chunk_bytes)


def test_chunks_hand_computed():
    # 10 rows of 120 elements = 15 bytes of sign bits each
    part = RowPartition.from_shapes([("a", (10, 120))])
    sizes = part.row_elements / 8.0
    plan = plan_chunks(part, np.arange(10), 3, sizes, chunk_bytes=32)
    # mandatory rows 0-2 (45 bytes): [0,1] (30 B) then [2]; rest 3-9: [3,4] [5,6] [7,8] [9]
    assert [c.rows().tolist() for c in plan.chunks] == [[0, 1], [2], [3, 4], [5, 6], [7, 8], [9]]
    assert plan.mandatory_chunks == 2
    assert [c.segments.tolist() for c in plan.chunks[:2]] == [[[0, 2]], [[2, 1]]]


def test_row_bigger_than_chunk_bytes_is_alone():
    part = _partition()
    sizes = part.row_elements * 4.0  # raw floats: d rows are 10,000 bytes
    d_rows = np.arange(part.tensor_first_row[3], part.tensor_first_row[4])
    order = np.concatenate([[0, 1], d_rows, [2, 3]])
    plan = _check_plan(part, order, 0, sizes, chunk_bytes=1000)
    for r in d_rows:
        (chunk,) = [c for c in plan.chunks if r in c.rows()]
        assert chunk.rows().tolist() == [r]


def test_mandatory_boundary_even_mid_segment():
    part = RowPartition.from_shapes([("a", (100, 40))])
    plan = plan_chunks(part, np.arange(100), 37, part.row_elements / 8.0, chunk_bytes=10**6)
    assert plan.n_chunks == 2 and plan.mandatory_chunks == 1
    assert plan.chunks[0].segments.tolist() == [[0, 37]]
    assert plan.chunks[1].segments.tolist() == [[37, 63]]


def test_all_or_nothing_mandatory_and_empty_order():
    part = _partition()
    sizes = part.row_elements / 8.0
    order = np.arange(part.n_rows)[::-1].copy()
    assert _check_plan(part, order, len(order), sizes, 100).mandatory_chunks == plan_chunks(
        part, order, len(order), sizes, 100
    ).n_chunks
    assert _check_plan(part, order, 0, sizes, 100).mandatory_chunks == 0
    empty = plan_chunks(part, np.zeros(0, dtype=np.int64), 0, sizes)
    assert empty.n_chunks == 0 and empty.rows().size == 0 and empty.rows_in(3) == 0


@pytest.mark.parametrize(
    "order, mandatory, chunk_bytes, match",
    [
        ([0, 1, 1], 0, 100, "twice"),
        ([0, 185], 0, 100, "must lie in"),
        ([-1, 2], 0, 100, "must lie in"),
        ([0, 1], 3, 100, "mandatory_rows"),
        ([0, 1], -1, 100, "mandatory_rows"),
        ([0, 1], 0, 0, "chunk_bytes"),
        ([0, 1], 0, 2.5, "chunk_bytes"),
    ],
)
def test_bad_plans_are_rejected(order, mandatory, chunk_bytes, match):
    part = _partition()
    with pytest.raises(ValueError, match=match):
        plan_chunks(part, np.array(order), mandatory, part.row_elements / 8.0, chunk_bytes)


def test_bad_row_sizes_are_rejected():
    part = _partition()
    with pytest.raises(ValueError, match="row_wire_bytes"):
        plan_chunks(part, [0, 1], 0, np.ones(3))
    sizes = np.ones(part.n_rows)
    sizes[1] = -1
    with pytest.raises(ValueError, match="non-negative"):
        plan_chunks(part, [0, 1], 0, sizes)


def test_canonical_segments_sorts_and_merges_inside_tensors():
    # tensor a: rows 0-49, b: row 50, c: rows 51-80
    part = _partition()
    segs = np.array([[10, 5], [0, 3], [3, 2], [49, 1], [50, 1], [51, 4], [5, 1]])
    got = canonical_segments(part, segs)
    # 0-2 + 3-4 + 5 merge (same tensor, touching); 10-14 apart; 49 (a), 50 (b), 51-54 (c) do not merge
    assert got.tolist() == [[0, 6], [10, 5], [49, 1], [50, 1], [51, 4]]
    # the row set is unchanged
    def rows(s):
        return sorted(r for f, n in s.tolist() for r in range(f, f + n))

    assert rows(got) == rows(segs)
    assert canonical_segments(part, np.array([[7, 2]])).tolist() == [[7, 2]]


@pytest.mark.parametrize("n_segments", [1, 5, SMALL_TABLE, SMALL_TABLE + 1, 100])
def test_canonical_segments_equals_segments_of_the_sorted_rows(n_segments):
    """Both code paths (plain Python for small tables, numpy for large) against an independent
    reference: the segments of the sorted row set."""
    part = _partition()
    rng = np.random.default_rng(n_segments)
    for _ in range(10):
        rows = rng.permutation(part.n_rows)[: int(rng.integers(n_segments, part.n_rows + 1))]
        segs = part.segments(rows)[:n_segments]  # a table of (at most) n_segments segments
        rows = np.concatenate([np.arange(f, f + n) for f, n in segs.tolist()])
        expected = part.segments(np.sort(rows))
        assert np.array_equal(canonical_segments(part, segs), expected)
        assert canonical_pairs(part, segs.tolist()) == expected.tolist()


@pytest.mark.parametrize("many", [False, True], ids=["small", "large"])
@pytest.mark.parametrize(
    "segs, match",
    [
        ([[0, 0]], "at least one row"),
        ([[183, 3]], "inside"),
        ([[-1, 1]], "inside"),
        ([[48, 3]], "crosses"),
        ([[0, 3], [2, 1]], "overlap"),
    ],
)
def test_canonical_segments_rejects_bad_tables(segs, match, many):
    part = _partition()
    if many:  # pad with valid, disjoint single rows of tensor e so the numpy path runs
        segs = segs + [[r, 1] for r in range(184, 184 - SMALL_TABLE - 1, -1)]
    with pytest.raises(ValueError, match=match):
        canonical_segments(part, np.array(segs))


# ----------------------------------------------------------------------------- chunk size from a share
def test_chunk_bytes_for_share_by_hand():
    # 10 + 20 + 30.5 = 60.5 payload bytes: 10 % of it is 6.05 -> 7 bytes; the whole of it -> 61
    sizes = np.array([10.0, 20.0, 30.5])
    assert chunk_bytes_for_share(sizes, 0.1) == 7
    assert chunk_bytes_for_share(sizes, 1.0) == 61
    assert chunk_bytes_for_share(np.zeros(3), 0.5) == 1  # never 0: plan_chunks needs a positive size
    # the original's share, 1000 of 33,307 rows, is about 3 %
    assert ARTIFACT_CHUNK_SHARE == pytest.approx(0.0300237, rel=1e-5)


def test_a_share_of_the_payload_cuts_a_full_transmission_into_that_many_chunks():
    """100 rows of 64 elements (8 bytes each as sign bits, 800 bytes): a share of 1/10 is 80 bytes,
    10 rows per chunk, 10 chunks; the original's 3 % gives ceil(800 * 0.0300237) = 25 bytes, 3 rows
    (24 bytes) per chunk, ceil(100 / 3) = 34 chunks."""
    part = RowPartition.from_shapes([("w", (100, 64))])
    sizes = part.row_elements / 8.0
    plan = plan_chunks(part, np.arange(100), 0, sizes, chunk_bytes_for_share(sizes, 0.1))
    assert plan.n_chunks == 10 and all(c.n_rows == 10 for c in plan.chunks)
    plan = plan_chunks(part, np.arange(100), 0, sizes, chunk_bytes_for_share(sizes, ARTIFACT_CHUNK_SHARE))
    assert chunk_bytes_for_share(sizes, ARTIFACT_CHUNK_SHARE) == 25
    assert plan.n_chunks == 34 and [c.n_rows for c in plan.chunks] == [3] * 33 + [1]


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5, float("nan")])
def test_chunk_share_outside_zero_one_is_refused(share):
    with pytest.raises(ValueError, match=r"chunk share must lie in \(0, 1\]"):
        chunk_bytes_for_share(np.ones(4), share)
