"""Per-layer compute pacing against real time (``--pacing layer``, rog.schedules.pacing): a model with known
per-layer costs (:func:`costly_model`), its measured layer shares, a pass paced to 1 s, and a BSP worker's
compute under per-layer against end-of-iteration pacing (:func:`run_layer_team`)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rog.codecs.compression import RawCodec
from rog.experiment.worker_loop import plain_iteration
from rog.optim import ROGOptimizer, WorkerOptions
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import EventLog, ParameterServer, read_events
from rog.schedules.grouping import group_layers
from rog.schedules.pacing import LayerPacer, PacedPasses, measure_layer_compute
from rog.schedules.setup import make_paced_passes
from rog.schedules.trainer import ScheduledTrainer

from .figures import at_least, figure
from .team import TIMEOUT_S as TEAM_TIMEOUT_S, run_threads

COSTS_S = ((0.02, 0.04), (0.06, 0.08))  # (forward, backward) seconds of the two costly layers at scale 1
SHARES = [0.1, 0.3, 0.2, 0.4]  # their shares of the pass: forward 0, 1, backward 0, 1 (of 0.2 s)


class _SleepBack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s, sleep):
        ctx.s, ctx.sleep = s, sleep
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        ctx.sleep(ctx.s)
        return g, None, None


class Costly(nn.Module):
    """A linear layer whose forward costs ``fwd_s`` and whose backward costs ``bwd_s`` (``sleep`` calls: real
    sleeps, or a fake clock's advance)."""

    def __init__(self, fwd_s: float, bwd_s: float, sleep=time.sleep) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.fwd_s, self.bwd_s, self.sleep = fwd_s, bwd_s, sleep

    def forward(self, x):
        out = self.lin(x)
        self.sleep(self.fwd_s)  # after the linear module (the layer's gate): inside this layer's span
        return _SleepBack.apply(out, self.bwd_s, self.sleep)  # in backward: before this layer's weight gradients


def costly_model(scale: float = 1.0, sleep=time.sleep) -> nn.Sequential:
    """Two :class:`Costly` layers at ``scale`` x :data:`COSTS_S`."""
    torch.manual_seed(0)
    return nn.Sequential(*(Costly(f * scale, b * scale, sleep) for f, b in COSTS_S))


def costly_batch():
    """A batch of 3 for :func:`costly_model`."""
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2])


def measured_shares() -> dict:
    """Layer costs 0.05 / 0.15 s forward and 0.10 / 0.20 s backward, measured with real sleeps: shares of the pass."""
    model = costly_model(2.5)
    x, y = costly_batch()
    layers = group_layers(model, x[:1])
    fc, bc = measure_layer_compute(model, layers, x, y, nn.functional.cross_entropy, passes=3)
    return figure("layer_pacing.measured_shares", list(np.r_[fc, bc] / (fc.sum() + bc.sum())), SHARES, 0.04)


def paced_pass(model, passes: PacedPasses, budget_s: float = 1.0, clock=time.monotonic) -> dict:
    """One forward + backward pass of the costly ``model`` under ``passes``, paced to ``budget_s``: its wall
    time on ``clock``, the sleeps and the per-layer times the hooks measured; the hooks are removed."""
    x, y = costly_batch()
    passes.begin_iteration(budget_s, [1])
    t0 = clock()
    passes.begin_pass(0)
    loss = nn.functional.cross_entropy(model(x), y)
    passes.end_forward()
    loss.backward()
    passes.end_backward()
    wall = clock() - t0
    slept = passes.take_slept()
    passes.remove()
    return dict(wall_s=wall, slept_s=slept, fc=list(passes.hooks.fc), bc=list(passes.hooks.bc))


def costly_passes(model) -> PacedPasses:
    """Per-layer pacing of the costly ``model`` by its known costs."""
    return PacedPasses(model, group_layers(model, costly_batch()[0][:1]), *zip(*COSTS_S))


def paced_pass_figures() -> list[dict]:
    """A real 1 s pass: wall 1.0 s +- 0.05, sleeps the budget less the 0.2 s of real cost, each layer its share."""
    model = costly_model()
    p = paced_pass(model, costly_passes(model), 1.0)
    return [figure("layer_pacing.pass_wall_s", p["wall_s"], 1.0, 0.05),
            figure("layer_pacing.pass_slept_s", p["slept_s"], 1.0 - 0.2, 0.05),
            figure("layer_pacing.pass_layer_s", p["fc"] + p["bc"], SHARES, 0.03)]


def small_conv(seed: int = 0) -> nn.Sequential:
    """Three layers (two conv + BatchNorm, one linear) on 8x8 images of 3 channels, 5 classes."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.Conv2d(6, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(24, 5))


def small_batches(k: int, n: int) -> list:
    """``n`` batches of 4 for worker ``k``."""
    g = torch.Generator().manual_seed(5 + 11 * k)
    return [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(n)]


def run_layer_team(tmp_path, name: str, *, model=small_conv, data=small_batches, team=run_threads,
                   schedule: str = "sequential", pacing: str = "iteration", target_s: float | None = 0.15,
                   n_iter: int = 6, n_workers: int = 1, rate_mbit: float | None = None):
    """``n_workers`` BSP workers in threads over in-process links (``team(ps, body, n)``), compute paced to
    ``target_s``; returns each worker's event file and, under sequential per-layer pacing, the layers'
    sleeps per iteration."""
    Path(tmp_path).mkdir(parents=True, exist_ok=True)
    models = [model() for _ in range(n_workers)]
    part = RowPartition.from_module(models[0])
    ps = ParameterServer(part, n_workers, make_policy("BSP", None), RawCodec(), join_timeout_s=TEAM_TIMEOUT_S,
                         wait_timeout_s=TEAM_TIMEOUT_S, chunk_bytes=256)
    files, layer_slept = {}, []

    def worker(k, link):
        files[k] = tmp_path / f"{name}-w{k}.jsonl"
        batches = data(k, n_iter)
        with EventLog(files[k], f"w{k}", "t", 0.0) as events:
            costs = None
            if pacing == "layer":
                layers = group_layers(models[k], batches[0][0][:1])
                costs = (layers, *measure_layer_compute(models[k], layers, *batches[0], nn.functional.cross_entropy))
            opt = ROGOptimizer(models[k].parameters(), server=link, worker_id=k, lr=0.05, policy="BSP",
                               compression="none",
                               options=WorkerOptions(chunk_bytes=256, events=events, compute_target_s=target_s,
                                                     rate_mbit=rate_mbit))
            tr = paced = None
            if schedule != "sequential":
                tr = ScheduledTrainer(models[k], opt, schedule, batches[0][0][:1], epoch_iterations=100,
                                      pacer=None if costs is None else LayerPacer(costs[1], costs[2]))
            elif costs is not None:
                paced = make_paced_passes(models[k], costs)
                take = paced.take_slept
                paced.take_slept = lambda: layer_slept.append(take()) or layer_slept[-1]
            for x, y in batches:
                if tr is not None:
                    tr.iteration(x, y, nn.functional.cross_entropy)
                else:
                    plain_iteration(models[k], opt, [(x, y)], [1], "cpu", paced)
            if tr is not None:
                tr.close()
            if paced is not None:
                paced.remove()
            opt.close()

    team(ps, worker, n_workers)
    return files, layer_slept


def records(path, kind: str) -> list[dict]:
    """The events of ``kind`` in one event file."""
    return [r for r in read_events(path)[1] if r["kind"] == kind]


def sequential_figures(tmp_path, target_s: float = 0.15) -> list[dict]:
    """A BSP worker's compute records under per-layer pacing against end-of-iteration pacing's (within 10 %),
    its sleeps against the target less its real compute (within 0.02 s), and the share slept inside the
    layers (at least 0.8)."""
    med, out = {}, []
    for mode in ("iteration", "layer"):
        files, layer_slept = run_layer_team(tmp_path, f"seq-{mode}", pacing=mode, target_s=target_s)
        recs = records(files[0], "compute")[1:]  # the first iteration has no measure of the compute outside the passes
        med[mode] = statistics.median(r["duration_s"] for r in recs)
        if mode == "layer":
            sleep = statistics.median(r["sleep_s"] for r in recs)
            real = statistics.median(r["duration_s"] - r["sleep_s"] for r in recs)
            out.append(figure("layer_pacing.sequential_sleep_s", sleep, target_s - real, 0.02))
            in_layers = statistics.median(layer_slept[1:]) / sleep if sleep > 0 else 0.0  # no sleep: compute overran
            out.append(at_least("layer_pacing.sequential_in_layer_share", in_layers, 0.8))
    out.insert(0, figure("layer_pacing.sequential_compute_s", med["layer"], med["iteration"], 0.10, rel=True,
                         target_s=target_s))
    return out


def lbl_overlap_figures(tmp_path, target_s: float = 0.3) -> list[dict]:
    """LBL under per-layer pacing at 40 Mbit/s: the push overlaps at least a quarter of the paced backward
    pass, begins at least 0.02 s before the compute ends, and the iteration slept more than 0.1 s."""
    files, _ = run_layer_team(tmp_path, "lbl", schedule="lbl", pacing="layer", target_s=target_s, n_iter=4,
                              rate_mbit=40.0)
    comp = {r["iteration"]: r for r in records(files[0], "compute")}
    push = {r["iteration"]: r for r in records(files[0], "push")}
    ov = records(files[0], "overlap")
    share = min(r["overlap_s"] / r["bwd_compute_s"] for r in ov)
    lead = min(comp[r["iteration"]]["t_s"] + comp[r["iteration"]]["duration_s"] - push[r["iteration"]]["t_s"]
               for r in ov)
    return [at_least("layer_pacing.lbl_overlap_share", share, 0.25),
            at_least("layer_pacing.lbl_push_lead_s", lead, 0.02),
            at_least("layer_pacing.lbl_sleep_s", min(c["sleep_s"] for c in comp.values()), 0.1)]
