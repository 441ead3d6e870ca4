"""The worker-side DEFSGDM rule against hand values and torch.optim.SGD."""

import numpy as np
import pytest
import torch

from rog.local_update import (
    PAPER_MILESTONES,
    LocalUpdate,
    LocalUpdateConfig,
    StepHalving,
    defsgdm_update,
)


def test_defaults_are_the_papers():
    c = LocalUpdateConfig()
    assert (c.lr, c.momentum, c.nesterov, c.weight_decay) == (1e-6, 0.9, True, 5e-4)
    assert c.milestones == ()  # the artifact's step halving is the experiment's scheduler, not a library default
    assert PAPER_MILESTONES == (800, 1600, 2400, 3200)


def test_step_halving_by_hand():
    s = StepHalving(1.0, (3, 5))
    assert [s(n) for n in range(1, 8)] == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.25]
    paper = StepHalving(1e-6)
    assert paper(799) == 1e-6
    assert paper(800) == 0.5e-6
    assert paper(1600) == 0.25e-6
    assert paper(3200) == 1e-6 / 16
    assert paper(10**6) == 1e-6 / 16
    assert StepHalving(0.3, ())(10**9) == 0.3


def test_two_steps_by_hand():
    # g = [1, -2], w = [10, 20], wd = 0.1, momentum 0.5, lr 0.1, nesterov
    # step 1: d = [2, 0]; m = [2, 0]; dir = d + 0.5 m = [3, 0]; u = [0.3, 0]
    # step 2 (same g, w): d = [2, 0]; m = 0.5*[2,0] + [2,0] = [3, 0]; dir = [3.5, 0]; u = [0.35, 0]
    lu = LocalUpdate(2, LocalUpdateConfig(lr=0.1, momentum=0.5, weight_decay=0.1, milestones=()))
    g = np.array([1.0, -2.0], dtype=np.float32)
    w = np.array([10.0, 20.0], dtype=np.float32)
    np.testing.assert_allclose(lu.step(g, w, 1), [0.3, 0.0], atol=1e-7)
    np.testing.assert_allclose(lu.step(g, w, 2), [0.35, 0.0], atol=1e-7)
    np.testing.assert_allclose(lu.momentum_buf, [3.0, 0.0], atol=1e-7)
    # inputs untouched
    assert g.tolist() == [1.0, -2.0] and w.tolist() == [10.0, 20.0]


def test_heavy_ball_and_plain_sgd_by_hand():
    g = np.array([1.0, 4.0], dtype=np.float32)
    w = np.zeros(2, dtype=np.float32)
    m = np.array([2.0, 0.0], dtype=np.float32)
    # heavy ball: m = 0.5*[2,0] + [1,4] = [2, 4]; u = 0.1 * m
    u = defsgdm_update(g, w, m, lr=0.1, momentum=0.5, weight_decay=0.0, nesterov=False)
    np.testing.assert_allclose(u, [0.2, 0.4], atol=1e-7)
    np.testing.assert_allclose(m, [2.0, 4.0])
    m0 = np.zeros(2, dtype=np.float32)
    u = defsgdm_update(g, w + 1, m0, lr=0.5, momentum=0.0, weight_decay=1.0, nesterov=False)
    np.testing.assert_allclose(u, [1.0, 2.5])  # 0.5 * (g + w)
    assert not m0.any()


@pytest.mark.parametrize("nesterov", [True, False])
def test_matches_torch_sgd_with_schedule(nesterov):
    rng = np.random.default_rng(0)
    n, steps = 257, 12
    cfg = LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=nesterov, weight_decay=5e-4, milestones=(4, 9))
    w0 = rng.standard_normal(n).astype(np.float32)
    grads = rng.standard_normal((steps, n)).astype(np.float32)

    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = torch.optim.SGD([p], lr=cfg.lr, momentum=cfg.momentum, nesterov=nesterov, weight_decay=cfg.weight_decay)
    lu = LocalUpdate(n, cfg)
    w = w0.copy()
    for k in range(steps):
        it = k + 1
        for group in opt.param_groups:
            group["lr"] = StepHalving(cfg.lr, cfg.milestones)(it)
        # make the gradient depend on the parameters, as a real one does
        g = grads[k] + 0.3 * w
        p.grad = torch.from_numpy(grads[k]) + 0.3 * p.detach()
        opt.step()
        w -= lu.step(g, w, it)
        np.testing.assert_allclose(w, p.detach().numpy(), rtol=2e-6, atol=2e-6)
    assert lu.lr_at(steps) == cfg.lr / 4


def test_out_buffer_and_accumulation():
    lu = LocalUpdate(3, LocalUpdateConfig(lr=1.0, momentum=0.0, nesterov=False, weight_decay=0.0))
    acc = np.ones(3, dtype=np.float32)
    out = np.empty(3, dtype=np.float32)
    u = lu.step(np.array([1, 2, 3], dtype=np.float32), np.zeros(3, np.float32), 1, out=out)
    assert u is out
    acc += u
    assert acc.tolist() == [2.0, 3.0, 4.0]


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(lr=-1.0), "lr"),
        (dict(lr=float("nan")), "lr"),
        (dict(momentum=1.0), "momentum"),
        (dict(momentum=-0.1), "momentum"),
        (dict(weight_decay=-1e-4), "weight_decay"),
        (dict(momentum=0.0, nesterov=True), "nesterov"),
        (dict(milestones=(5, 5)), "milestones"),
        (dict(milestones=(0,)), "milestones"),
        (dict(milestones=(2.5,)), "milestones"),
    ],
)
def test_config_validation(kwargs, word):
    with pytest.raises(ValueError, match=word):
        LocalUpdateConfig(**kwargs)


def test_step_validation():
    lu = LocalUpdate(4)
    with pytest.raises(ValueError, match="iteration"):
        lu.step(np.zeros(4, np.float32), np.zeros(4, np.float32), 0)
    with pytest.raises(ValueError, match="shape"):
        lu.step(np.zeros(5, np.float32), np.zeros(4, np.float32), 1)
    with pytest.raises(ValueError, match="n_elements"):
        LocalUpdate(-1)
