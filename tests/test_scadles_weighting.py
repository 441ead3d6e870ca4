"""Batch-weighted aggregation and the linear learning-rate rule through the real engine and parameter
server (in-process links): equal batches give exactly plain averaging; unequal batches give the
hand-computed sum_i b_i g_i / sum_i b_i, for BSP, SSP and ROG (rows held back keep their weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rog.codecs.compression import RawCodec
from rog.optim import ROGOptimizer
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import ParameterServer
from rog.streams import update_multiplier
from conftest import run_ps_team

LR = 0.1


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(40, 30), nn.Linear(30, 5))


def grads(worker, n, like):
    """A fixed gradient per worker and iteration, independent of the parameters."""
    g = torch.Generator().manual_seed(1000 * worker + n)
    return [torch.randn(p.shape, generator=g) for p in like]


def run_team(policy, threshold, batches, iterations, weighted=True, lr_scaling=False, b_ref=16, multiplier=True):
    """W workers in threads; returns (w0 flat, each worker's final flat parameters)."""
    W = len(batches)
    models = [model() for _ in range(W)]
    w0 = torch.cat([p.detach().reshape(-1) for p in models[0].parameters()]).numpy().copy()
    ps = ParameterServer(RowPartition.from_module(models[0]), W, make_policy(policy, threshold=threshold), RawCodec(),
                         join_timeout_s=20.0, wait_timeout_s=20.0)
    out = [None] * W

    def worker(k, link):
        m = models[k]
        opt = ROGOptimizer(m.parameters(), server=link, worker_id=k, lr=LR, policy=policy,
                           threshold=threshold, compression="none", momentum=0.0, nesterov=False,
                           weight_decay=0.0)
        if multiplier:
            opt.engine.local.lr_multiplier = update_multiplier(batches[k], batches, b_ref, weighted, lr_scaling)
        for n in range(1, iterations + 1):
            opt.zero_grad()
            for p, g in zip(m.parameters(), grads(k, n, list(m.parameters()))):
                p.grad = g
            opt.step()
        opt.close()
        out[k] = torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy().copy()

    run_ps_team(ps, worker, W)
    return w0, out


def hand_expected(w0, batches, iterations, lr_factor=1.0):
    """w0 - lr x lr_factor x sum_n sum_i b_i g_{i,n} / sum_i b_i (numpy, from the same fixed gradients)."""
    like = list(model().parameters())
    total = np.zeros_like(w0, dtype=np.float64)
    for k, b in enumerate(batches):
        for n in range(1, iterations + 1):
            total += b * torch.cat([g.reshape(-1) for g in grads(k, n, like)]).double().numpy()
    return w0 - LR * lr_factor * total / sum(batches)


def test_equal_batches_equal_plain_averaging_exactly():
    assert update_multiplier(24, [24, 24, 24], 16, weighted=True, lr_scaling=False) == 1.0
    w0, weighted = run_team("BSP", 0, [24, 24], 1, weighted=True, lr_scaling=False)
    _, plain = run_team("BSP", 0, [24, 24], 1, multiplier=False)
    for a, b in zip(weighted, plain):
        assert np.array_equal(a, b)  # bit for bit


@pytest.mark.parametrize("policy,threshold", [("BSP", 0), ("SSP", 2), ("ROG", 2)])
def test_unequal_batches_hand_computed(policy, threshold):
    batches = [8, 24, 40]
    w0, out = run_team(policy, threshold, batches, 3, weighted=True, lr_scaling=False)
    want = hand_expected(w0, batches, 3)
    for w in out:
        np.testing.assert_allclose(w, want, rtol=0, atol=2e-5)
    # and it differs from plain averaging by far more than that tolerance
    plain = hand_expected(w0, [1, 1, 1], 3)
    assert np.abs(want - plain).max() > 1e-2


def test_linear_lr_rule_multiplies_by_batch_sum_over_reference():
    batches, b_ref = [8, 24], 16
    w0, out = run_team("BSP", 0, batches, 2, weighted=True, lr_scaling=True, b_ref=b_ref)
    want = hand_expected(w0, batches, 2, lr_factor=sum(batches) / (b_ref * len(batches)))
    for w in out:
        np.testing.assert_allclose(w, want, rtol=0, atol=2e-5)
    # lr scaling alone (ablation): plain average x sum b / (b_ref W)
    w0, out = run_team("BSP", 0, [8, 40], 1, weighted=False, lr_scaling=True, b_ref=16)
    want = hand_expected(w0, [1, 1], 1, lr_factor=48 / 32)
    np.testing.assert_allclose(out[0], want, rtol=0, atol=2e-5)
