"""Intra-DP inference: halo arithmetic by hand, split correctness of every planner's plans, cost model
timelines by hand, the negative control and bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from inference_graphs import captured
from rog.inference.costmodel import (POWER_W, DeviceTimes, Plan, cut_plan, flows, local_plan, robot_energy_j,
                                     simulate, xmit_s, WIRE_FACTOR)
from rog.inference.graph import Chain, Window, capture
from rog.inference.models import INPUT_SHAPE, build_model
from rog.inference.planners import PLANNERS, Candidates, check_grid, choose, level_for, plan_table
from rog.inference.split import run_split


def test_halo_by_hand_single_conv():
    # 3x3, stride 1, padding 1: output rows [4, 8) need input rows [3, 9)
    w = Window(nn.Conv2d(1, 1, 3, padding=1))
    assert w.need(4, 8, 16) == (3, 9)
    # 3x3 stride 2 padding 1: rows [2, 4) -> [2*2-1, 3*2-1+2+1) = [3, 8)
    assert Window(nn.Conv2d(1, 1, 3, stride=2, padding=1)).need(2, 4, 16) == (3, 8)
    # 5x5 dilation 2 padding 4: row [0, 1) -> [-4, 5) (4 rows of padding above the image)
    assert Window(nn.Conv2d(1, 1, 5, padding=4, dilation=2)).need(0, 1, 16) == (-4, 5)
    # 2x2 max pool stride 2: rows [3, 5) -> [6, 10)
    assert Window(nn.MaxPool2d(2, 2)).need(3, 5, 16) == (6, 10)


def test_halo_by_hand_conv_chain():
    # conv3 s1 p1 -> conv3 s1 p1 -> pool2: output rows [2, 3) of a 16-row input:
    # pool needs [4, 6); conv2 needs [3, 7); conv1 needs [2, 8)
    chain = Chain([Window(nn.Conv2d(1, 1, 3, padding=1)), Window(nn.Conv2d(1, 1, 3, padding=1)),
                   Window(nn.MaxPool2d(2, 2))])
    assert chain.ranges(2, 3, 16) == [(2, 8), (3, 7), (4, 6), (2, 3)]
    # at the top edge the need is clamped to the image: pool [0, 2), conv2 [-1, 3) -> [0, 3), conv1 [-1, 4) -> [0, 4)
    assert chain.ranges(0, 1, 16) == [(0, 4), (0, 3), (0, 2), (0, 1)]
    # a 7x7 stride-2 stem then a 3x3 stride-2 pool (ResNet's): rows [5, 7) of the pool output
    stem = Chain([Window(nn.Conv2d(1, 1, 7, stride=2, padding=3)), Window(nn.MaxPool2d(3, 2, 1))])
    # pool: [5*2-1, 6*2-1+3) = [9, 14) of the stem output; stem: [9*2-3, 13*2-3+7) = [15, 30)
    assert stem.ranges(5, 7, 64) == [(15, 30), (9, 14), (5, 7)]


@pytest.mark.parametrize("pad_top", [True, False])
def test_chain_rows_equal_whole(pad_top):
    torch.manual_seed(0)
    mods = [nn.Conv2d(2, 3, 3, padding=1), nn.Conv2d(3, 3, 5, stride=2, padding=2), nn.MaxPool2d(3, 2, 1),
            nn.AvgPool2d(2, 2)]
    chain = Chain([Window(m) for m in mods])
    x = torch.randn(1, 2, 40, 9)
    with torch.no_grad():
        whole = x
        for m in mods:
            whole = m(whole)
        h_out = whole.shape[2]
        a, b = (0, 2) if pad_top else (2, h_out)
        lo, hi = chain.ranges(a, b, 40)[0]
        part = chain.run(x[:, :, lo:hi], lo, a, b, 40)
    assert torch.allclose(part, whole[:, :, a:b], atol=1e-6)


@pytest.fixture(scope="module", params=["vgg19", "resnet18", "densenet"])
def model_graph(request):
    m = build_model(request.param)
    return request.param, m, capture(m, INPUT_SHAPE)


def _times(graph, robot=30.0, server=3.0, cpu=None):
    cpu = cpu or tuple(1e-4 * (1 + (u % 5)) for u in range(len(graph)))
    return DeviceTimes(cpu, robot, server, 1e-10, 2e-4)


def test_every_planners_plans_equal_the_whole_forward(model_graph):
    """Acceptance: every planner's plan at every bandwidth level, on 3 models, allclose atol 1e-5."""
    name, m, g = model_graph
    x = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = m(x)
    cands = Candidates(g, shares=(0.3, 0.7))
    plans = {local_plan(g)}
    for p in PLANNERS:
        for row in plan_table(p, cands, _times(g), (2, 10, 30, 60, 150)):
            plans.add(row.plan)
    plans |= {Plan(0, 4, 0.5, "robot"), Plan(3, g.first_global, 0.4, "server")}
    assert any(0 < p.x < 1 for p in plans)  # at least one intra-layer split is checked
    for p in plans:
        assert torch.allclose(run_split(g, p, x), ref, atol=1e-5), p


def test_flows_bytes_by_hand():
    g = captured("vgg19")
    # all-offload sends the image (3x224x224 float32) and gets the logits back
    f = flows(g, cut_plan(0))
    assert (f.up1_bytes, f.down_bytes) == (3 * 224 * 224 * 4, 1000 * 4)
    # split [0, 4): conv3-relu-conv3-relu on 224 rows; the robot keeps rows [0, 112) of boundary 4,
    # the server computes [112, 224), which needs input rows from 112 - 2 = 110 (two 3x3 convs)
    f = flows(g, Plan(0, 4, 0.5, "robot"))
    assert f.up1_rows == (110, 224)
    assert f.up1_bytes == (224 - 110) * 3 * 224 * 4
    assert f.down_bytes == 112 * 8 * 224 * 4
    # halo rows are computed on both sides: the robot's first conv makes rows [0, 113), the server's [111, 224)
    assert f.robot_frac[0] == pytest.approx(113 / 224) and f.server_frac[0] == pytest.approx(113 / 224)


def test_simulate_timeline_by_hand():
    g = captured("vgg19")
    n = len(g)
    cpu = tuple([0.001] * n)
    t = DeviceTimes(cpu, 10.0, 1.0, 0.0, 0.0)
    # local: n units x 10 ms
    assert simulate(g, t, flows(g, local_plan(g)), 50).latency_s == pytest.approx(0.01 * n)
    # all-offload at 80 Mbit/s: image up, n units x 1 ms on the server, logits down
    up, down = 3 * 224 * 224 * 4, 4000
    want = up * WIRE_FACTOR * 8 / 80e6 + 0.001 * n + down * WIRE_FACTOR * 8 / 80e6
    sim = simulate(g, t, flows(g, cut_plan(0)), 80)
    assert sim.latency_s == pytest.approx(want)
    # sequential phases: the components add up to the latency
    assert sim.robot_compute_s + sim.transfer_s + sim.server_compute_s == pytest.approx(sim.latency_s)
    # robot idle while transmitting and waiting: energy = transmit watts x link time + idle x the rest
    e = POWER_W["transmit"] * sim.transfer_s + POWER_W["idle"] * sim.server_compute_s
    assert sim.energy_j == pytest.approx(e)


def test_split_overlaps_compute_and_transfer():
    g = captured("vgg19")
    t = DeviceTimes(tuple([0.0005] * len(g)), 30.0, 3.0, 0.0, 0.0)
    sim = simulate(g, t, flows(g, Plan(0, 10, 0.5, "server")), 50)
    assert sim.robot_compute_s + sim.transfer_s + sim.server_compute_s > 1.05 * sim.latency_s


def test_energy_states_by_hand():
    # compute [0, 2), transmit [1, 3): compute 1 s, both 1 s, transmit 1 s, idle 1 s until 4
    e = robot_energy_j([(0, 2, "compute"), (1, 3, "transmit")], 0, 4)
    assert e == pytest.approx(POWER_W["compute"] + POWER_W["both"] + POWER_W["transmit"] + POWER_W["idle"])
    assert POWER_W["both"] == pytest.approx(13.35 + 0.21)


def test_negative_control_local_wins_intra_dp_chooses_local():
    """Where local execution is fastest, intra-dp picks local: a robot barely slower than the server."""
    g = captured("densenet")
    t = DeviceTimes(tuple([2e-5] * len(g)), 1.2, 1.0, 1e-10, 2e-4)
    cands = Candidates(g, shares=(0.2, 0.5, 0.8))
    for row in plan_table("intra-dp", cands, t, (1, 10, 50, 100)):
        assert row.plan.x == 1.0, row.plan
    # and at every level where local is the fastest of all planners' choices, intra-dp chose local
    t2 = _times(g)
    for rate in (1, 2, 5, 20, 100):
        best = min((choose(p, cands, t2, rate)[1].latency_s, p) for p in PLANNERS)
        if choose("local", cands, t2, rate)[1].latency_s <= best[0]:
            assert choose("intra-dp", cands, t2, rate)[0].x == 1.0


def test_intra_dp_never_slower_than_layer_partitions(model_graph):
    _, _, g = model_graph
    cands = Candidates(g, shares=(0.3, 0.6))
    t = _times(g)
    for rate in (5, 30, 100):
        idp = choose("intra-dp", cands, t, rate)[1].latency_s
        for p in ("local", "all", "layer-latency", "layer-energy-deadline"):
            assert idp <= choose(p, cands, t, rate)[1].latency_s + 1e-12


def test_bad_grid_and_model_messages():
    with pytest.raises(ValueError, match="--bandwidth-grid is empty"):
        check_grid([])
    with pytest.raises(ValueError, match="--bandwidth-grid has -1: every bandwidth level must be a positive"):
        check_grid([10, -1])
    with pytest.raises(ValueError, match="unknown model 'alexnet'; choose one of vgg19, resnet18, densenet"):
        build_model("alexnet")
    assert check_grid([50, 10, 10]) == (10.0, 50.0)


def test_level_rounds_down():
    g = captured("resnet18")
    table = plan_table("all", Candidates(g, shares=(0.5,)), _times(g), (10, 50, 100))
    assert level_for(table, 75).rate_mbit == 50
    assert level_for(table, 3).rate_mbit == 10  # below the grid: the lowest level
    assert level_for(table, 1000).rate_mbit == 100


def test_xmit_is_bytes_over_rate():
    assert xmit_s(1_000_000, 8.0) == pytest.approx(WIRE_FACTOR)  # 1 MB at 8 Mbit/s: 1 s of payload + headers
    assert xmit_s(0, 8.0) == 0.0


def test_times_flag_checks_the_profile(tmp_path):
    """--times: a profile of another model, or a file that is none, stops with one line naming the flag."""
    import json

    from rog.inference.costmodel import DeviceTimes
    from rog.inference.experiment import build_parser, check_args

    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"model": "vgg19", "times": DeviceTimes((0.001, 0.002)).to_dict()}))
    a = build_parser().parse_args(["plan", "--model", "vgg19", "--times", str(prof)])
    check_args(a)
    assert a.loaded_times.cpu_s == (0.001, 0.002)
    for argv, msg in ((["--model", "densenet", "--times", str(prof)], "profiles vgg19, not densenet"),
                      (["--times", str(tmp_path / "none.json")], "not a profile of python -m rog.inference.profiler"),
                      (["--times", str(prof), "--robot-factor", "10"], "drop --robot-factor")):
        with pytest.raises(ValueError, match=msg):
            check_args(build_parser().parse_args(["plan", *argv]))
