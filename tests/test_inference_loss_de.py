"""Differential evolution over per-layer plans (rog/inference/loss_de.py): every gene vector decodes to a
valid plan, DE never ends slower than the plans it starts from, and on a tiny model it finds the optimum
that brute force over every plan gives."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from inference_graphs import captured
from rog.inference.costmodel import DeviceTimes, flows, local_plan, simulate
from rog.inference.graph import capture
from rog.inference.live_loss import MAX_SEGMENTS, pack_plan, unpack_plan
from rog.inference.loss import MultiPlan, PlanCosts, loss_candidates, multi_flows, simulate_multi
from rog.inference.loss_de import DEEncoding, de_search
from rog.inference.models import INPUT_SHAPE
from rog.inference.planners import DE_PLANNER, LOSS_PLANNER, Candidates, choose, plan_table
from rog.inference.stream import run_stream


def _times(g, robot=30.0, server=3.0):
    return DeviceTimes(tuple(1e-4 * (1 + u % 5) for u in range(len(g))), robot, server, 1e-10, 2e-4)


@pytest.fixture(scope="module", params=["vgg19", "densenet"])
def big(request):
    return captured(request.param)


def test_every_gene_vector_decodes_to_a_valid_plan(big):
    enc = DEEncoding(big)
    rng = np.random.default_rng(5)
    seen = 0
    for genes in rng.uniform(0.0, 1.0, (300, enc.size)):
        plan = enc.decode(genes)
        if plan is None:
            continue
        seen += 1
        fl = multi_flows(big, plan)  # raises for an impossible plan
        assert 1 <= len(plan.xs) <= MAX_SEGMENTS
        assert unpack_plan(pack_plan(plan)) == plan  # shares survive the announcement's thousandths
        assert multi_flows(big, unpack_plan(pack_plan(plan))).a == fl.a
        assert enc.decode(enc.encode(plan)) == plan
    assert seen >= 250
    assert enc.decode(enc.encode(None)) is None  # everything on the robot
    assert enc.decode(np.zeros(enc.size)) is None


def test_encode_keeps_the_rows_of_grid_plans(big):
    enc = DEEncoding(big)
    for plan in itertools.islice(loss_candidates(big, []), 0, None, 97):
        back = enc.decode(enc.encode(plan))
        assert back.bounds == plan.bounds and back.merge == plan.merge
        assert multi_flows(big, back).a == multi_flows(big, plan).a


def test_decoded_plans_compute_the_whole_models_output():
    g = captured("resnet18")
    enc = DEEncoding(g)
    img = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(1))
    ref = g.run_full(img)
    rng = np.random.default_rng(2)
    plans = [p for p in (enc.decode(v) for v in rng.uniform(0, 1, (20, enc.size))) if p is not None][:4]
    assert len(plans) == 4
    for plan in plans:
        assert torch.allclose(run_stream(g, plan, img), ref, rtol=1e-4, atol=1e-5), plan.label()


@pytest.mark.parametrize("rate", [5.0, 20.0, 100.0])
def test_de_is_never_slower_than_the_fixed_candidates(rate):
    g = captured("resnet18")
    t = _times(g)
    one, _ = choose("intra-dp", Candidates(g), t, rate)
    fixed, fixed_s = PlanCosts(g, t).fastest(loss_candidates(g, [one]), rate)
    res = de_search(g, t, rate, [fixed], maxiter=30, population=24)
    assert res.latency_s <= fixed_s * (1 + 1e-12)
    if res.plan is None:  # everything on the robot
        assert res.latency_s == pytest.approx(sum(t.robot_s(u) for u in range(len(g))), rel=1e-12)
    else:
        assert res.latency_s == pytest.approx(simulate_multi(g, t, multi_flows(g, res.plan), rate), rel=1e-12)
    assert 24 < res.evaluations <= 24 * (30 + 1)


def test_de_planner_is_never_slower_than_the_loss_planner():
    g = captured("resnet18")
    t, cands = _times(g), Candidates(g)
    grid = (4.0, 40.0)
    loss = plan_table(LOSS_PLANNER, cands, t, grid)
    de = plan_table(DE_PLANNER, cands, t, grid)
    for a, b in zip(loss, de):
        assert b.sim.latency_s <= a.sim.latency_s * (1 + 1e-12)


class _Tiny(nn.Module):
    """A torchvision-style chain small enough to enumerate every per-layer plan at four exchange points."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 2, 3, padding=1), nn.ReLU(), nn.Conv2d(2, 2, 3, padding=1), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(4, 3))


def _brute_force(g, t, points, rate):
    """The least modelled latency over every plan on ``points`` (every row count, either merge) and local."""
    best = (simulate(g, t, flows(g, local_plan(g)), rate).latency_s, None)
    for k in range(2, len(points) + 1):
        for bounds in itertools.combinations(points, k):
            for rows in itertools.product(*[range(1, g.h_at(b)) for b in bounds[1:]]):
                for merge in ("robot", "server"):
                    plan = MultiPlan(bounds, tuple(a / g.h_at(b) for a, b in zip(rows, bounds[1:])), merge)
                    lat = simulate_multi(g, t, multi_flows(g, plan), rate)
                    if lat < best[0]:
                        best = (lat, plan)
    return best


@pytest.mark.parametrize("rate", [0.2, 1.0, 4.0])
def test_de_finds_the_brute_force_optimum_of_a_tiny_model(rate):
    g = capture(_Tiny().eval(), (1, 3, 16, 16))
    points = (0, 2, 5, 8)
    assert [g.h_at(p) for p in points] == [16, 16, 8, 4]
    t = DeviceTimes(tuple(1e-3 * (1 + u % 3) for u in range(len(g))), 4.0, 1.0, 0.0, 1e-3)
    best_s, best = _brute_force(g, t, points, rate)
    assert best is not None and len(best.xs) >= 2  # the optimum is a real per-layer plan
    res = de_search(g, t, rate, encoding=DEEncoding(g, points))  # from everything on the robot and samples only
    assert res.latency_s == pytest.approx(best_s, rel=1e-12)
    assert multi_flows(g, res.plan).a == multi_flows(g, best).a and res.plan.bounds == best.bounds
