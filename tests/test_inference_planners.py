"""Intra-DP planners: the plan-level grid and row shares by hand, the all-at-once latency against the
timeline simulation, the negative control's rate rule, and the paired per-window spread."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from inference_graphs import captured
from rog.inference.control import control_rate_mbit, write_constant_trace
from rog.inference.costmodel import DeviceTimes, Plan, cut_plan, local_plan, simulate
from rog.inference.graph import capture
from rog.inference.models import INPUT_SHAPE, build_model
from rog.inference.planners import (DEFAULT_GRID_MBIT, SPLIT_SHARES, Candidates, TableRow, _best, _fastest, choose,
                                    geometric_grid, plan_table)
from rog.inference.split import run_split


@pytest.fixture(scope="module")
def resnet():
    m = build_model("resnet18")
    return m, capture(m, INPUT_SHAPE)


def _times(graph):
    cpu = tuple(1e-4 * (1 + (u % 5)) for u in range(len(graph)))
    return DeviceTimes(cpu, 30.0, 3.0, 2e-9, 4e-4)


def test_geometric_grid_by_hand():
    # tenths: 10, floor(11.0) = 11, floor(12.1) = 12, 13.2 -> 13, 14.3 -> 14, ... 19.8 -> 19, then capped at 20
    assert geometric_grid(1, 2, 1.1) == tuple(t / 10 for t in range(10, 21))
    assert geometric_grid(10, 20, 1.5) == (10.0, 15.0, 20.0)  # 22.5 capped at the top
    assert geometric_grid(1, 1.2, 1.01) == (1.0, 1.1, 1.2)  # at least one tenth per level
    g = DEFAULT_GRID_MBIT
    assert g[0] == 1.0 and g[-1] == 1000.0
    assert all(1.0 < b / a <= 1.1 + 1e-12 for a, b in zip(g, g[1:]))  # rounding down loses < 10 % of the rate


def test_split_shares_are_twentieths():
    assert SPLIT_SHARES == pytest.approx([k * 0.05 for k in range(1, 20)])
    assert set(round(10 * x, 9) for x in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)) <= \
        set(round(10 * x, 9) for x in SPLIT_SHARES)  # the finer grid holds the old one


def test_extreme_shares_equal_the_whole_forward(resnet):
    m, g = resnet
    x = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(x)
    for p in (Plan(0, 4, 0.05, "server"), Plan(0, 4, 0.95, "robot"), Plan(2, 9, 0.95, "server")):
        assert torch.allclose(run_split(g, p, x), ref, atol=1e-5), p


def test_all_at_once_latency_equals_the_timeline(resnet):
    _, g = resnet
    c = Candidates(g, shares=(0.05, 0.5, 0.95))
    t = _times(g)
    every = [c.local] + c.cuts + c.splits
    for rate in (0.7, 4.2, 37.0, 950.0):
        vec = c.latencies(t, every, rate)
        ref = np.array([simulate(g, t, f, rate).latency_s for f in every])
        assert np.allclose(vec, ref, rtol=1e-12, atol=0.0)
        key = lambda s: (s.latency_s, s.energy_j)  # noqa: E731
        assert _fastest(every, c, t, rate)[0].plan == _best(every, c, t, rate, key)[0].plan


def test_all_at_once_latency_by_hand(resnet):
    """All-offload and local against hand arithmetic: image and output cross the link, each message pays
    the overhead; local is the robot's sum."""
    _, g = resnet
    t = DeviceTimes(tuple([1e-3] * len(g)), 10.0, 2.0, 0.0, 1e-3)
    c = Candidates(g, shares=(0.5,))
    rate = 8.0  # Mbit/s = 1 byte per microsecond of payload
    from rog.inference.costmodel import WIRE_FACTOR

    lat = c.latencies(t, [c.cuts[0], c.local], rate)
    up, down = g.bytes_at(0), g.bytes_at(len(g))
    hand_all = 1e-3 + up * WIRE_FACTOR * 1e-6 + 2e-3 * len(g) + 1e-3 + down * WIRE_FACTOR * 1e-6
    assert lat[0] == pytest.approx(hand_all, rel=1e-12)
    assert lat[1] == pytest.approx(10e-3 * len(g), rel=1e-12)


def test_finer_shares_never_slower(resnet):
    _, g = resnet
    t = _times(g)
    fine, coarse = Candidates(g), Candidates(g, shares=(0.1, 0.3, 0.5, 0.7, 0.9))
    for rate in (3.0, 20.0, 80.0):
        assert choose("intra-dp", fine, t, rate)[1].latency_s <= choose("intra-dp", coarse, t, rate)[1].latency_s + 1e-15


def test_control_rate_rule_by_hand(tmp_path):
    g = captured("resnet18")
    from rog.inference.costmodel import flows

    s = simulate(g, _times(g), flows(g, local_plan(g)), 1.0)  # rows need a Sim only as a value
    rows = [TableRow(1.0, local_plan(g), s), TableRow(2.0, local_plan(g), s), TableRow(5.0, local_plan(g), s),
            TableRow(10.0, cut_plan(3), s), TableRow(20.0, cut_plan(0), s)]
    assert control_rate_mbit(rows) == 2.5  # half of 5, the highest local level
    with pytest.raises(ValueError, match="--bandwidth-grid"):
        control_rate_mbit(rows[3:])
    from rog.traces import load_trace

    tr = load_trace(write_constant_trace(tmp_path / "c.csv", 2.5, 40))
    assert tr.duration_s >= 40 and tr.rate_at(0.0) == tr.rate_at(39.0) == 2.5


def test_control_rate_from_a_real_table(resnet):
    _, g = resnet
    table = plan_table("layer-latency", Candidates(g, shares=(0.5,)), _times(g), geometric_grid(0.5, 50))
    rate = control_rate_mbit(table)
    assert choose("layer-latency", Candidates(g, shares=(0.5,)), _times(g), rate)[0] == local_plan(g)


def test_window_reductions_by_hand(tmp_path):
    from rog.papers.intradp.summary import window_reductions

    recs = [("intra-dp", 1.0, 0.08), ("intra-dp", 2.0, 0.12), ("intra-dp", 16.0, 0.30),
            ("layer-latency", 1.0, 0.10), ("layer-latency", 2.0, 0.10), ("layer-latency", 16.0, 0.25),
            ("local", 1.0, 9.0)]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps({"planner": p, "t0_s": t, "latency_s": v}) + "\n"
                                                    for p, t, v in recs))
    # window 0: 1 - 0.10 / 0.10 = 0 %; window 1: 1 - 0.30 / 0.25 = -20 %
    assert window_reductions(tmp_path, "intra-dp", "layer-latency") == pytest.approx([0.0, -20.0])
    assert window_reductions(tmp_path / "missing", "intra-dp", "layer-latency") == []


def test_control_row_in_the_summary(tmp_path):
    from rog.papers.intradp.summary import intradp_markdown, intradp_summary

    d = tmp_path / "intradp" / "control-densenet"
    d.mkdir(parents=True)
    m = lambda lat, plans: {"n": sum(plans.values()), "mean_latency_s": lat, "plans": plans}  # noqa: E731
    doc = {"mode": "control", "model": "densenet", "control": {"rate_mbit": 1.5, "rule": "the rule"},
           "emulation": {"estimate": "passive"},
           "methods": {"local": m(0.2, {"local": 40}), "intra-dp": m(0.201, {"local": 38, "cut@3": 2})}}
    (d / "result.json").write_text(json.dumps(doc))
    (c,) = intradp_summary(tmp_path)["control"]
    assert c["intra_dp_local_share"] == pytest.approx(0.95)
    md = intradp_markdown(tmp_path)
    assert "Intra-DP ran the local plan in 95 % of its 40 inferences" in md
    assert "Local 200.0 ms, Intra-DP 201.0 ms" in md


def test_oracle_bound_single_rate(tmp_path, resnet):
    from rog.papers.intradp.bound import oracle_bound

    _, g = resnet
    t = _times(g)
    cfg = {"model": "resnet18", "seed": 0, "times": {"cpu_s": list(t.cpu_s), "robot_factor": t.robot_factor,
                                                     "server_factor": t.server_factor, "ser_s_per_byte": t.ser_s_per_byte,
                                                     "msg_overhead_s": t.msg_overhead_s}}
    (tmp_path / "config-robot.json").write_text(json.dumps(cfg))
    (tmp_path / "records.jsonl").write_text("".join(json.dumps({"planner": p, "oracle_mbit": 20.0}) + "\n"
                                                    for p in ("intra-dp", "intra-dp", "local")))
    b = oracle_bound(tmp_path)
    # the reference, independent of the planners' search (no cached sums, no vectorised latencies): every
    # layer partition (all local, a cut at each node) and every row split simulated one by one at 20 Mbit/s
    from rog.inference.costmodel import flows

    layer_plans = [local_plan(g)] + [cut_plan(u) for u in range(len(g))]
    lay = min(simulate(g, t, flows(g, p), 20.0).latency_s for p in layer_plans)
    idp = min([lay] + [simulate(g, t, flows(g, fl.plan), 20.0).latency_s for fl in Candidates(g).splits])
    assert b["frames"] == 2 and b["best_layer"] == "layer-latency"
    assert b["model_latency_s"]["layer-latency"] == pytest.approx(lay, rel=1e-9)
    assert b["model_latency_s"]["intra-dp"] == pytest.approx(idp, rel=1e-9)
    assert b["reduction_pct"] == pytest.approx(100 * (1 - idp / lay))
    assert b["reduction_pct"] >= 0.0  # Intra-DP's plan space holds every layer partition
    assert oracle_bound(tmp_path) == b  # cached
    assert oracle_bound(tmp_path / "none") is None


def test_energy_terms_by_hand():
    from rog.papers.intradp.summary import energy_terms
    from rog.inference.costmodel import POWER_W as P

    a = {"compute": 0.02, "transmit": 0.06, "both": 0.04, "idle": 0.01}  # 130 ms
    b = {"compute": 0.01, "transmit": 0.12, "both": 0.0, "idle": 0.03}  # 160 ms
    e = energy_terms(a, b)
    assert e["latency_s"] == pytest.approx(-0.03) and e["robot_compute_s"] == pytest.approx(0.05)
    assert e["time"] == pytest.approx(-0.03 * 4.04)
    assert e["compute"] == pytest.approx(0.01 * (13.35 - 4.04) + 0.04 * (13.56 - 4.04))
    whole = lambda st: sum(P[k] * v for k, v in st.items())  # noqa: E731
    assert e["time"] + e["compute"] + e["transmit"] == pytest.approx(whole(a) - whole(b))
    assert energy_terms(None, b) is None
