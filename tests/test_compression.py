"""Codecs: DEFSGDM sign compression against a hand reference, exact error feedback, raw exactness."""

from __future__ import annotations

import numpy as np
import pytest

from rog.chunks import ChunkSpec, plan_chunks
from rog.codecs.codec_registry import make_codec
from rog.codecs.compression import EncodedChunk, RawCodec, SignCodec
from rog.rows import SHORT_SEGMENT_ELEMENTS, RowPartition


def _partition() -> RowPartition:
    """Short rows (odd lengths: unaligned bits), long rows, 1-row tensors."""
    return RowPartition.from_shapes(
        [
            ("dw", (150, 1, 3, 3)),  # 150 rows of 9
            ("fc", (40, 33)),  # 40 rows of 33
            ("bias", (40,)),  # one row
            ("big", (3, SHORT_SEGMENT_ELEMENTS + 5)),  # long rows
            ("fc2", (20, 100)),  # 20 rows of 100
            ("norm", (7,)),
        ]
    )


def _ref_decode(part: RowPartition, acc: np.ndarray, scales: np.ndarray, rows) -> np.ndarray:
    """Hand reference: scale of the row's tensor times the sign bit's sign, on the given rows."""
    out = np.zeros(part.n_elements, dtype=np.float32)
    for r in rows:
        a, b = part.row_start[r], part.row_start[r + 1]
        s = scales[part.row_tensor[r]]
        out[a:b] = np.where(np.signbit(acc[a:b]), -s, s)
    return out


def _ref_pack(part: RowPartition, acc: np.ndarray, segments: np.ndarray) -> bytes:
    """Reference payload for any segment order: sign bits back to back, packbits order."""
    bits = np.concatenate([np.signbit(acc[part.row_start[f] : part.row_start[f + n]]) for f, n in segments.tolist()])
    return np.packbits(bits).tobytes()


def _plan(part, codec, order, mandatory=0, chunk_bytes=64):
    return plan_chunks(part, np.asarray(order), mandatory, codec.row_wire_bytes(part), chunk_bytes)


# ---------------------------------------------------------------- SignCodec vs hand values
def test_sign_codec_by_hand():
    part = RowPartition.from_shapes([("a", (4,)), ("b", (2,))])
    acc = np.array([1.0, -2.0, 3.0, -0.0, 0.5, 0.0], dtype=np.float32)
    codec = SignCodec()
    scales = codec.tensor_scales(part, acc)
    assert scales.tolist() == [1.5, 0.25]  # mean |x| per tensor: 6/4 and 0.5/2
    enc = codec.encode(part, acc, scales, ChunkSpec(np.array([[0, 1], [1, 1]])))
    # payload order: short segments by row length first (b: 2 elements, then a: 4)
    assert enc.segments.tolist() == [[1, 1], [0, 1]]
    assert enc.scales.tolist() == [0.25, 1.5]
    # sign bits 0,0 | 0,1,0,1 -> 0b000101_00 = 0x14
    assert bytes(enc.data) == b"\x14"
    out = part.new_flat()
    codec.decode_into(part, enc, (out,))
    # -0.0 has its sign bit set: it decodes to -scale; +0.0 to +scale
    assert out.tolist() == [1.5, -1.5, 1.5, -1.5, 0.25, 0.25]


def test_sign_codec_matches_reference_on_random_orders():
    part = _partition()
    codec = SignCodec()
    rng = np.random.default_rng(0)
    acc = rng.standard_normal(part.n_elements).astype(np.float32) * 3
    acc[rng.integers(0, part.n_elements, 50)] = -0.0
    acc[rng.integers(0, part.n_elements, 50)] = 0.0
    scales = codec.tensor_scales(part, acc)
    bounds = zip(part.tensor_offset[:-1], part.tensor_offset[1:])
    ref_scales = [np.abs(acc[a:b].astype(np.float64)).mean() for a, b in bounds]
    np.testing.assert_allclose(scales, ref_scales, rtol=1e-6)
    for trial in range(10):
        order = rng.permutation(part.n_rows)
        if trial % 2:
            order = np.sort(order[: part.n_rows // 2])
        plan = _plan(part, codec, order, chunk_bytes=int(rng.choice([20, 200, 5000])))
        out = part.new_flat()
        for ch in plan.chunks:
            enc = codec.encode(part, acc, scales, ch)
            assert sorted(enc.rows()) == sorted(ch.rows()) and enc.n_rows == ch.n_rows
            assert bytes(enc.data) == _ref_pack(part, acc, enc.segments)
            codec.decode_into(part, enc, (out,))
        assert np.array_equal(out, _ref_decode(part, acc, scales, order))


@pytest.mark.parametrize("n_rows", [6, 120])  # small and large segment tables
def test_decoder_accepts_any_segment_order(n_rows):
    """A payload laid out in a foreign order (long rows first, descending ids) decodes the same."""
    part = _partition()
    codec = SignCodec()
    rng = np.random.default_rng(n_rows)
    acc = rng.standard_normal(part.n_elements).astype(np.float32)
    scales = codec.tensor_scales(part, acc)
    rows = np.concatenate([[part.n_rows - 3], rng.permutation(part.n_rows - 5)[: n_rows - 1]])  # a long row
    segs = part.segments(rows[np.argsort(-part.row_elements[rows], kind="stable")])
    foreign = EncodedChunk(segs, scales[part.row_tensor[segs[:, 0]]], _ref_pack(part, acc, segs))
    out = part.new_flat()
    codec.decode_into(part, foreign, (out,))
    assert np.array_equal(out, _ref_decode(part, acc, scales, rows))


# ---------------------------------------------------------------- error feedback
@pytest.mark.parametrize("codec", [SignCodec(), RawCodec()], ids=["sign", "raw"])
def test_error_feedback_accounting(codec):
    part = _partition()
    rng = np.random.default_rng(2)
    acc = (rng.standard_normal(part.n_elements) * 10.0 ** rng.uniform(-3, 1)).astype(np.float32)
    before = acc.copy()
    scales = codec.tensor_scales(part, acc)
    plan = _plan(part, codec, rng.permutation(part.n_rows), mandatory=60, chunk_bytes=100)
    delivered = plan.mandatory_chunks + 2
    decoded = part.new_flat()
    for ch in plan.chunks[:delivered]:
        enc = codec.encode(part, acc, scales, ch)
        codec.decode_into(part, enc, (decoded,))  # the receiver
        codec.commit(part, acc, enc)  # the sender, after the acknowledgement
    sent = np.zeros(part.n_elements, dtype=bool)
    sent[part.element_index(plan.rows(delivered))] = True
    # nothing lost, nothing doubled: acc_after + decoded == acc_before (one float32 rounding)
    tol = 2 * np.finfo(np.float32).eps * np.maximum(np.abs(before), np.abs(decoded))
    assert np.all(np.abs(acc.astype(np.float64) + decoded - before) <= tol)
    # undelivered rows are untouched bit for bit, and received nothing
    assert np.array_equal(acc[~sent].view(np.uint32), before[~sent].view(np.uint32))
    assert not decoded[~sent].any()


def test_commit_is_bit_identical_to_the_receivers_decode():
    part = _partition()
    codec = SignCodec()
    rng = np.random.default_rng(3)
    acc = rng.standard_normal(part.n_elements).astype(np.float32)
    scales = codec.tensor_scales(part, acc)
    for ch in _plan(part, codec, rng.permutation(part.n_rows), chunk_bytes=150).chunks:
        enc = codec.encode(part, acc, scales, ch)
        sender, receiver = part.new_flat(), part.new_flat()
        codec.commit(part, sender, enc)
        codec.decode_into(part, enc, (receiver,))
        idx = part.element_index(ch.rows())
        assert np.all(receiver[idx] != 0)
        assert np.array_equal((-sender[idx]).view(np.uint32), receiver[idx].view(np.uint32))


def test_raw_codec_is_exact():
    part = _partition()
    codec = RawCodec()
    rng = np.random.default_rng(4)
    acc = rng.standard_normal(part.n_elements).astype(np.float32)
    acc[::13] = -0.0
    before = acc.copy()
    plan = _plan(part, codec, rng.permutation(part.n_rows)[:100], chunk_bytes=2000)
    out = np.full(part.n_elements, -0.0, dtype=np.float32)  # -0.0 + x == x bit for bit, for every x
    for ch in plan.chunks:
        enc = codec.encode(part, acc, codec.tensor_scales(part, acc), ch)
        codec.decode_into(part, enc, (out,))
        codec.commit(part, acc, enc)
    sent = np.zeros(part.n_elements, dtype=bool)
    sent[part.element_index(plan.rows())] = True
    assert np.array_equal(out[sent].view(np.uint32), before[sent].view(np.uint32))  # -0.0 included
    assert np.all(acc[sent].view(np.uint32) == 0)  # exact +0.0
    assert np.array_equal(acc[~sent].view(np.uint32), before[~sent].view(np.uint32))


def test_repeated_steps_keep_the_residual_bounded():
    """Full pushes every step: per tensor, the residual after commit is |(|x| - s)| <= max|x|, and
    ||residual||^2 = ||x||^2 - ||x||_1^2 / n <= (1 - 1/n) ||x||^2 (Cauchy-Schwarz), so with
    gradients bounded by G it never exceeds q / (1 - q) * G * sqrt(n), q = sqrt(1 - 1/n).
    Over all steps, delivered + residual == sum of gradients (nothing lost)."""
    part = RowPartition.from_shapes([("a", (12, 100)), ("b", (30,)), ("c", (5, 211))])
    codec = SignCodec()
    rng = np.random.default_rng(5)
    acc = part.new_flat()
    delivered = np.zeros(part.n_elements)
    total_grad = np.zeros(part.n_elements)
    plan = _plan(part, codec, np.arange(part.n_rows), chunk_bytes=40)
    n = part.tensor_elements
    bound = np.sqrt(1 - 1 / n) / (1 - np.sqrt(1 - 1 / n)) * np.sqrt(n)  # times G = 1
    for _ in range(300):
        g = rng.uniform(-1, 1, part.n_elements).astype(np.float32)
        total_grad += g
        acc += g
        x = acc.astype(np.float64)
        scales = codec.tensor_scales(part, acc)
        for ch in plan.chunks:
            enc = codec.encode(part, acc, scales, ch)
            out = part.new_flat()
            codec.decode_into(part, enc, (out,))
            delivered += out
            codec.commit(part, acc, enc)
        for t in range(part.n_tensors):
            a, b = part.tensor_offset[t], part.tensor_offset[t + 1]
            xt, et = x[a:b], acc[a:b].astype(np.float64)
            assert np.abs(et).max() <= np.abs(xt).max() * (1 + 1e-6)
            assert (et**2).sum() <= (1 - 1 / n[t]) * (xt**2).sum() * (1 + 1e-5)
            assert np.sqrt((et**2).sum()) <= bound[t]
    np.testing.assert_allclose(delivered + acc, total_grad, atol=1e-3)


def test_decode_into_several_outs_and_weights():
    part = _partition()
    codec = SignCodec()
    rng = np.random.default_rng(6)
    acc = rng.standard_normal(part.n_elements).astype(np.float32)
    scales = codec.tensor_scales(part, acc)
    plan = _plan(part, codec, rng.permutation(part.n_rows), chunk_bytes=300)
    sign = np.where(np.signbit(acc), np.float32(-1), np.float32(1))
    per_elem_scale = np.repeat(scales.astype(np.float64), part.tensor_elements)
    for weight in (1.0, 0.25, -1.0, 3.0, 1 / 3):
        outs = [rng.standard_normal(part.n_elements).astype(np.float32) for _ in range(3)]
        starts = [o.copy() for o in outs]
        for ch in plan.chunks:
            codec.decode_into(part, codec.encode(part, acc, scales, ch), outs, weight)
        expected_delta = (per_elem_scale * weight).astype(np.float32) * sign  # float32(scale * w) * +-1
        for o, s in zip(outs, starts):
            assert np.array_equal(o, s + expected_delta)


def test_raw_decode_with_weights_and_several_outs():
    part = _partition()
    codec = RawCodec()
    rng = np.random.default_rng(7)
    acc = rng.standard_normal(part.n_elements).astype(np.float32)
    rows = rng.permutation(part.n_rows)[:90]
    outs = [part.new_flat(), part.new_flat()]
    for ch in _plan(part, codec, rows, chunk_bytes=500).chunks:
        codec.decode_into(part, codec.encode(part, acc, codec.tensor_scales(part, acc), ch), outs, 0.5)
    idx = part.element_index(rows)
    for o in outs:
        assert np.array_equal(o[idx], acc[idx] * np.float32(0.5))
        assert np.count_nonzero(o) == np.count_nonzero(acc[idx])


# ---------------------------------------------------------------- payload checks and errors
def test_payload_sizes_and_padding_check():
    sign, raw = SignCodec(), RawCodec()
    assert [sign.data_bytes(n) for n in (1, 8, 9, 16)] == [1, 1, 2, 2]
    assert raw.data_bytes(9) == 36
    assert sign.check_data(b"\x80", 1) is None
    assert "padding" in sign.check_data(b"\x40", 1)
    assert "bytes" in sign.check_data(b"\x00\x00", 1)
    assert "non-finite" in raw.check_data(np.array([1, np.nan], dtype="<f4").tobytes(), 2)


def test_encode_errors_are_clear():
    part = _partition()
    codec = SignCodec()
    acc = part.new_flat()
    ok = codec.tensor_scales(part, acc)
    chunk = ChunkSpec(np.array([[0, 3]]))
    with pytest.raises(ValueError, match="one per tensor"):
        codec.encode(part, acc, ok[:-1], chunk)
    bad = ok.copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="finite"):
        codec.encode(part, acc, bad, chunk)
    with pytest.raises(ValueError, match="acc must be a float32"):
        codec.encode(part, acc.astype(np.float64), ok, chunk)
    with pytest.raises(ValueError, match="empty chunk"):
        codec.encode(part, acc, ok, ChunkSpec(np.zeros((0, 2), dtype=np.int64)))
    for bad_segs, match in (([[0, 0]], "at least one row"), ([[149, 2]], "crosses"), ([[0, 3], [2, 1]], "overlap")):
        with pytest.raises(ValueError, match=match):
            codec.encode(part, acc, ok, ChunkSpec(np.array(bad_segs)))
    enc = codec.encode(part, acc, ok, chunk)
    with pytest.raises(ValueError, match=r"outs\[1\]"):
        codec.decode_into(part, enc, (acc, np.zeros(3, dtype=np.float32)))
    with pytest.raises(ValueError, match="unknown compression"):
        make_codec("zip")
    assert isinstance(make_codec("sign"), SignCodec) and isinstance(make_codec("none"), RawCodec)
