"""The device codec's CUDA kernels (rog.device_kernels): on a GPU, block sums and the DEFSGDM update equal the
numpy reference bit for bit; everywhere, the host-side tables and the errors when the kernels cannot run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rog.device import TorchLocalUpdate
from rog.device_codec import TorchSignCodec
from rog.device_kernels import cupy_or_none, kernels_for, segment_table
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

    from rog.compression import SignCodec

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
