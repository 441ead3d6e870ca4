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
