"""The chunk frame: round trip, corruption, truncation, bounds before allocation, hostile bodies."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_budget import examples

from rog.chunks import SMALL_TABLE, ChunkSpec, plan_chunks
from rog.codecs.compression import RawCodec, SignCodec
from rog.rows import RowPartition
from rog.wire import (
    HEADER,
    HEADER_BYTES,
    MAGIC,
    VERSION,
    FrameError,
    decode_body,
    decode_frame,
    encode_frame,
    frame_bytes,
    parse_header,
)


def _partition() -> RowPartition:
    # rows: a 0-9 (100 el), b 10 (7 el), c 11-30 (50 el), d 31-32 (600 el)
    return RowPartition.from_shapes([("a", (10, 100)), ("b", (7,)), ("c", (20, 50)), ("d", (2, 600))])


def _frame(part, codec, segs, seed=0, iteration=7, seq=3):
    rng = np.random.default_rng(seed)
    acc = rng.standard_normal(part.n_elements).astype(np.float32)
    enc = codec.encode(part, acc, codec.tensor_scales(part, acc), ChunkSpec(np.array(segs, dtype=np.int64)))
    return enc, encode_frame(enc, codec, iteration, seq)


def _forge(codec_id, segs, scales, data, n_seg=None, data_len=None, version=VERSION, magic=MAGIC, flags=0):
    """A frame with a valid crc around arbitrary (possibly hostile) contents."""
    table = b"".join(struct.pack("<IIf", f, n, s) for (f, n), s in zip(segs, scales))
    n_seg = len(segs) if n_seg is None else n_seg
    data_len = len(data) if data_len is None else data_len
    head = HEADER.pack(magic, version, codec_id, flags, 1, 0, n_seg, data_len, 0)[:-4]
    crc = zlib.crc32(table + data, zlib.crc32(head))
    return head + struct.pack("<I", crc) + table + data


# ---------------------------------------------------------------- round trip
@pytest.mark.parametrize("codec", [SignCodec(), RawCodec()], ids=["sign", "raw"])
def test_round_trip(codec):
    part = _partition()
    enc, frame = _frame(part, codec, [[2, 3], [10, 1], [31, 1], [20, 5]])
    assert len(frame) == frame_bytes(len(enc.segments), len(enc.data))
    header, got = decode_frame(frame, part, codec)
    assert (header.codec_id, header.iteration, header.seq, header.n_segments) == (codec.codec_id, 7, 3, 4)
    assert header.data_len == len(enc.data) and header.body_len == len(frame) - HEADER_BYTES
    assert np.array_equal(got.segments, enc.segments)
    assert np.array_equal(got.scales, enc.scales)
    assert bytes(got.data) == bytes(enc.data)
    for buf in (bytearray(frame), memoryview(frame)):  # any bytes-like input
        assert bytes(decode_frame(buf, part, codec)[1].data) == bytes(enc.data)


def test_iteration_wraps_and_seq_is_bounded():
    part = _partition()
    enc, _ = _frame(part, SignCodec(), [[0, 1]])
    frame = encode_frame(enc, SignCodec(), 2**32 + 5, 0)
    assert decode_frame(frame, part, SignCodec())[0].iteration == 5
    with pytest.raises(ValueError, match="seq"):
        encode_frame(enc, SignCodec(), 1, 2**32)


# ---------------------------------------------------------------- damage
def test_every_single_byte_corruption_is_rejected():
    """The crc covers header and body, so no damaged frame decodes; in particular none decodes to
    something other than the original."""
    part = _partition()
    codec = SignCodec()
    _, frame = _frame(part, codec, [[3, 2], [10, 1], [25, 3]])
    assert len(frame) < 200
    rng = np.random.default_rng(0)
    for pos in range(len(frame)):
        for mask in {0x01, 0x80, 0xFF, int(rng.integers(1, 256))}:
            bad = bytearray(frame)
            bad[pos] ^= mask
            with pytest.raises(FrameError):
                decode_frame(bytes(bad), part, codec)


def test_truncated_and_padded_frames_are_rejected():
    part = _partition()
    codec = SignCodec()
    _, frame = _frame(part, codec, [[0, 4], [31, 2]])
    for n in range(len(frame)):
        with pytest.raises(FrameError, match="truncated|header says"):
            decode_frame(frame[:n], part, codec)
    with pytest.raises(FrameError, match="header says"):
        decode_frame(frame + b"\x00", part, codec)


def test_oversized_lengths_are_rejected_before_allocation():
    part = _partition()
    codec = SignCodec()
    huge_data = HEADER.pack(MAGIC, VERSION, codec.codec_id, 0, 1, 0, 1, 2**32 - 1, 0)
    huge_segs = HEADER.pack(MAGIC, VERSION, codec.codec_id, 0, 1, 0, 2**32 - 1, 8, 0)
    whole_model = codec.data_bytes(part.n_elements)
    over_model = HEADER.pack(MAGIC, VERSION, codec.codec_id, 0, 1, 0, 1, whole_model + 1, 0)
    tracemalloc.start()
    try:
        for head, match in ((huge_data, "data length"), (huge_segs, "segment count"), (over_model, "data length")):
            with pytest.raises(FrameError, match=match):
                parse_header(head, part)
            with pytest.raises(FrameError, match=match):
                decode_frame(head, part, codec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # nothing near the claimed sizes was allocated
    # a tighter caller bound (e.g. the transport's chunk size) is honoured too
    _, frame = _frame(part, codec, [[0, 10]])
    with pytest.raises(FrameError, match="exceeds the bound 100"):
        decode_frame(frame, part, codec, max_data_len=100)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(magic=b"RGCX"), "magic"),
        (dict(version=VERSION + 1), "version"),
        (dict(codec_id=9), "unknown codec"),
        (dict(flags=1), "flags"),
        (dict(n_seg=0), "segment count"),
    ],
)
def test_bad_header_fields(fields, match):
    part = _partition()
    args = dict(codec_id=1, segs=[(0, 1)], scales=[1.0], data=b"\x00" * 13)
    args.update(fields)
    with pytest.raises(FrameError, match=match):
        decode_frame(_forge(**args), part, SignCodec())


def test_codec_mismatch_is_rejected():
    part = _partition()
    _, frame = _frame(part, RawCodec(), [[0, 1]])
    with pytest.raises(FrameError, match="this run uses"):
        decode_frame(frame, part, SignCodec())
    header = parse_header(frame, part)
    with pytest.raises(FrameError, match="body is"):
        decode_body(header, frame[HEADER_BYTES:-1], part, RawCodec())


@pytest.mark.parametrize(
    "segs, scales, data_len, match",
    [
        ([(33, 1)], [1.0], 1, "outside the model"),  # row 33 does not exist
        ([(32, 2)], [1.0], 150, "outside the model"),  # runs past the last row
        ([(0, 0)], [1.0], 0, "outside the model"),  # empty segment
        ([(9, 2)], [1.0], 14, "crosses a tensor"),  # rows 9 (a) and 10 (b)
        ([(2, 3), (4, 1)], [1.0, 1.0], 50, "twice"),  # row 4 twice
        ([(5, 1), (5, 1)], [1.0, 1.0], 25, "twice"),
        ([(0, 1)], [float("nan")], 13, "non-finite"),
        ([(0, 1)], [float("inf")], 13, "non-finite"),
        ([(0, 1)], [-0.5], 13, "negative"),
        ([(0, 1)], [1.0], 12, "need 13"),  # 100 sign bits need 13 bytes
        ([(0, 2)], [1.0], 26, "need 25"),
    ],
)
def test_hostile_bodies_with_valid_crc(segs, scales, data_len, match):
    part = _partition()
    frame = _forge(1, segs, scales, b"\x00" * data_len)
    with pytest.raises(FrameError, match=match):
        decode_frame(frame, part, SignCodec())


@pytest.mark.parametrize(
    "bad, match",
    [
        ((400, 1), "outside the model"),
        ((398, 3), "outside the model"),
        ((7, 0), "outside the model"),
        ((99, 2), "crosses a tensor"),  # rows 99 (a) and 100 (b)
        ((40, 1), "twice"),  # row 40 is already in the valid part
        ((39, 3), "twice"),  # overlaps row 40
    ],
)
def test_hostile_large_tables_with_valid_crc(bad, match):
    """Tables longer than SMALL_TABLE take the vectorised checks: same verdicts."""
    part = RowPartition.from_shapes([("a", (100, 30)), ("b", (300, 20))])
    valid = [(r, 1) for r in range(0, 2 * (SMALL_TABLE + 5), 2)]  # disjoint single rows of a
    segs = valid + [bad]
    frame = _forge(1, segs, [1.0] * len(segs), b"\x00" * 200)
    with pytest.raises(FrameError, match=match):
        decode_frame(frame, part, SignCodec())
    # the valid part alone decodes, and a NaN scale in a long table is caught too
    elems = 30 * len(valid)
    ok = decode_frame(_forge(1, valid, [1.0] * len(valid), b"\x00" * (elems // 8 + 1)), part, SignCodec())
    assert ok[1].n_rows == len(valid)
    nan_scales = [1.0] * (len(valid) - 1) + [float("nan")]
    with pytest.raises(FrameError, match="non-finite"):
        decode_frame(_forge(1, valid, nan_scales, b"\x00" * (elems // 8 + 1)), part, SignCodec())


def test_nonzero_padding_and_raw_nan_are_rejected():
    part = _partition()
    # row 10 has 7 elements: one byte whose last bit is padding
    with pytest.raises(FrameError, match="padding"):
        decode_frame(_forge(1, [(10, 1)], [1.0], b"\x01"), part, SignCodec())
    assert decode_frame(_forge(1, [(10, 1)], [1.0], b"\xfe"), part, SignCodec())[1].n_rows == 1
    vals = np.zeros(7, dtype="<f4")
    vals[3] = np.nan
    with pytest.raises(FrameError, match="non-finite"):
        decode_frame(_forge(0, [(10, 1)], [0.0], vals.tobytes()), part, RawCodec())


# ---------------------------------------------------------------- property test
@st.composite
def _cases(draw):
    n_tensors = draw(st.integers(1, 4))
    shapes = []
    for t in range(n_tensors):
        if draw(st.booleans()):
            shapes.append((f"t{t}", (draw(st.integers(1, 40)),)))
        else:
            shapes.append((f"t{t}", (draw(st.integers(2, 30)), draw(st.integers(30, 90)))))
    seed = draw(st.integers(0, 2**31 - 1))
    codec = draw(st.sampled_from(["sign", "raw"]))
    flip = (draw(st.integers(0, 10**6)), draw(st.integers(1, 255)))
    return shapes, seed, codec, flip


@pytest.mark.property
@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_property_round_trip_and_any_damage_rejected(case):
    shapes, seed, codec_name, (pos, mask) = case
    part = RowPartition.from_shapes(shapes)
    codec = SignCodec() if codec_name == "sign" else RawCodec()
    rng = np.random.default_rng(seed)
    acc = rng.standard_normal(part.n_elements).astype(np.float32)
    order = rng.permutation(part.n_rows)[: int(rng.integers(1, part.n_rows + 1))]
    plan = plan_chunks(part, order, 0, codec.row_wire_bytes(part), int(rng.integers(1, 400)))
    scales = codec.tensor_scales(part, acc)
    local, remote = part.new_flat(), part.new_flat()
    for seq, ch in enumerate(plan.chunks):
        enc = codec.encode(part, acc, scales, ch)
        frame = encode_frame(enc, codec, seq, seq)
        header, got = decode_frame(frame, part, codec)
        assert header.seq == seq and sorted(got.rows()) == sorted(ch.rows())
        codec.decode_into(part, enc, (local,))
        codec.decode_into(part, got, (remote,))
        bad = bytearray(frame)
        bad[pos % len(frame)] ^= mask
        with pytest.raises(FrameError):
            decode_frame(bytes(bad), part, codec)
    assert np.array_equal(local.view(np.uint32), remote.view(np.uint32))
    if codec_name == "raw":
        idx = part.element_index(order)
        assert np.array_equal(remote[idx], acc[idx])
