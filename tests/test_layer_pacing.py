"""Per-layer compute pacing (--pacing layer): deadlines by hand on a fake clock, shares measured on a model
with known per-layer costs, a sequential worker's compute time against end-of-iteration pacing, a segmented
schedule whose push overlaps the paced backward pass, and the flag's checks."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from rog.errors import ConfigError
from rog.experiment import schedule_options as SCH
from rog.experiment.cli import build_parser, parse_args
from rog.runtime import EventLog
from rog.schedules.grouping import group_layers
from rog.schedules import hooks as hooks_mod
from rog.schedules import pacing as pacing_mod
from rog.schedules.pacing import LayerPacer, measure_layer_compute
from benchmarks.timing import pacing as TP
from conftest import run_ps_team
from test_schedules_options import ns
from test_schedules_runtime import batches, conv_model


class FakeClock:
    """A clock that only moves when code sleeps or computes (``advance``)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def test_deadlines_by_hand_on_a_fake_clock():
    clock = FakeClock()
    # per-layer compute 1, 2, 1 (forward) and 2, 3, 1 (backward): shares of 10
    pacer = LayerPacer([1, 2, 1], [2, 3, 1], clock=clock, sleep=clock.advance)
    pacer.begin_pass(2.0)
    ends = []
    pacer.begin_forward()
    for j in range(3):
        clock.advance(0.05)  # each layer's real compute
        pacer.forward_done(j)
        ends.append(clock.t)
    pacer.begin_backward()
    for j in (2, 1, 0):
        clock.advance(0.05)
        pacer.backward_done(j)
        ends.append(clock.t)
    # by hand: forward ends at 2 x (0.1, 0.3, 0.4); backward starts at 0.8 and ends layer 2, 1, 0 at
    # 0.8 + 2 x (0.1, 0.4, 0.6)
    np.testing.assert_allclose(ends, [0.2, 0.6, 0.8, 1.0, 1.6, 2.0], atol=1e-12)
    # the sleeps fill the budget: 2.0 - 6 x 0.05
    assert pacer.take_slept() == pytest.approx(1.7, abs=1e-12)
    assert pacer.take_slept() == 0.0


def test_an_overrun_is_caught_up_and_a_wait_is_not_compute():
    clock = FakeClock()
    pacer = LayerPacer([1, 2, 1], [2, 3, 1], clock=clock, sleep=clock.advance)
    pacer.begin_pass(2.0)
    pacer.begin_forward()
    clock.advance(0.5)  # layer 0 runs over its 0.2 s
    assert pacer.forward_done(0) == 0.0
    clock.advance(0.05)
    assert pacer.forward_done(1) == pytest.approx(0.05)  # layer 1 ends at its deadline 0.6 all the same
    clock.advance(0.3)  # waiting for layer 2's pull segment ...
    pacer.shift(0.3)  # ... moves the forward deadlines
    clock.advance(0.05)
    pacer.forward_done(2)
    assert clock.t == pytest.approx(0.8 + 0.3)
    # a pass slower than its budget everywhere is not slowed further
    pacer.begin_pass(0.0)
    pacer.begin_backward()
    clock.advance(0.1)
    assert pacer.backward_done(2) == 0.0 and pacer.backward_done(0) == 0.0


def test_bad_pacer_input():
    with pytest.raises(ValueError, match="sum to 0"):
        LayerPacer([0, 0], [0, 0])
    with pytest.raises(ValueError, match="one length"):
        LayerPacer([1, 2], [1])
    with pytest.raises(ValueError, match="budget_s"):
        LayerPacer([1], [1]).begin_pass(-1.0)


def test_measured_shares_follow_known_layer_costs(monkeypatch):
    """Layer costs 0.05 / 0.15 s forward and 0.10 / 0.20 s backward on a fake clock (the hooks' clock moves
    only when a layer "computes"): shares exactly 0.1, 0.3 and 0.2, 0.4 of 0.5 s.  A layer's backward time
    runs from the previous layer's gradients to its own: the cost on the layer's output runs first in its
    backward, so it is the layer's backward cost.  Measured with real sleeps: benchmarks/timing/pacing.py."""
    clock = FakeClock()
    monkeypatch.setattr(hooks_mod, "time", SimpleNamespace(monotonic=clock, sleep=clock.advance))
    model = TP.costly_model(2.5, sleep=clock.advance)
    x, y = TP.costly_batch()
    layers = group_layers(model, x[:1])
    assert len(layers) == 2
    bn = [b.clone() for b in model.buffers()]
    fc, bc = measure_layer_compute(model, layers, x, y, nn.functional.cross_entropy, passes=3)
    np.testing.assert_allclose(np.r_[fc, bc], [0.05, 0.15, 0.10, 0.20], atol=1e-9)
    total = fc.sum() + bc.sum()
    np.testing.assert_allclose(np.r_[fc, bc] / total, TP.SHARES, atol=1e-9)
    assert all(p.grad is None for p in model.parameters())  # restored
    assert all(torch.equal(a, b) for a, b in zip(bn, model.buffers()))


def test_hooks_pace_each_layer_to_its_share_of_the_budget_on_a_fake_clock(monkeypatch):
    """A pass of the costly model paced to 1.0 s on a fake clock: each layer's forward and backward take its
    share (0.1, 0.3; 0.2, 0.4 of the budget, hand-computed from the known costs), and the sleeps fill the
    rest (1.0 - 0.2 s of real cost)."""
    clock = FakeClock()
    monkeypatch.setattr(hooks_mod, "time", SimpleNamespace(monotonic=clock, sleep=clock.advance))
    monkeypatch.setattr(pacing_mod, "time", SimpleNamespace(monotonic=clock, sleep=clock.advance))
    model = TP.costly_model(sleep=clock.advance)
    passes = TP.costly_passes(model)
    passes.pacer = passes.hooks.pacer = LayerPacer(*zip(*TP.COSTS_S), clock=clock, sleep=clock.advance)
    p = TP.paced_pass(model, passes, 1.0, clock=clock)
    assert p["wall_s"] == pytest.approx(1.0, abs=1e-9)
    assert p["slept_s"] == pytest.approx(1.0 - 0.2, abs=1e-9)  # the costs are compute; the sleeps are the rest
    np.testing.assert_allclose(p["fc"] + p["bc"], TP.SHARES, atol=1e-9)


def test_a_real_paced_pass_takes_at_least_its_budget():
    """The same pass with real sleeps: no shorter than the 1.0 s budget (the deadlines are floors), each
    layer's end no earlier than its deadline, and not far off (under 5 x the budget even on a loaded machine).
    Its accuracy (1.0 +- 0.05 s, each share +- 0.03): benchmarks/timing/pacing.py (bench)."""
    model = TP.costly_model()
    p = TP.paced_pass(model, TP.costly_passes(model), 1.0)
    assert 1.0 <= p["wall_s"] < 5.0
    assert 0.0 < p["slept_s"] <= p["wall_s"] - 0.2 + 1e-3  # the real costs are 0.2 s of the pass
    assert np.all(np.cumsum(p["fc"]) >= np.cumsum(TP.SHARES[:2]) - 1e-3)  # forward deadlines 0.1, 0.4
    assert np.all(np.cumsum(p["bc"][::-1]) >= np.cumsum(TP.SHARES[2:][::-1]) - 1e-3)  # backward: layer 1 first


@pytest.mark.bench
def test_bench_measured_shares_and_a_paced_pass_match_real_time():
    for f in [TP.measured_shares(), *TP.paced_pass_figures()]:
        assert f["ok"], f


def run_team(tmp_path, name, *, schedule="sequential", pacing="iteration", target_s=0.15, n_iter=6, n_workers=1,
             rate_mbit=None):
    """``n_workers`` BSP workers in threads over in-process links (the test harness), compute paced to
    ``target_s``; returns each worker's event file, and records the layers' sleeps in LAYER_SLEPT."""
    def team(ps, body, n):
        run_ps_team(ps, body, n, worker_join_s=2 * TP.TEAM_TIMEOUT_S, ps_join_s=TP.TEAM_TIMEOUT_S)

    files, LAYER_SLEPT[name] = TP.run_layer_team(tmp_path, name, model=conv_model, data=batches, team=team,
                                                 schedule=schedule, pacing=pacing, target_s=target_s, n_iter=n_iter,
                                                 n_workers=n_workers, rate_mbit=rate_mbit)
    return files


LAYER_SLEPT: dict[str, list[float]] = {}  # run name -> the layers' sleeps per iteration (sequential, per-layer)
_records = TP.records


def test_sequential_worker_computes_at_least_its_target_under_layer_pacing(tmp_path):
    """A real BSP worker (plain engine, the worker loop's own iteration): under either pacing each compute
    record lasts at least the target and holds every sleep; under per-layer pacing the layers' sleeps are
    taken every iteration and counted in the record, and the layers slept unless the machine was too
    loaded to pace (real compute above half the target everywhere); the compute is not far off
    end-of-iteration pacing's (under 5 x).  The 10 % agreement and the 0.8 share slept in the layers:
    benchmarks/timing/pacing.py (bench)."""
    target = 0.15
    med, real = {}, {}
    for mode in ("iteration", "layer"):
        f = run_team(tmp_path, mode, pacing=mode, target_s=target)[0]
        recs = _records(f, "compute")
        assert len(recs) == 6
        if mode == "layer":
            assert len(LAYER_SLEPT[mode]) == 6
            assert all(r["sleep_s"] >= s - 1e-9 for r, s in zip(recs, LAYER_SLEPT[mode]))  # the layers' sleeps counted
        recs = recs[1:]  # the first iteration has no measure of the compute outside the passes
        med[mode] = statistics.median(r["duration_s"] for r in recs)
        real[mode] = [r["duration_s"] - r["sleep_s"] for r in recs]
        assert all(r["duration_s"] >= target * 0.99 for r in recs)
        assert all(0.0 <= r["sleep_s"] <= r["duration_s"] for r in recs)
    assert LAYER_SLEPT["iteration"] == []  # end-of-iteration pacing: no layer sleeps
    assert max(LAYER_SLEPT["layer"][1:]) > 0 or min(real["layer"]) > 0.5 * target, (LAYER_SLEPT, real)
    assert med["layer"] < 5 * med["iteration"], med


def test_segmented_push_overlaps_the_paced_backward_pass(tmp_path):
    """LBL under per-layer pacing (0.3 s per iteration): the push's first segments leave while the paced
    backward pass still runs, visible as overlapped time in the overlap records and as a push that starts
    before the compute ends.  How much overlaps (a quarter of the backward pass, a 0.02 s lead, 0.1 s
    slept): benchmarks/timing/pacing.py (bench)."""
    f = run_team(tmp_path, "lbl", schedule="lbl", pacing="layer", target_s=0.3, n_iter=4, rate_mbit=40.0)[0]
    ov = _records(f, "overlap")
    comp = {r["iteration"]: r for r in _records(f, "compute")}
    push = {r["iteration"]: r for r in _records(f, "push")}
    assert len(ov) == 4
    for r in ov:
        assert r["bwd_segments"] == 3
        # the backward pass is paced to its share of 0.3 s (0.6 of the pass's share of the budget at most)
        assert r["bwd_compute_s"] >= 0.05 and r["overlap_s"] > 0, r
        c = comp[r["iteration"]]
        assert push[r["iteration"]]["t_s"] < c["t_s"] + c["duration_s"]  # the push began before compute ended
        assert c["duration_s"] >= 0.3 * 0.99
        assert c["sleep_s"] > 0 or c["duration_s"] - c["sleep_s"] > 0.15, c  # paced, unless compute overran


@pytest.mark.bench
def test_bench_layer_pacing_matches_iteration_pacing_and_overlaps_the_push(tmp_path):
    for f in TP.sequential_figures(tmp_path / "seq") + TP.lbl_overlap_figures(tmp_path / "lbl"):
        assert f["ok"], f


def test_unpaced_segmented_schedule_has_no_sleep(tmp_path):
    """The same schedule with no pacing target: nothing sleeps (the segmented schedules as before)."""
    f = run_team(tmp_path, "lbl0", schedule="lbl", pacing="layer", target_s=None, n_iter=2)[0]
    assert all(r["sleep_s"] == 0.0 for r in _records(f, "compute"))


def test_flag_default_and_the_refusal_under_iteration_pacing():
    assert build_parser().parse_args([]).pacing == "iteration"
    assert build_parser().parse_args(["--pacing", "layer"]).pacing == "layer"
    with pytest.raises(SystemExit):  # checked by rog.schedules.options.Pacing, one line, exit 2
        parse_args(["--pacing", "pass"])
    with pytest.raises(ConfigError, match=r"^--schedule dynacomm .*end-of-iteration pacing \(0.28 s\).*--pacing layer"):
        SCH.resolve(ns(), 0.28, "cpu")
    assert SCH.resolve(ns(pacing="layer"), 0.28, "cpu") == dict(name="dynacomm", epoch_iterations=None)
    SCH.check(ns(schedule="sequential"), 0.28, "cpu")  # the sequential schedule paces either way


def test_layer_pacing_refuses_ddp_and_cuda():
    assert SCH.resolve_pacing(ns(library="ROG", pacing="layer"), "cpu") == "layer"
    assert SCH.resolve_pacing(ns(library="DDP", pacing="iteration"), "cpu") == "iteration"
    with pytest.raises(ConfigError, match="^--pacing layer: DDP"):
        SCH.resolve_pacing(ns(library="DDP", pacing="layer"), "cpu")
    with pytest.raises(ConfigError, match="--device cpu"):
        SCH.resolve_pacing(ns(pacing="layer"), "cuda:0")


def test_config_records_the_pacing(tmp_path):
    from rog.experiment.cli import parse_args
    from rog.experiment.config import resolve_config

    argv = ["--testbed", "loopback", "-c", "none", "--library", "BSP", "--profile", "quick-cpu", "--workers", "2",
            "--result-dir", str(tmp_path)]
    assert resolve_config(parse_args(argv))["pacing"] == "iteration"
    cfg = resolve_config(parse_args(argv + ["--pacing", "layer", "--schedule", "dynacomm"]))
    assert cfg["pacing"] == "layer" and cfg["compute_s"] == pytest.approx(0.28)
    assert cfg["schedule"]["name"] == "dynacomm"


def test_bench_reads_medians_from_event_logs(tmp_path):
    """rog.papers.dynacomm.pacing_bench's reading of a run: per worker the median compute record, sleep and start-to-start time
    after the warm-up, the mean over workers (values by hand)."""
    from rog.papers.dynacomm.pacing_bench import read_run

    for k, (durs, starts) in enumerate([([9.0, 0.3, 0.2, 0.4], [0.0, 5.0, 6.0, 8.0]),
                                        ([9.0, 0.5, 0.5, 0.5], [0.0, 5.0, 5.5, 6.0])]):
        with EventLog(tmp_path / f"events-w{k}.jsonl", f"w{k}", "t", 0.0) as ev:
            for i, (d, t) in enumerate(zip(durs, starts), start=1):
                ev.write("compute", t, iteration=i, duration_s=d, sleep_s=d / 2)
    got = read_run(tmp_path, warmup=1)
    # w0: compute median(0.3, 0.2, 0.4) = 0.3, periods (1, 2) -> 1.5; w1: 0.5 and (0.5, 0.5) -> 0.5
    assert got["compute_s"] == pytest.approx((0.3 + 0.5) / 2)
    assert got["sleep_s"] == pytest.approx((0.15 + 0.25) / 2)
    assert got["iteration_s"] == pytest.approx((1.5 + 0.5) / 2)
