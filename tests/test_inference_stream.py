"""Rows sent as they finish (rog/inference/stream.py): band schedules by hand, streamed plans equal the whole
forward, one band is the per-layer timeline, the streamed timeline by hand, and the planner."""

from __future__ import annotations

import random

import pytest
import torch

from inference_graphs import captured
from rog.inference.costmodel import WIRE_FACTOR, DeviceTimes
from rog.inference.loss import MultiCosts, MultiPlan, multi_flows, multi_timeline, simulate_multi, stage_boundaries
from rog.inference.models import INPUT_SHAPE
from random_costs import random_multi_costs
from rog.inference.stream import (StreamCosts, head_bands, part_bands, pieces, run_stream, simulate_stream_sim,
                                  stream_costs, stream_timeline)

RATE = 8 * WIRE_FACTOR  # Mbit/s at which n bytes take n / 1e6 seconds


@pytest.fixture(scope="module", params=["vgg19", "resnet18", "densenet"])
def graph(request):
    return captured(request.param)


@pytest.fixture(scope="module")
def resnet():
    return captured("resnet18")


def _times(g):
    return DeviceTimes(tuple(1e-4 * (1 + u % 5) for u in range(len(g))), 30.0, 3.0, 1e-10, 2e-4)


def _plans(g):
    sb = stage_boundaries(g)
    return [MultiPlan((sb[0], sb[2]), (0.4,), "server"), MultiPlan((sb[1], sb[2], sb[3]), (0.5, 0.5), "robot"),
            MultiPlan((sb[1], sb[2], sb[3]), (0.3, 0.7), "server")]


def test_bands_put_the_rows_the_other_side_needs_first(resnet):
    # ResNet-18: boundaries 6, 8, 10 hold 56, 28 and 14 rows; shares 0.5 give the robot rows [0, 14) of
    # boundary 8 and [0, 7) of boundary 10.  The halo rows come from the graph (checked in test_inference_loss).
    g = resnet
    plan = MultiPlan((6, 8, 10), (0.5, 0.5), "robot", 3)
    fl = multi_flows(g, plan)
    (u0, _), (u1, _) = fl.up_rows[0], fl.up_rows[1]
    d1 = fl.down_rows[1][1]
    assert g.h_at(6) == 56 and fl.a == (14, 7)
    assert head_bands(g, fl) == [(u0, 56), (0, u0)]  # the server's rows of b_0 (the head's last) first
    assert part_bands(g, fl, 0, "robot") == [(u1, 14), (0, u1)]  # the robot's halo for the server: its last rows
    assert part_bands(g, fl, 0, "server") == [(14, d1), (d1, 28)]  # the server's halo for the robot: its first rows
    assert part_bands(g, fl, 1, "server") == [(7, 9), (9, 11), (11, 14)]  # the merge message, 3 bands top down
    assert part_bands(g, fl, 1, "robot") == [(0, 7)]  # the merge side computes its part in one band
    assert [pieces(g, fl, k, s) for k, s in ((-1, "robot"), (0, "robot"), (0, "server"), (1, "server"), (1, "robot"))] == [1, 1, 1, 3, 0]
    one = multi_flows(g, MultiPlan((6, 8, 10), (0.5, 0.5), "robot"))
    assert part_bands(g, one, 0, "robot") == [(0, 14)] and pieces(g, one, 1, "server") == 1
    many = multi_flows(g, MultiPlan((6, 8, 10), (0.5, 0.5), "robot", 16))
    assert part_bands(g, many, 1, "server") == [(r, r + 1) for r in range(7, 14)]  # never more bands than rows


def test_streamed_plans_equal_the_whole_forward(graph):
    img = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(5))
    ref = graph.run_full(img)
    for p in _plans(graph):
        for bands in (1, 2, 3):
            out = run_stream(graph, MultiPlan(p.bounds, p.xs, p.merge, bands), img)
            assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5), (p, bands)


def test_one_band_is_the_per_layer_timeline(graph):
    t = _times(graph)
    for p in _plans(graph):
        fl = multi_flows(graph, p)
        for rate in (5.0, 40.0, 400.0):
            assert simulate_stream_sim(graph, t, p, rate).latency_s == pytest.approx(simulate_multi(graph, t, fl, rate),
                                                                                     rel=1e-12)


def test_band_seconds_count_the_recomputed_halo(graph):
    t = _times(graph)
    for p in _plans(graph):
        whole = stream_costs(graph, t, multi_flows(graph, p))
        banded = stream_costs(graph, t, multi_flows(graph, MultiPlan(p.bounds, p.xs, p.merge, 4)))
        for (rw, sw), (rb, sbd) in zip(whole.segs, banded.segs):
            for w, b in ((rw, rb), (sw, sbd)):
                assert sum(s for s, _ in b) >= sum(s for s, _ in w) - 1e-15  # halo rows computed again
                assert sum(n for _, n in b) == sum(n for _, n in w)  # the same bytes, in more messages


def test_one_band_timeline_equals_multi_timeline_on_random_costs():
    rng = random.Random(11)
    for _ in range(500):
        m = random_multi_costs(rng)
        segs, merge, k = m.segs, m.merge, len(m.segs)
        # the same plan as bands: the head sends up[0]; part k of each side sends the next exchange (or the merge)
        nxt = lambda i, j, last: m.segs[i + 1][j] if i + 1 < k else last  # noqa: E731
        s = StreamCosts(((m.head_s, segs[0][0]),),
                        tuple((((segs[i][2], nxt(i, 0, m.merge_bytes if merge == "server" else 0)),),
                               ((segs[i][3], nxt(i, 1, m.merge_bytes if merge == "robot" else 0)),)) for i in range(k)),
                        merge, m.out_bytes, m.tail_s)
        ser, ov, rate = rng.uniform(0, 1e-8), rng.uniform(0, 2e-3), rng.uniform(5, 200)
        assert stream_timeline(s, ser, ov, rate) == pytest.approx(multi_timeline(m, ser, ov, rate), rel=1e-12, abs=1e-15)


def test_streamed_timeline_by_hand():
    # head 0.1 s sends 0.1 MB up (0.1 -> 0.2); the server's part: 0.3 s in two bands of 0.15 s, each sending 0.2 MB
    # (merge on the robot); the robot's part 0.2 s; tail 0.05 s.  No serialisation, no overhead.
    c = StreamCosts(((0.1, 100_000),), ((((0.2, 0),), ((0.15, 200_000), (0.15, 200_000))),), "robot", 0, 0.05)
    # server starts at 0.2: band 1 done 0.35, its rows on the link 0.35 -> 0.55; band 2 done 0.5, link free at
    # 0.55 -> 0.75; the robot (done 0.3) waits to 0.75, tail to 0.80.  Unstreamed: one 0.4 MB message from 0.5: 0.95.
    assert stream_timeline(c, 0.0, 0.0, RATE) == pytest.approx(0.80)
    one = StreamCosts(((0.1, 100_000),), ((((0.2, 0),), ((0.3, 400_000),)),), "robot", 0, 0.05)
    assert stream_timeline(one, 0.0, 0.0, RATE) == pytest.approx(0.95)
    # each band is a message: with 0.01 s overhead a message, band 1 lands 0.56, band 2 leaves 0.56, lands 0.77
    assert stream_timeline(c, 0.0, 0.01, RATE) == pytest.approx(0.77 + 0.05 + 0.01)  # (the head's message too)


def test_each_side_sends_before_it_waits():
    # two segments; the server's part 0 ends at 0.2 + 0.05 and its rows for the robot (0.1 MB) leave then, although
    # the robot's rows for segment 1 (sent at 0.2 + 0.5) land only at 0.8.  Robot: head 0.1, up 0.1 MB (0.1 -> 0.2)
    c = MultiCosts(0.1, ((100_000, 0, 0.5, 0.05), (100_000, 100_000, 0.1, 0.1)), "robot", 50_000, 0, 0.0)
    # down leaves at 0.25, lands 0.35; robot: 0.6 (part 0) -> up lands 0.7; robot part 1 0.6 -> 0.7;
    # server waits for 0.7, part 1 to 0.8, merge 0.05 MB lands 0.85 -> latency 0.85
    assert multi_timeline(c, 0.0, 0.0, RATE) == pytest.approx(0.85)


def test_stream_planner_is_never_modelled_slower_than_loss(resnet):
    from rog.inference.planners import LOSS_PLANNER, STREAM_PLANNER, Candidates, plan_table

    g, t = resnet, DeviceTimes(tuple(1e-3 * (1 + u % 5) for u in range(len(resnet))), 15.0, 1.5, 1e-9, 5e-4)
    cands, grid = Candidates(g), [5.0, 20.0, 80.0]
    loss, stream = plan_table(LOSS_PLANNER, cands, t, grid), plan_table(STREAM_PLANNER, cands, t, grid)
    img = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(2))
    ref = g.run_full(img)
    for a, b in zip(loss, stream):
        assert b.sim.latency_s <= a.sim.latency_s * (1 + 1e-9)
        if isinstance(b.plan, MultiPlan):
            assert simulate_stream_sim(g, t, b.plan, b.rate_mbit).latency_s == pytest.approx(b.sim.latency_s)
            assert torch.allclose(run_stream(g, b.plan, img), ref, rtol=1e-4, atol=1e-5)


def test_plan_announcement_carries_the_bands():
    from rog.inference.live_loss import pack_plan, unpack_plan

    plan = MultiPlan((0, 5, 18), (0.35, 0.05), "robot", 4)
    assert unpack_plan(pack_plan(plan)) == plan and plan.label().endswith("~4")
    assert MultiPlan.from_dict(plan.to_dict()) == plan and "bands" not in MultiPlan((3, 9), (0.5,), "server").to_dict()
    good = pack_plan(plan)
    for bands in (0, 17):
        with pytest.raises(ConnectionError, match="bands"):
            unpack_plan(good[:2] + bytes([bands]) + good[3:])
    with pytest.raises(ValueError, match="bands"):
        multi_flows(captured("resnet18"), MultiPlan((6, 8), (0.5,), "robot", 0))


def test_the_servers_sender_keeps_order_and_reports_a_failed_send():
    import threading

    from rog.inference.live_loss import _Sender

    got, main_thread = [], threading.get_ident()
    s = _Sender(lambda h, data: got.append((h, data, threading.get_ident() != main_thread)))
    for k in range(50):
        s(k, bytes([k]))
    s.close()
    assert [(h, d) for h, d, _ in got] == [(k, bytes([k])) for k in range(50)] and all(t for _, _, t in got)

    def broken(h, data):
        raise ConnectionResetError("peer gone")

    s = _Sender(broken)
    s(0, b"x")
    with pytest.raises(ConnectionResetError, match="peer gone"):
        s.close()
    s = _Sender(broken)
    s(0, b"x")
    s.close(raise_error=False)  # an error already on its way out is the one reported


def test_a_band_first_leaves_the_rest_in_order():
    from rog.inference.stream import _first

    assert _first((10, 14), (0, 14)) == [(10, 14), (0, 10)]  # the robot's halo: its last rows
    assert _first((14, 20), (14, 28)) == [(14, 20), (20, 28)]  # the server's: its first rows
    assert _first((5, 8), (0, 14)) == [(5, 8), (0, 5), (8, 14)]  # inside: nothing lost
    assert _first((0, 0), (0, 14)) == [(0, 14)] and _first((0, 14), (0, 14)) == [(0, 14)]
