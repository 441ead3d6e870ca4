"""The fused device codec on CPU tensors: frames, error feedback and pull apply equal the numpy codec's bit
for bit on a model with many tensors, and its operation count does not grow with the number of tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rog.chunks import plan_chunks
from rog.codecs.compression import RawCodec, SignCodec
from rog.codecs.device_codec import TorchRawCodec, TorchSignCodec
from rog.codecs.device_fused import FusedBlockSums, segment_index
from rog.rows import RowPartition, ranges_index
from rog.scales import block_sums_abs_numpy
from rog.wire import encode_frame, encode_frames


def _many_tensor_shapes(blocks: int) -> list:
    """ConvMLP-like layout: per block a conv, norms, two MLP matrices and biases (7 tensors), then tensors
    that make blocks of every kind: two full 65,536-element blocks plus a tail, a 30,000-element tensor
    and a bias in the last 65,536 (resp. 4,096) elements of the buffer (their fold windows run past its end)."""
    shapes = [("stem", (24, 3, 3, 3))]
    for b in range(blocks):
        c = 16 + 8 * (b % 5)
        shapes += [(f"b{b}.conv", (c, 1, 3, 3)), (f"b{b}.n1w", (c,)), (f"b{b}.n1b", (c,)),
                   (f"b{b}.fc1", (3 * c, c)), (f"b{b}.fc1b", (3 * c,)), (f"b{b}.fc2", (c, 3 * c)), (f"b{b}.fc2b", (c,))]
    shapes += [("big", (2 * 65536 + 777,)), ("mid", (300, 100)), ("head.b", (10,))]
    return shapes


def _apply_pull(codec, part, enc, w):
    if isinstance(codec, (SignCodec, RawCodec)) and not hasattr(codec, "device"):
        for c in enc:
            codec.decode_into(part, c, (w,), -1.0 / 3)
    else:
        codec.decode_many(part, enc, (w,), -1.0 / 3)


def push_commit_pull_equal(cn, ct, part, accs, weights, order, it, mandatory_rows, chunk_bytes, min_chunks, delivered):
    """One iteration through the numpy codec ``cn`` and the device codec ``ct`` from equal accumulators ``accs``
    (numpy, torch): scales, the frames of every chunk of ``order``, the commit of the first ``delivered(n)`` of the
    n chunks (a cut push: error feedback keeps the rest) and the pull into ``weights`` must agree byte for byte."""
    acc_n, acc_t = accs
    w_n, w_t = weights
    s_n, s_t = cn.tensor_scales(part, acc_n), ct.tensor_scales(part, acc_t)
    assert s_n.tobytes() == s_t.tobytes()
    cp = plan_chunks(part, order, mandatory_rows, cn.row_wire_bytes(part), chunk_bytes)
    assert len(cp.chunks) >= min_chunks
    e_n = [cn.encode(part, acc_n, s_n, c) for c in cp.chunks]
    e_t = ct.encode_many(part, acc_t, s_t, cp.chunks)
    frames_n = [encode_frame(c, cn, it, i) for i, c in enumerate(e_n)]
    assert frames_n == [encode_frame(c, ct, it, i) for i, c in enumerate(e_t)]
    e_f, frames_f = encode_frames(ct, part, acc_t, s_t, cp.chunks, it)  # crc32 on the device where kernels run
    assert frames_f == frames_n
    assert [(c.segments.tobytes(), c.scales.tobytes(), bytes(c.data)) for c in e_f] == \
           [(c.segments.tobytes(), c.scales.tobytes(), bytes(c.data)) for c in e_n]
    e_t = e_f  # the commit below reads the framed chunks' data (views of their frames on the kernel path)
    k = delivered(len(e_n))
    for c in e_n[:k]:
        cn.commit(part, acc_n, c)
    ct.decode_many(part, e_t[:k], (acc_t,), -1.0)
    assert acc_n.tobytes() == acc_t.cpu().numpy().tobytes()
    _apply_pull(cn, part, e_n, w_n)
    _apply_pull(ct, part, e_n, w_t)
    assert w_n.tobytes() == w_t.cpu().numpy().tobytes()


_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch sees none")]


@pytest.mark.parametrize("device,kernels", [("cpu", None), pytest.param("cuda", None, marks=_GPU, id="cuda-kernels"),
                                            pytest.param("cuda", False, marks=_GPU, id="cuda-torch-ops")])
@pytest.mark.parametrize("codec_name", ["sign", "none"])
def test_fused_codec_equals_numpy_over_5_iterations_with_error_feedback(codec_name, device, kernels):
    """On CUDA with cupy, ``kernels=None`` runs the CUDA kernels of rog.codecs.device_kernels; ``False`` the torch operations."""
    part = RowPartition.from_shapes(_many_tensor_shapes(32))
    assert part.n_tensors == 1 + 7 * 32 + 3  # 228: as many tensors as ConvMLP-M (226)
    cn = SignCodec() if codec_name == "sign" else RawCodec()
    ct = (TorchSignCodec if codec_name == "sign" else TorchRawCodec)(device, kernels=kernels)
    assert ct.fused
    rng = np.random.default_rng(7)
    acc_n = np.zeros(part.n_elements, dtype=np.float32)
    w_n = rng.standard_normal(part.n_elements).astype(np.float32)
    acc_t, w_t = torch.zeros(part.n_elements, device=device), torch.from_numpy(w_n.copy()).to(device)
    for it in range(1, 6):
        u = (rng.standard_normal(part.n_elements) * np.exp(rng.uniform(-12, 2, part.n_elements))).astype(np.float32)
        u[part.tensor_offset[3] : part.tensor_offset[4]] = 0.0  # a tensor of zeros (scale 0)
        u[rng.integers(0, part.n_elements, 50)] = -0.0
        acc_n += u
        acc_t += torch.from_numpy(u).to(device)
        # odd iterations: a fragmented order (short segments, chunks padded mid-batch); even: every row in order
        order = rng.permutation(part.n_rows) if it % 2 else np.arange(part.n_rows)
        push_commit_pull_equal(cn, ct, part, (acc_n, acc_t), (w_n, w_t), order, it, part.n_rows // 4, 3001,
                               min_chunks=6, delivered=lambda n: n - it)


def test_fused_block_sums_are_the_numpy_tree_and_windows_past_the_end_are_used():
    part = RowPartition.from_shapes(_many_tensor_shapes(5))
    rng = np.random.default_rng(1)
    flat = (rng.standard_normal(part.n_elements) * np.exp(rng.uniform(-30, 30, part.n_elements))).astype(np.float32)
    fb = FusedBlockSums(part, "cpu")
    assert any(tail is not None for _, _, tail, _, _, _ in fb.tiers)  # the end-of-buffer path is exercised
    got = np.empty(len(fb.order), dtype=np.float32)
    got[fb.order] = fb(torch.from_numpy(flat.copy())).numpy()
    ref, _ = block_sums_abs_numpy(flat, part.tensor_offset)
    assert got.tobytes() == ref.tobytes()
    tiny = RowPartition.from_shapes([("a", (3, 5)), ("b", (7,))])  # a buffer shorter than every fold width
    x = rng.standard_normal(tiny.n_elements).astype(np.float32)
    fbt = FusedBlockSums(tiny, "cpu")
    out = np.empty(len(fbt.order), dtype=np.float32)
    out[fbt.order] = fbt(torch.from_numpy(x.copy())).numpy()
    assert out.tobytes() == block_sums_abs_numpy(x, tiny.tensor_offset)[0].tobytes()


def test_segment_index_is_the_concatenated_ranges():
    first = np.array([100, 5, 0, 7, 3_000_000_000], dtype=np.int64)
    lens = np.array([3, 0, 4, 1, 2], dtype=np.int64)
    got = segment_index(first, lens, int(lens.sum()), lambda a: torch.from_numpy(np.array(a))).numpy()
    assert got.tolist() == [100, 101, 102, 0, 1, 2, 3, 7, 3_000_000_000, 3_000_000_001]
    assert got.tolist() == ranges_index(first, lens).tolist()


def test_segment_of_element_is_each_elements_segment_number():
    lens = np.array([0, 3, 1, 0, 0, 4, 2], dtype=np.int64)
    got = TorchSignCodec("cpu")._segment_of_element(lens, int(lens.sum())).tolist()
    assert got == np.repeat(np.arange(len(lens)), lens).tolist() == [1, 1, 1, 2, 5, 5, 5, 5, 6, 6]
    assert TorchSignCodec("cpu")._segment_of_element(np.zeros(2, dtype=np.int64), 0).tolist() == []


class _OpCount(TorchDispatchMode):
    """Counts aten operations and the tensor operands they are handed (a list of tensors counts each)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.operands = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        for a in list(args) + list((kwargs or {}).values()):
            if isinstance(a, torch.Tensor):
                self.operands += 1
            elif isinstance(a, (list, tuple)):
                self.operands += sum(isinstance(t, torch.Tensor) for t in a)
        return func(*args, **(kwargs or {}))


def _count_push_pull(blocks: int, fused: bool) -> tuple[int, int]:
    part = RowPartition.from_shapes(_many_tensor_shapes(blocks))
    codec, cn = TorchSignCodec("cpu", fused=fused), SignCodec()
    acc = torch.from_numpy(np.random.default_rng(0).standard_normal(part.n_elements).astype(np.float32))
    flat = torch.zeros(part.n_elements)
    cp = plan_chunks(part, np.arange(part.n_rows), part.n_rows, cn.row_wire_bytes(part), part.n_elements // 64)

    def push_pull():
        enc = codec.encode_many(part, acc, codec.tensor_scales(part, acc), cp.chunks)
        codec.decode_many(part, enc, (flat,), -0.25)

    push_pull()  # warm: per-layout caches are built once
    acc.add_(1.0)  # new values: the scales are computed again
    with _OpCount() as m:
        push_pull()
    return m.ops, m.operands


def test_fused_operation_count_does_not_grow_with_the_tensor_count():
    """8 vs 64 blocks (60 vs 452 tensors): the fused push + pull issues the same operations on the same
    number of tensor operands; the earlier path's block gather takes about 2 operands per block."""
    small, large = _count_push_pull(8, True), _count_push_pull(64, True)
    assert small == large
    old_small, old_large = _count_push_pull(8, False), _count_push_pull(64, False)
    assert old_large[1] - old_small[1] > 56 * 7  # at least one more operand per added tensor


def test_payload_order_of_a_batch_equals_each_chunks_own():
    """payload_order_many (one vectorised pass) lays out every chunk as _payload_order does, chunk by chunk, and
    refuses a chunk that lists a row twice."""
    from rog.codecs.compression import _payload_order, payload_order_many

    part = RowPartition.from_shapes(_many_tensor_shapes(6))
    cn = SignCodec()
    rng = np.random.default_rng(5)
    for trial in range(6):
        order = rng.permutation(part.n_rows) if trial % 2 else np.arange(part.n_rows)
        cp = plan_chunks(part, order, part.n_rows // 3, cn.row_wire_bytes(part), int(rng.integers(300, 5000)))
        segs, counts = payload_order_many(part, cp.chunks)
        ref = [_payload_order(part, ch)[0] for ch in cp.chunks]
        assert counts.tolist() == [len(r) for r in ref] and np.array_equal(segs, np.concatenate(ref))
    r = int(np.flatnonzero(part.row_tensor[:-2] == part.row_tensor[2:])[0])  # a tensor with 3 rows from r on
    bad = type(cp.chunks[0])(np.array([[r, 2], [r + 1, 1]]))
    with pytest.raises(ValueError, match="lists a row twice"):
        payload_order_many(part, [bad])
