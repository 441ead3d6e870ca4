"""The torch Top-k codec: frames byte-identical to the host codec's, the same statistic, the same decode
and commit, on the CPU (always) and on a CUDA device (``gpu`` marker, skipped without one)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rog.codecs.codecs_topk import TopKCodec
from rog.codecs.device_codec_registry import make_device_codec
from rog.rows import RowPartition
from rog.wire import encode_frame
from tests.test_topk_codec import chunks_of

PART = RowPartition.from_shapes([("a", (20, 50)), ("b", (50,)), ("c", (25, 40)), ("d", (7,)), ("e", (3, 400))])
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ratio", [0.1, 0.01])
def test_frames_statistic_decode_and_commit_match_the_host_codec(device, ratio):
    rng = np.random.default_rng(5)
    acc = rng.standard_normal(PART.n_elements).astype(np.float32)
    host = TopKCodec(ratio=ratio, gate=True, delta=0.9)
    dev = make_device_codec("topk", device, ratio=ratio, gate=True, delta=0.9)
    host.decision = dev.decision = True
    t_acc = torch.from_numpy(acc.copy()).to(device)
    chunks = chunks_of(PART, 9)
    hs, ds = host.tensor_scales(PART, acc), dev.tensor_scales(PART, t_acc)
    np.testing.assert_array_equal(hs, ds)
    assert dev.statistic == pytest.approx(host.statistic, rel=1e-9)
    he, de = host.encode_many(PART, acc, hs, chunks), dev.encode_many(PART, t_acc, ds, chunks)
    assert [encode_frame(c, host, 1, i) for i, c in enumerate(he)] == [encode_frame(c, dev, 1, i) for i, c in enumerate(de)]
    out_h, out_d = np.zeros_like(acc), torch.zeros(PART.n_elements, device=device)
    host.decode_many(PART, he, (out_h,))
    dev.decode_many(PART, de, (out_d,))
    np.testing.assert_array_equal(out_h, out_d.cpu().numpy())
    for c in he:
        host.commit(PART, acc, c)
    for c in de:
        dev.commit(PART, t_acc, c)
    np.testing.assert_array_equal(acc, t_acc.cpu().numpy())  # the same residual, exactly
    assert np.count_nonzero(acc) < PART.n_elements  # something was sent and removed


def _train_one(backend: str, steps: int = 5) -> torch.Tensor:
    """One worker (numpy or torch flat backend) against a CPU PS, Top-k with the gate; the final model."""
    from torch import nn

    from rog.optim import ROGOptimizer, WorkerOptions
    from rog.policies import make_policy
    from rog.runtime import ParameterServer

    from conftest import run_ps_team

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(40, 30), nn.ReLU(), nn.Linear(30, 5))
    part = RowPartition.from_module(model)
    opts = dict(ratio=0.1, gate=True, delta=0.9, smoothing=0.5)
    ps = ParameterServer(part, 1, make_policy("BSP"), TopKCodec(ps_workers=1, **opts), join_timeout_s=30,
                         wait_timeout_s=30)

    def work(_k, link):
        opt = ROGOptimizer(model.parameters(), server=link, worker_id=0, lr=0.05, policy="BSP", compression="topk",
                           codec_options=opts, options=WorkerOptions(flat_backend=backend))
        g = torch.Generator().manual_seed(10)
        for _ in range(steps):
            x, y = torch.randn(16, 40, generator=g), torch.randint(0, 5, (16,), generator=g)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        assert opt.engine.codec.stats()["compressed"] >= 1
        opt.close()

    run_ps_team(ps, work, 1, worker_join_s=120.0)
    return torch.cat([q.detach().reshape(-1) for q in model.parameters()])


def test_torch_backend_worker_equals_numpy_worker_bit_for_bit_with_topk():
    assert torch.equal(_train_one("numpy"), _train_one("torch"))
