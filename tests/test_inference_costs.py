"""Measured split costs: the curves, their use by the cost model, planner and pacing, the held-out checks,
and the CUDA server's fallback (values by hand or recomputed independently)."""

from __future__ import annotations

import time

import pytest

from inference_graphs import captured
from rog.inference.costmodel import DeviceTimes, Plan, compute_sums, curve_s, flows
from rog.inference.graph import capture
from rog.inference.models import INPUT_SHAPE, build_model
from rog.inference.profiler import HOLDOUT_SHARES, PROFILE_SHARES, holdout_errors, monotone, profile, profile_curves
from rog.inference.validation import HOLDOUT_X, error_distribution, sweep_plans


@pytest.fixture(scope="module")
def vgg():
    return captured("vgg19")


def test_curve_interpolation_by_hand():
    c = ((0.1, 1.0), (0.5, 3.0), (1.0, 4.0))
    assert curve_s(c, 0.05) == pytest.approx(0.5)  # below the first measured share: proportional
    assert curve_s(c, 0.3) == pytest.approx(2.0)  # halfway between 1.0 and 3.0
    assert curve_s(c, 0.75) == pytest.approx(3.5)
    assert curve_s(c, 1.0) == 4.0 and curve_s(c, 0.0) == 0.0


def test_monotone_pools_adjacent_violators():
    assert monotone([1, 3, 2, 4]) == [1, 2.5, 2.5, 4]
    assert monotone([5, 1, 1, 1]) == [2, 2, 2, 2]
    assert monotone([1, 2, 3]) == [1, 2, 3]


def test_device_times_use_curves_and_round_trip():
    cpu = (2e-3, 1e-3)
    flat = (((0.5, 2e-3), (1.0, 2e-3)), ((1.0, 1e-3),))  # unit 0: half its rows cost as much as all of them
    t = DeviceTimes(cpu, 30.0, 3.0, 0.0, 0.0, flat, flat)
    assert t.robot_s(0, 0.5) == pytest.approx(30 * 2e-3) and t.server_s(0, 0.25) == pytest.approx(3 * 1e-3)
    assert t.robot_s(1, 0.5) == pytest.approx(30 * 0.5e-3)  # one-point curve: proportional
    lin = DeviceTimes(cpu, 30.0, 3.0)
    assert lin.robot_s(0, 0.5) == pytest.approx(30 * 1e-3) and lin.split_costs == "linear" and t.split_costs == "measured"
    back = DeviceTimes.from_dict(t.to_dict())
    assert back == t


def test_compute_sums_follow_the_curves(vgg):
    """A split's robot segment costs what the curves say for its rows, not the linear share."""
    n = len(vgg)
    cpu = tuple(1e-3 for _ in range(n))
    whole = tuple(((1 / 224, 1e-3), (1.0, 1e-3)) for _ in range(n))  # any share costs the whole unit
    t = DeviceTimes(cpu, 10.0, 1.0, 0.0, 0.0, whole, whole)
    fl = flows(vgg, Plan(0, 4, 0.5, "robot"))
    head, seg_r, seg_s, tail_r, tail_s = compute_sums(vgg, t, fl)
    assert seg_r == pytest.approx(10.0 * 4e-3) and seg_s == pytest.approx(1.0 * 4e-3)
    assert tail_r == pytest.approx(10.0 * 1e-3 * (n - 4))
    lin = compute_sums(vgg, DeviceTimes(cpu, 10.0, 1.0), fl)
    assert lin[1] == pytest.approx(10.0 * 1e-3 * sum(fl.robot_frac[:4]))
    assert lin[1] < 0.6 * seg_r  # the linear model would have called it about half


def test_profiled_curves_are_measured_and_checked_at_held_out_shares(vgg):
    cpu = tuple(1e-3 for _ in range(len(vgg)))
    curves = profile_curves(vgg, cpu, "robot", repeats=1)
    for u, c in enumerate(curves):
        shares = [s for s, _ in c]
        assert c[-1] == (1.0, 1e-3)  # the whole unit's time at share 1; parts capped at it
        assert all(t <= 1e-3 for _, t in c)
        assert shares == sorted(shares) and all(a[1] <= b[1] + 1e-15 for a, b in zip(c, c[1:]))
        if u < vgg.first_global:
            assert shares[0] == pytest.approx(1 / vgg.units[u].out_h)  # one row
            h = vgg.units[u].out_h  # shares that round to the same rows are measured once; the whole rows only as 1.0
            rows = {min(h, max(1, round(x * h))) for x in (0.0,) + PROFILE_SHARES[:-1]} - {h}
            assert sorted(round(x * h) for x in shares[:-1]) == sorted(rows)
        else:
            assert c == ((1.0, 1e-3),)
    t = DeviceTimes(cpu, 1.0, 1.0, 0.0, 0.0, curves, curves)
    pts = holdout_errors(vgg, t, "robot", repeats=1, shares=HOLDOUT_SHARES[:2])
    assert {round(p["share"] * vgg.units[p["unit"]].out_h) for p in pts if p["unit"] == 0} == {11, 34}  # 0.05, 0.15 of 224
    for p in pts:
        assert p["error"] == pytest.approx(curve_s(curves[p["unit"]], p["share"]) / p["measured_s"] - 1)


def test_error_distribution_by_hand():
    d = error_distribution([0.1, -0.3, 0.05, 0.2, -0.01])
    assert d["n"] == 5 and d["median_abs"] == pytest.approx(0.1) and d["max_abs"] == pytest.approx(0.3)
    assert d["median_signed"] == pytest.approx(0.05) and d["n_within"] == 3
    assert error_distribution([]) is None


def test_sweep_includes_split_plans_at_held_out_shares():
    from rog.inference import runner as R

    prep = R.prepare("resnet18", ["layer-latency"], [50], repeats=1, split_costs="linear")
    plans = sweep_plans(prep, 35.0)
    kinds = [k for k, _, _ in plans]
    assert kinds.count("cut") == len(R.fig1_cuts(prep.graph))
    splits = [p for k, _, p in plans if k == "split"]
    assert splits and all(0 < p.x < 1 for p in splits)
    assert {p.x for p in splits[1:]} <= set(HOLDOUT_X) and len({(p.i, p.j, p.merge) for p in splits}) == 1
    assert [k for k, _, _ in sweep_plans(prep, 35.0, ["splits"])] == ["split"] * len(splits)


def test_pacer_paces_to_the_measured_unit_time():
    from rog.inference.live import Pacer, Unpaced

    pace = Pacer(lambda u, frac: 0.02 * frac if u == 0 else 0.0)
    t0 = pace.start()
    pace(0, 1.0)
    pace(0, 0.5)
    pace(1, 1.0)
    assert pace.end() - t0 >= 0.03 - 1e-4
    free = Unpaced()
    t0 = free.start()
    free(0, 1.0)
    assert free.end() - t0 < 0.01


def test_cuda_server_falls_back_to_the_paced_cpu_in_one_line(monkeypatch):
    import torch

    from rog.inference import runner as R

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    dev, note = R.resolve_server_device("cuda")
    assert dev == "cpu" and "\n" not in note and "--server-device cuda" in note and "paced" in note
    assert R.resolve_server_device("cpu") == ("cpu", None)
    with pytest.raises(ValueError, match="--server-device"):
        R.resolve_server_device("tpu")


def test_cuda_profile_is_unpaced_and_factor_one(monkeypatch, vgg):
    """The CUDA code path run with CPU tensors: the server's curves come from the device it names, factor 1."""
    import rog.inference.profiler as P
    from rog.inference.live import Unpaced, server_pacer

    calls = []
    real = P.profile_units

    def fake_units(graph, repeats=5, seed=0, device="cpu"):
        calls.append(device)
        return real(graph, 1, seed, "cpu")

    monkeypatch.setattr(P, "profile_units", fake_units)
    monkeypatch.setattr(P, "profile_curves", lambda graph, cpu_s, side, repeats=5, device="cpu", **k: (
        calls.append(f"{side}:{device}") or tuple(((1.0, t),) for t in cpu_s)))
    monkeypatch.setattr(type(vgg), "to", lambda self, device: self)
    t = P.profile(vgg, 30.0, 3.0, repeats=1, server_device="cuda")
    assert calls == ["cpu", "robot:cpu", "cuda", "server:cuda"]
    assert t.server_device == "cuda" and t.server_factor == 1.0 and t.robot_factor == 30.0
    monkeypatch.setattr(torch_cuda(), "synchronize", lambda: None)
    assert isinstance(server_pacer(t), Unpaced)
    assert not isinstance(server_pacer(DeviceTimes(t.cpu_s, 30.0, 3.0)), Unpaced)


def torch_cuda():
    import torch

    return torch.cuda


def test_new_flags_are_checked_in_one_line():
    from rog.inference.experiment import build_parser, check_args

    a = build_parser().parse_args(["sweep", "--sweep-plans", "splits"])
    check_args(a)
    assert a.sweep_kinds == ["splits"] and a.split_costs == "measured" and a.server_device == "cpu"
    bad = build_parser().parse_args(["sweep", "--sweep-plans", "cuts,layers"])
    with pytest.raises(ValueError, match="--sweep-plans 'cuts,layers'"):
        check_args(bad)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--server-device", "tpu"])


@pytest.mark.gpu
def test_cuda_server_half_equals_the_whole_forward():
    """On a GPU machine: the server's units on CUDA, the robot's on the CPU, joined like the live executor;
    and the GPU profile (factor 1, curves measured there).  A gpu test: skipped where torch sees no CUDA."""
    import torch
    from rog.inference.live import OUTPUT_TOL, exact_cuda
    from rog.inference.split import head, run_units, segment_rows, server_input, tail

    exact_cuda()
    cpu_g = capture(build_model("vgg19", 0), INPUT_SHAPE)
    gpu_g = capture(build_model("vgg19", 0), INPUT_SHAPE).to("cuda")
    img = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(0))
    ref = cpu_g.run_full(img)
    rtol, atol = OUTPUT_TOL["cuda"]
    for plan in (Plan(0, 10, 0.4, "server"), Plan(5, 19, 0.6, "robot")):
        fl = flows(cpu_g, plan)
        with torch.no_grad():
            t_i = head(cpu_g, plan, img)
            sent, lo = server_input(fl, t_i)
            srv = run_units(gpu_g, plan.i, plan.j, sent.cuda(), lo, segment_rows(fl, "server"))
            rob = run_units(cpu_g, plan.i, plan.j, t_i, 0, segment_rows(fl, "robot"))
            g = gpu_g if plan.merge == "server" else cpu_g
            t_j = torch.cat([rob, srv.cpu()], 2).to("cuda" if plan.merge == "server" else "cpu")
            out = tail(g, plan, t_j).cpu()
        assert torch.allclose(out, ref, rtol=rtol, atol=atol)
    t = profile(cpu_g, 30.0, 3.0, repeats=3, server_device="cuda")
    assert t.server_device == "cuda" and t.server_factor == 1.0 and t.server_curve is not None
    assert next(cpu_g.model.parameters()).device.type == "cpu"  # the profile moved the graph back
