"""DynaComm's DPs against exhaustive search, and the baselines' plans against the cost model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rog.schedules import SCHEDULES
from rog.schedules.planner import Profile, backward_dp, backward_time, forward_dp, forward_time


def all_segmentations(L: int):
    """Every split of layers 0..L-1 into contiguous segments (bottom-up)."""
    for cuts in itertools.product((0, 1), repeat=L - 1):
        segs, a = [], 0
        for i, c in enumerate(cuts):
            if c:
                segs.append((a, i))
                a = i + 1
        segs.append((a, L - 1))
        yield segs


def brute_forward(L, p):
    """Minimum forward time by a direct event simulation of every segmentation."""
    best = np.inf
    for segs in all_segmentations(L):
        link, comp = p.start_s, 0.0
        for a, b in segs:
            link += p.dt_s + sum(p.pt[a : b + 1])  # pulls back to back
            comp = max(comp, link) + sum(p.fc[a : b + 1])
        best = min(best, comp)
    return best


def brute_backward(L, p):
    best = np.inf
    for segs in all_segmentations(L):
        link = 0.0
        for a, b in reversed(segs):  # top-down
            ready = sum(p.bc[a:])
            link = max(link, ready) + p.dt_s + sum(p.gt[a : b + 1])
        best = min(best, link)
    return best


def random_profile(rng, L):
    scale = rng.choice([0.01, 1.0, 100.0])
    return Profile(pt=rng.exponential(1.0, L) * rng.choice([0.1, 1, 10]), fc=rng.exponential(1.0, L),
                   bc=rng.exponential(2.0, L), gt=rng.exponential(1.0, L) * rng.choice([0.1, 1, 10]),
                   dt_s=float(rng.uniform(0, 2) * scale / 10), start_s=float(rng.choice([0.0, rng.uniform(0, 3)])))


@pytest.mark.parametrize("L", range(1, 13))
def test_dp_equals_brute_force(L):
    rng = np.random.default_rng(1000 + L)
    for _ in range(6 if L > 9 else 20):
        p = random_profile(rng, L)
        t_f, segs_f = forward_dp(p)
        t_b, segs_b = backward_dp(p)
        assert t_f == pytest.approx(brute_forward(L, p), rel=1e-12, abs=1e-12)
        assert t_b == pytest.approx(brute_backward(L, p), rel=1e-12, abs=1e-12)
        # the traceback reproduces the DP's value
        assert forward_time(segs_f, p) == pytest.approx(t_f, rel=1e-12, abs=1e-12)
        assert backward_time(segs_b, p) == pytest.approx(t_b, rel=1e-12, abs=1e-12)


def test_hand_computed_example():
    # 2 layers, pt=(1,1), fc=(1,1), dt=0.5: sequential = 0.5+2 + 2 = 4.5; LBL = pull1 arrives 1.5,
    # compute to 2.5; pull2 arrives 3.0, compute to 4.0 -> 4.0
    p = Profile(pt=np.array([1.0, 1.0]), fc=np.array([1.0, 1.0]), bc=np.array([1.0, 1.0]),
                gt=np.array([1.0, 1.0]), dt_s=0.5)
    assert forward_time([(0, 1)], p) == pytest.approx(4.5)
    assert forward_time([(0, 0), (1, 1)], p) == pytest.approx(4.0)
    assert forward_dp(p) == (pytest.approx(4.0), [(0, 0), (1, 1)])
    # backward: top layer's grads at 1.0, push 1.5 -> 2.5; bottom's at 2.0, push to 4.0; one push: 2 + 2.5
    assert backward_time([(1, 1), (0, 0)], p) == pytest.approx(4.0)
    assert backward_time([(0, 1)], p) == pytest.approx(4.5)
    # a pull start of 0.25 s delays every arrival once: one pull 0.25+0.5+2 + 2 = 4.75; LBL 1.75 -> 2.75,
    # 3.25 -> 4.25; pushes unchanged
    q = Profile(pt=p.pt, fc=p.fc, bc=p.bc, gt=p.gt, dt_s=0.5, start_s=0.25)
    assert forward_time([(0, 1)], q) == pytest.approx(4.75)
    assert forward_time([(0, 0), (1, 1)], q) == pytest.approx(4.25)
    assert backward_time([(1, 1), (0, 0)], q) == pytest.approx(4.0)


def test_dynacomm_never_worse_than_baselines():
    rng = np.random.default_rng(7)
    for _ in range(50):
        p = random_profile(rng, int(rng.integers(1, 30)))
        plans = {name: f(p) for name, f in SCHEDULES.items()}
        d = plans["dynacomm"]
        for name, pl in plans.items():
            assert d.predicted_fwd_s <= pl.predicted_fwd_s + 1e-9, name
            assert d.predicted_bwd_s <= pl.predicted_bwd_s + 1e-9, name


def test_dp_runs_fast_at_resnet152_depth():
    import time

    p = random_profile(np.random.default_rng(3), 150)
    t0 = time.perf_counter()
    forward_dp(p)
    backward_dp(p)
    assert time.perf_counter() - t0 < 2.0  # measured ~0.05 s; the bound leaves room for a loaded machine


def test_bad_segments_rejected():
    p = Profile(pt=np.ones(3), fc=np.ones(3), bc=np.ones(3), gt=np.ones(3), dt_s=0.0)
    with pytest.raises(ValueError, match="tile"):
        forward_time([(0, 0), (2, 2)], p)
    with pytest.raises(ValueError, match="top-down"):
        backward_time([(0, 0), (1, 2)], p)
    with pytest.raises(ValueError, match="dt_s"):
        Profile(pt=np.ones(1), fc=np.ones(1), bc=np.ones(1), gt=np.ones(1), dt_s=-1.0)
