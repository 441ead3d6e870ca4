"""The device codec's CUDA kernels (rog.codecs.device_kernels): on a GPU, block sums and the DEFSGDM update equal the
numpy reference bit for bit; everywhere, the host-side tables and the errors when the kernels cannot run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rog.chunks import plan_chunks
from rog.device.torch_update import TorchLocalUpdate
from rog.codecs.device_codec import TorchSignCodec
from rog.codecs.device_kernels import cupy_or_none, kernels_for, segment_table
from rog.local_update import LocalUpdate, LocalUpdateConfig
from rog.rows import RowPartition
from rog.scales import block_sums_abs_numpy

_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch sees none")]


def test_segment_table_keeps_the_segments_that_own_bits_in_payload_order():
    start = np.array([10, 99, 0, 500])
    pos = np.array([0, 3, 3, 8])
    lens = np.array([3, 0, 5, 2])
    t = segment_table(start, pos, lens)
    assert t.dtype == np.int64 and t.tolist() == [[10, 0, 500], [0, 3, 8], [3, 5, 2]]


def test_kernels_need_cupy_and_a_cuda_device():
    assert kernels_for("cpu", object()) is None
    assert kernels_for("cuda:0", None) is None
    assert TorchSignCodec("cpu").packer == "torch"
    with pytest.raises(ValueError, match="kernels=True needs cupy"):
        TorchSignCodec("cpu", kernels=True)
    with pytest.raises(ValueError, match="kernels=True needs cupy"):
        TorchLocalUpdate(8, None, "cpu", kernels=True)


def _kernels_or_skip():
    cp = cupy_or_none()
    if cp is None:
        pytest.skip("the gpu extra (cupy) is not installed")
    return kernels_for("cuda", cp)


@pytest.mark.parametrize("n", [1, 3, 1000, 1024, 1025, 4096, 40_000, 65_536, 65_537, 3 * 65_536 + 5])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch sees none")
def test_block_sums_kernel_is_the_numpy_tree(n):
    """Tensors of every block width (narrower and wider than the kernel's 1,024 threads, full and partial
    65,536-element blocks), values over 60 binary orders of magnitude: every block sum's bits equal numpy's."""
    k = _kernels_or_skip()
    part = RowPartition.from_shapes([("a", (7,)), ("t", (n,)), ("b", (2, 3))])
    rng = np.random.default_rng(n)
    flat = (rng.standard_normal(part.n_elements) * np.exp(rng.uniform(-20, 20, part.n_elements))).astype(np.float32)
    ref, _ = block_sums_abs_numpy(flat, part.tensor_offset)
    codec = TorchSignCodec("cuda")
    assert codec.packer == "kernels"
    got = codec._block_sums(part, torch.from_numpy(flat).cuda())
    assert got.tobytes() == ref.tobytes()
    assert k is codec._kernels  # compiled once per device


@pytest.mark.parametrize("nesterov,weight_decay,momentum", [(True, 1e-4, 0.9), (False, 0.0, 0.9), (False, 5e-4, 0.0)])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch sees none")
def test_defsgdm_kernel_equals_numpy_over_5_iterations(nesterov, weight_decay, momentum):
    _kernels_or_skip()
    n = 300_001
    cfg = LocalUpdateConfig(lr=0.05, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov)
    ref, dev = LocalUpdate(n, cfg), TorchLocalUpdate(n, cfg, "cuda")
    assert dev._kernels is not None
    rng = np.random.default_rng(3)
    w = rng.standard_normal(n).astype(np.float32)
    w_d = torch.from_numpy(w.copy()).cuda()
    for it in range(1, 6):
        g = (rng.standard_normal(n) * np.exp(rng.uniform(-10, 3, n))).astype(np.float32)
        u_n = ref.step(g, w, it)
        u_d = dev.step(torch.from_numpy(g).cuda(), w_d, it)
        assert u_n.tobytes() == u_d.cpu().numpy().tobytes()
        assert ref.momentum_buf.tobytes() == dev.momentum_buf.cpu().numpy().tobytes()
        w -= u_n
        w_d -= u_d


@pytest.fixture(scope="module")
def cpu_kernels(tmp_path_factory):
    from kernels_cpu import CpuKernels, compile_kernels

    return CpuKernels(compile_kernels(tmp_path_factory.mktemp("kernels")))


def test_kernel_source_on_the_cpu_equals_numpy_with_error_feedback(cpu_kernels):
    """The CUDA source itself, compiled for the CPU (tests/kernels_cpu.py) and driven through the codec and the
    local update: scales (a tensor of one full 65,536-element block and a tail, so the per-thread stack runs),
    frames of padded chunks in a fragmented order, the committed prefix and the pull equal numpy's bit for bit."""
    from test_device_fused import push_commit_pull_equal

    from rog.codecs.compression import SignCodec

    part = RowPartition.from_shapes([("c", (16, 3, 3, 3)), ("w", (300, 70)), ("b", (300,)), ("big", (65_536 + 777,)),
                                     ("n", (5,)), ("h", (10, 300))])
    cn, ct = SignCodec(), TorchSignCodec("cpu")
    ct._kernels = cpu_kernels
    cfg = LocalUpdateConfig(lr=0.05, weight_decay=1e-4)
    lu_n, lu_t = LocalUpdate(part.n_elements, cfg), TorchLocalUpdate(part.n_elements, cfg, "cpu")
    lu_t._kernels = cpu_kernels
    rng = np.random.default_rng(11)
    w = rng.standard_normal(part.n_elements).astype(np.float32)
    w_t = torch.from_numpy(w.copy())
    acc_n, acc_t = np.zeros_like(w), torch.zeros(part.n_elements)
    for it in (1, 2):
        g = (rng.standard_normal(part.n_elements) * np.exp(rng.uniform(-12, 3, part.n_elements))).astype(np.float32)
        g[rng.integers(0, part.n_elements, 40)] = -0.0
        u_n, u_t = lu_n.step(g, w, it), lu_t.step(torch.from_numpy(g.copy()), w_t, it)
        assert u_n.tobytes() == u_t.numpy().tobytes() and lu_n.momentum_buf.tobytes() == lu_t.momentum_buf.numpy().tobytes()
        acc_n += u_n
        acc_t += u_t
        order = np.arange(part.n_rows) if it == 1 else rng.permutation(part.n_rows)
        push_commit_pull_equal(cn, ct, part, (acc_n, acc_t), (w, w_t), order, it, part.n_rows // 3, 2999,
                               min_chunks=4, delivered=lambda n: n - 1)


def test_kernel_source_on_the_cpu_defsgdm_without_nesterov_or_momentum(cpu_kernels):
    n = 5_003
    rng = np.random.default_rng(5)
    for cfg in (LocalUpdateConfig(lr=0.1, nesterov=False, weight_decay=0.0),
                LocalUpdateConfig(lr=0.1, momentum=0.0, nesterov=False, weight_decay=3e-4)):
        ref, dev = LocalUpdate(n, cfg), TorchLocalUpdate(n, cfg, "cpu")
        dev._kernels = cpu_kernels
        p = rng.standard_normal(n).astype(np.float32)
        for it in (1, 2, 3):
            g = rng.standard_normal(n).astype(np.float32)
            assert ref.step(g, p, it).tobytes() == dev.step(torch.from_numpy(g), torch.from_numpy(p), it).numpy().tobytes()
        assert ref.momentum_buf.tobytes() == dev.momentum_buf.numpy().tobytes()


def test_kernel_source_on_the_cpu_frame_crc_equals_zlib(cpu_kernels):
    """The crc kernel (one block per chunk, per-thread runs moved past the bytes after them) gives
    ``zlib.crc32(chunk, seed)`` for empty, shorter-than-a-block, block-sized and long chunks at odd offsets."""
    import zlib

    rng = np.random.default_rng(3)
    lens = [0, 1, 5, 255, 256, 257, 70_001]
    gaps = rng.integers(0, 9, len(lens))
    first = np.cumsum(np.array(lens) + gaps) - np.array(lens)
    data = rng.integers(0, 256, int(first[-1] + lens[-1] + 3), dtype=np.uint8)
    seeds = rng.integers(0, 1 << 32, len(lens), dtype=np.uint64).astype(np.uint32)
    out = torch.zeros(len(lens), dtype=torch.int32)
    cpu_kernels.frame_crc(torch.from_numpy(data), torch.as_tensor(first, dtype=torch.int64),
                          torch.as_tensor(lens, dtype=torch.int64), torch.from_numpy(seeds.view(np.int32)), len(lens), out)
    want = [zlib.crc32(data[f : f + n].tobytes(), int(s)) for f, n, s in zip(first.tolist(), lens, seeds.tolist())]
    assert out.numpy().view(np.uint32).tolist() == want


def test_crc_zero_matrices_move_a_register_past_zero_bytes():
    """Row k of the matrices moves a raw crc32 register past 2^k zero bytes: checked against zlib over zeros."""
    import zlib

    from rog.codecs.device_kernels import crc_zero_matrices

    m = crc_zero_matrices()
    for k in (0, 3, 10, 16):
        for seed in (0x12345678, 0xFFFFFFFF, 1):
            v, reg = 0, ~seed & 0xFFFFFFFF
            for i in range(32):
                if reg >> i & 1:
                    v ^= int(m[k, i])
            assert zlib.crc32(bytes(1 << k), seed) == ~v & 0xFFFFFFFF


@pytest.mark.parametrize("n", [0, 3, 256, 100_003], ids=lambda n: f"{n}B")
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch sees none")
def test_frame_crc_kernel_equals_zlib(n):
    import zlib

    k = _kernels_or_skip()
    dev = k.device
    rng = np.random.default_rng(n)
    data = rng.integers(0, 256, n + 11, dtype=np.uint8)
    first, lens, seeds = np.array([0, 7]), np.array([n, 4]), np.array([0xDEADBEEF, 0], dtype=np.uint32)
    out = torch.zeros(2, dtype=torch.int32, device=dev)
    k.frame_crc(torch.from_numpy(data).to(dev), torch.as_tensor(first, device=dev), torch.as_tensor(lens, device=dev),
                torch.from_numpy(seeds.view(np.int32)).to(dev), 2, out)
    want = [zlib.crc32(data[f : f + m].tobytes(), int(s)) for f, m, s in zip(first.tolist(), lens.tolist(), seeds.tolist())]
    assert out.cpu().numpy().view(np.uint32).tolist() == want


def _finite_cases():
    rng = np.random.default_rng(4)
    base = (rng.standard_normal(70_001) * 1e30).astype(np.float32)
    base[::997] = np.float32(3.4e38)  # the largest finite values, denormals and negative zero stay finite
    base[1::991] = np.float32(1e-45)
    base[2] = -0.0
    cases = [(base, True)]
    for bad, at in ((np.inf, 0), (-np.inf, 70_000), (np.nan, 12_345)):
        x = base.copy()
        x[at] = bad
        cases.append((x, False))
    return cases


def test_kernel_source_on_the_cpu_finiteness_scan(cpu_kernels):
    """The finiteness kernel (a grid-stride scan) agrees with numpy on finite extremes, +-inf and NaN at either end."""
    for x, want in _finite_cases():
        assert cpu_kernels.all_finite(torch.from_numpy(x)) is want == bool(np.isfinite(x).all())


def test_kernel_source_on_the_cpu_defsgdm_accumulates_in_its_pass(cpu_kernels):
    """``step_accumulate`` on the kernels (``acc += u`` in the update's pass, ``u`` not written) leaves the accumulator
    and the momentum buffer equal to numpy's ``acc += step(...)``, bit for bit."""
    n = 9_001
    rng = np.random.default_rng(8)
    cfg = LocalUpdateConfig(lr=0.05, weight_decay=1e-4)
    ref, dev = LocalUpdate(n, cfg), TorchLocalUpdate(n, cfg, "cpu")
    dev._kernels = cpu_kernels
    p = rng.standard_normal(n).astype(np.float32)
    acc_n, acc_t = np.zeros(n, dtype=np.float32), torch.zeros(n)
    for it in (1, 2, 3):
        g = (rng.standard_normal(n) * np.exp(rng.uniform(-10, 3, n))).astype(np.float32)
        acc_n += ref.step(g, p, it)
        assert dev.step_accumulate(torch.from_numpy(g), torch.from_numpy(p), it, acc_t, want_u=False) is None
    assert acc_n.tobytes() == acc_t.numpy().tobytes()
    assert ref.momentum_buf.tobytes() == dev.momentum_buf.numpy().tobytes()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch sees none")
def test_finiteness_kernel_on_the_gpu():
    k = _kernels_or_skip()
    for x, want in _finite_cases():
        assert k.all_finite(torch.from_numpy(x).to(k.device)) is want


def test_kernel_writes_are_seen_by_the_scales_cache(cpu_kernels):
    """Kernels write through raw pointers, which torch's version counter does not see; the kernels bump it, so the
    codec's per-tensor scales (cached on the buffer's version) follow a fused update and a commit, as numpy's do."""
    from rog.codecs.compression import SignCodec

    part = RowPartition.from_shapes([("w", (40, 30)), ("b", (40,)), ("h", (7, 40))])
    cfg = LocalUpdateConfig(lr=0.1)
    lu_n, lu_t = LocalUpdate(part.n_elements, cfg), TorchLocalUpdate(part.n_elements, cfg, "cpu")
    lu_t._kernels = cpu_kernels
    cn, ct = SignCodec(), TorchSignCodec("cpu")
    ct._kernels = cpu_kernels
    rng = np.random.default_rng(2)
    w = rng.standard_normal(part.n_elements).astype(np.float32)
    acc_n, acc_t = np.zeros_like(w), torch.zeros(part.n_elements)
    cp = plan_chunks(part, np.arange(part.n_rows), part.n_rows, cn.row_wire_bytes(part), 400)
    for it in (1, 2, 3):
        g = rng.standard_normal(part.n_elements).astype(np.float32)
        acc_n += lu_n.step(g, w, it)
        lu_t.step_accumulate(torch.from_numpy(g), torch.from_numpy(w.copy()), it, acc_t, want_u=False)
        s_n, s_t = cn.tensor_scales(part, acc_n), ct.tensor_scales(part, acc_t)
        assert s_n.tobytes() == s_t.tobytes()
        e_n = [cn.encode(part, acc_n, s_n, c) for c in cp.chunks]
        for c in e_n[:2]:
            cn.commit(part, acc_n, c)
        ct.decode_many(part, e_n[:2], (acc_t,), -1.0)
        assert cn.tensor_scales(part, acc_n).tobytes() == ct.tensor_scales(part, acc_t).tobytes()
