"""Per-layer compute pacing (--pacing layer): deadlines by hand on a fake clock, shares measured on a model
with known per-layer costs, a sequential worker's compute time against end-of-iteration pacing, a segmented
schedule whose push overlaps the paced backward pass, and the flag's checks."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest
import torch
from torch import nn

from rog.errors import ConfigError
from rog.experiment import schedule_options as SCH
from rog.experiment.cli import build_parser
from rog.experiment.worker_loop import plain_iteration
from rog.optim import ROGOptimizer, WorkerOptions
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import EventLog, ParameterServer, read_events
from rog.codecs.compression import RawCodec
from rog.schedules.grouping import group_layers
from rog.schedules.hooks import LayerHooks
from rog.schedules.pacing import LayerPacer, PacedPasses, measure_layer_compute
from rog.schedules.trainer import ScheduledTrainer
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


class _SleepBack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        ctx.s = s
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        time.sleep(ctx.s)
        return g, None


class Costly(nn.Module):
    """A linear layer whose forward costs ``fwd_s`` and whose backward costs ``bwd_s`` (sleeps)."""

    def __init__(self, fwd_s: float, bwd_s: float) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.fwd_s, self.bwd_s = fwd_s, bwd_s

    def forward(self, x):
        out = self.lin(x)
        time.sleep(self.fwd_s)  # after the linear module (the layer's gate): inside this layer's span
        return _SleepBack.apply(out, self.bwd_s)  # in backward: before this layer's weight gradients


def costly_model(scale: float = 1.0):
    torch.manual_seed(0)
    return nn.Sequential(Costly(0.02 * scale, 0.04 * scale), Costly(0.06 * scale, 0.08 * scale))


def test_measured_shares_follow_known_layer_costs():
    """Layer costs 0.05 / 0.15 s forward and 0.10 / 0.20 s backward: shares 0.1, 0.3 and 0.2, 0.4 of 0.5 s
    (costs long against a loaded machine's wake-up delays, which add to every layer alike).
    A layer's backward time runs from the previous layer's gradients to its own: the sleep on the layer's
    output runs first in its backward, so it is the layer's backward cost."""
    model = costly_model(2.5)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
    layers = group_layers(model, x[:1])
    assert len(layers) == 2
    bn = [b.clone() for b in model.buffers()]
    fc, bc = measure_layer_compute(model, layers, x, y, nn.functional.cross_entropy, passes=3)
    total = fc.sum() + bc.sum()
    np.testing.assert_allclose(np.r_[fc, bc] / total, [0.1, 0.3, 0.2, 0.4], atol=0.04)
    assert all(p.grad is None for p in model.parameters())  # restored
    assert all(torch.equal(a, b) for a, b in zip(bn, model.buffers()))


def test_hooks_pace_each_layer_to_its_share_of_the_budget():
    """A real pass of the costly model paced to 1.0 s: each layer's forward and backward take its share
    (0.1, 0.3; 0.2, 0.4 of the budget, hand-computed from the known costs), and the sleeps fill the rest."""
    model = costly_model()
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
    layers = group_layers(model, x[:1])
    passes = PacedPasses(model, layers, [0.02, 0.06], [0.04, 0.08])
    passes.begin_iteration(1.0, [1])
    t0 = time.monotonic()
    passes.begin_pass(0)
    loss = nn.functional.cross_entropy(model(x), y)
    passes.end_forward()
    loss.backward()
    passes.end_backward()
    wall = time.monotonic() - t0
    slept = passes.take_slept()
    passes.remove()
    assert wall == pytest.approx(1.0, abs=0.05)
    assert slept == pytest.approx(1.0 - 0.2, abs=0.05)  # the costs are real compute; the sleeps are the rest
    np.testing.assert_allclose(passes.hooks.fc, [0.1, 0.3], atol=0.03)
    np.testing.assert_allclose(passes.hooks.bc, [0.2, 0.4], atol=0.03)


def run_team(tmp_path, name, *, schedule="sequential", pacing="iteration", target_s=0.15, n_iter=6, n_workers=1,
             rate_mbit=None):
    """``n_workers`` BSP workers in threads over in-process links, compute paced to ``target_s``; returns each
    worker's event file."""
    models = [conv_model() for _ in range(n_workers)]
    part = RowPartition.from_module(models[0])
    ps = ParameterServer(part, n_workers, make_policy("BSP", None), RawCodec(), join_timeout_s=20.0,
                         wait_timeout_s=20.0, chunk_bytes=256)
    files = {}
    layer_slept = LAYER_SLEPT[name] = []

    def worker(k, link):
        files[k] = tmp_path / f"{name}-w{k}.jsonl"
        data = batches(k, n_iter)
        with EventLog(files[k], f"w{k}", "t", 0.0) as events:
            costs = None
            if pacing == "layer":
                layers = group_layers(models[k], data[0][0][:1])
                costs = (layers, *measure_layer_compute(models[k], layers, *data[0], nn.functional.cross_entropy))
            opt = ROGOptimizer(models[k].parameters(), server=link, worker_id=k, lr=0.05, policy="BSP",
                               compression="none",
                               options=WorkerOptions(chunk_bytes=256, events=events, compute_target_s=target_s,
                                                     rate_mbit=rate_mbit))
            tr = paced = None
            if schedule != "sequential":
                from rog.schedules.pacing import LayerPacer

                tr = ScheduledTrainer(models[k], opt, schedule, data[0][0][:1], epoch_iterations=100,
                                      pacer=None if costs is None else LayerPacer(costs[1], costs[2]))
            elif costs is not None:
                paced = SCH.make_paced_passes(models[k], costs)
                take = paced.take_slept
                paced.take_slept = lambda: layer_slept.append(take()) or layer_slept[-1]
            for x, y in data:
                if tr is not None:
                    tr.iteration(x, y, nn.functional.cross_entropy)
                else:
                    plain_iteration(models[k], opt, [(x, y)], [1], "cpu", paced)
            if tr is not None:
                tr.close()
            if paced is not None:
                paced.remove()
            opt.close()

    run_ps_team(ps, worker, n_workers, ps_join_s=20.0)
    return files


LAYER_SLEPT: dict[str, list[float]] = {}  # run name -> the layers' sleeps per iteration (sequential, per-layer)


def _records(path, kind):
    return [r for r in read_events(path)[1] if r["kind"] == kind]


def test_sequential_worker_computes_as_long_under_layer_pacing(tmp_path):
    """A real BSP worker (plain engine, the worker loop's own iteration): the compute records under per-layer
    pacing match end-of-iteration pacing's within 10 %; the layers slept most of the target."""
    target = 0.15
    med = {}
    for mode in ("iteration", "layer"):
        f = run_team(tmp_path, mode, pacing=mode, target_s=target)[0]
        recs = _records(f, "compute")[1:]  # the first iteration has no measure of the compute outside the passes
        med[mode] = statistics.median(r["duration_s"] for r in recs)
        assert med[mode] >= target * 0.99
        if mode == "layer":
            real = [r["duration_s"] - r["sleep_s"] for r in recs]
            assert statistics.median(r["sleep_s"] for r in recs) == pytest.approx(target - statistics.median(real),
                                                                                  abs=0.02)
            # most of it slept inside the layers, not at the end of the iteration
            assert statistics.median(LAYER_SLEPT[mode][1:]) >= 0.8 * statistics.median(r["sleep_s"] for r in recs)
    assert abs(med["layer"] - med["iteration"]) <= 0.10 * med["iteration"], med


def test_segmented_push_overlaps_the_paced_backward_pass(tmp_path):
    """LBL under per-layer pacing (0.3 s per iteration): the push's first segments leave while the paced
    backward pass still runs, visible as overlapped time in the overlap records and as a push that starts
    before the compute ends."""
    f = run_team(tmp_path, "lbl", schedule="lbl", pacing="layer", target_s=0.3, n_iter=4, rate_mbit=40.0)[0]
    ov = _records(f, "overlap")
    comp = {r["iteration"]: r for r in _records(f, "compute")}
    push = {r["iteration"]: r for r in _records(f, "push")}
    assert len(ov) == 4
    for r in ov:
        assert r["bwd_segments"] == 3
        # the backward pass is paced to its share of 0.3 s; a real share of it overlaps the push
        assert r["bwd_compute_s"] >= 0.05 and r["overlap_s"] >= 0.25 * r["bwd_compute_s"], r
        c = comp[r["iteration"]]
        assert push[r["iteration"]]["t_s"] < c["t_s"] + c["duration_s"] - 0.02  # the push began before compute ended
        assert c["duration_s"] >= 0.3 * 0.99 and c["sleep_s"] > 0.1


def test_unpaced_segmented_schedule_has_no_sleep(tmp_path):
    """The same schedule with no pacing target: nothing sleeps (the segmented schedules as before)."""
    f = run_team(tmp_path, "lbl0", schedule="lbl", pacing="layer", target_s=None, n_iter=2)[0]
    assert all(r["sleep_s"] == 0.0 for r in _records(f, "compute"))


def test_flag_default_and_the_refusal_under_iteration_pacing():
    assert build_parser().parse_args([]).pacing == "iteration"
    assert build_parser().parse_args(["--pacing", "layer"]).pacing == "layer"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--pacing", "pass"])
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
