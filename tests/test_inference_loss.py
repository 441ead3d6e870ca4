"""The paper's plan space offline (rog/inference/loss.py): multi-segment plans equal the whole forward,
one segment equals the one-segment cost model, the search only grows plans that the model calls faster."""

from __future__ import annotations

import itertools

import pytest
import torch

from inference_graphs import captured
from rog.inference.costmodel import DeviceTimes, Plan, flows, simulate
from rog.inference.loss import MultiPlan, multi_flows, refine, simulate_multi, stage_boundaries
from rog.inference.models import INPUT_SHAPE
from rog.inference.stream import run_stream


@pytest.fixture(scope="module", params=["vgg19", "resnet18", "densenet"])
def graph(request):
    return captured(request.param)


def _times(g):
    return DeviceTimes(tuple(1e-4 * (1 + u % 5) for u in range(len(g))), 30.0, 3.0, 1e-10, 2e-4)


def test_multi_segment_plans_equal_the_whole_forward(graph):
    img = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(3))
    ref = graph.run_full(img)
    n = 0
    for bounds in itertools.combinations(stage_boundaries(graph), 3):
        for xs in ((0.3, 0.7), (0.8, 0.2)):
            for merge in ("robot", "server"):
                out = run_stream(graph, MultiPlan(bounds, xs, merge), img)
                assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5), (bounds, xs, merge)
                n += 1
    assert n >= 8


def test_one_segment_equals_the_one_segment_model(graph):
    t, sb = _times(graph), stage_boundaries(graph)
    for i, j in ((sb[0], sb[2]), (sb[1], sb[-1])):
        for x in (0.25, 0.6):
            for merge in ("robot", "server"):
                one = simulate(graph, t, flows(graph, Plan(i, j, x, merge)), 40.0).latency_s
                assert simulate_multi(graph, t, multi_flows(graph, MultiPlan((i, j), (x,), merge)), 40.0) == pytest.approx(one)


def test_exchange_rows_follow_the_halo(graph):
    sb = stage_boundaries(graph)
    fl = multi_flows(graph, MultiPlan((sb[0], sb[1], sb[2]), (0.5, 0.5), "robot"))
    (r0, r1), (s0, s1) = fl.robot_rows[1][0], fl.server_rows[1][0]
    a1 = fl.a[0]
    assert r0 == 0 and r1 >= a1 and s0 <= a1  # halo rows cross the cut between the parts
    assert fl.down_rows[1] == ((a1, r1) if r1 > a1 else (0, 0)) and fl.up_rows[1] == ((s0, a1) if s0 < a1 else (0, 0))
    with pytest.raises(ValueError):
        multi_flows(graph, MultiPlan((sb[1], sb[0]), (0.5,), "robot"))


def test_refine_never_returns_a_slower_plan(graph):
    t, sb = _times(graph), stage_boundaries(graph)
    start = MultiPlan((sb[0], sb[1]), (0.4,), "server")
    base = simulate_multi(graph, t, multi_flows(graph, start), 30.0)
    plan, lat = refine(graph, t, 30.0, start, rounds=1)
    assert lat <= base and lat == pytest.approx(simulate_multi(graph, t, multi_flows(graph, plan), 30.0))


def test_all_at_once_equals_one_by_one(graph):
    """PlanCosts.fastest (every plan's timeline at once, numpy) picks the plan and latency that
    simulate_multi (one plan at a time) gives, over plans of 1-3 segments, either merge, three rates."""
    from rog.inference.loss import PlanCosts, grown, multi_space, simulate_multi_sim

    t, sb = _times(graph), stage_boundaries(graph)
    plans = list(multi_space(graph, 2, (0.3, 0.7))) + grown(graph, MultiPlan((sb[0], sb[2]), (0.5,), "server"), (0.25, 0.75))
    costs, fls = PlanCosts(graph, t), []
    for p in plans:
        try:
            fls.append(multi_flows(graph, p))
        except ValueError:
            continue
    for rate in (3.0, 30.0, 300.0):
        lat = min(simulate_multi(graph, t, fl, rate) for fl in fls)
        got, got_lat = costs.fastest(plans, rate)
        assert got_lat == pytest.approx(lat, rel=1e-12)
        sim = simulate_multi_sim(graph, t, multi_flows(graph, got), rate)
        assert sim.latency_s == pytest.approx(got_lat, rel=1e-12)
        assert max(b for _, b, _ in sim.intervals) <= sim.latency_s + 1e-12


def test_plan_announcement_round_trip():
    from rog.inference.live_loss import pack_plan, unpack_plan

    for plan in (MultiPlan((0, 5, 18), (0.35, 0.05), "robot"), MultiPlan((3, 9), (0.95,), "server")):
        assert unpack_plan(pack_plan(plan)) == plan
    good = pack_plan(MultiPlan((0, 5, 18), (0.35, 0.05), "robot"))
    for bad in (good[:-1], b"\x00\x00", bytes([2, 7]) + good[2:], bytes([40, 0]) + good[2:]):
        with pytest.raises(ConnectionError):
            unpack_plan(bad)
