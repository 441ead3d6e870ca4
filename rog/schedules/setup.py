"""A worker's side of the run's schedule and compute pacing, from its :class:`~rog.experiment.run_config.RunConfig`:
under ``pacing: layer`` the model's per-layer compute measured on this machine (:func:`layer_costs`), the plain
loop's paced passes (:func:`make_paced_passes`) and a segmented schedule's trainer (:func:`make_trainer`).
Torch is imported only when called.
"""

from __future__ import annotations

from rog.experiment.run_config import RunConfig


def layer_costs(cfg: RunConfig, model, wl, k: int, events):
    """Under ``pacing: layer``: ``(layers, fc, bc)``, the model's per-layer forward and backward seconds on
    one of worker ``k``'s mini-batches, measured here and logged as a ``pacing`` record; None otherwise."""
    if cfg.schedule.pacing != "layer":
        return None
    import torch.nn.functional as F

    from .grouping import group_layers
    from .pacing import CALIBRATION_PASSES, measure_layer_compute

    x, y = next(wl.worker_batches(k, cfg.workload.base_batch, seed=cfg.workload.seed))
    dev = next(model.parameters()).device
    x, y = x.to(dev), y.to(dev)
    layers = group_layers(model, x[:1])
    fc, bc = measure_layer_compute(model, layers, x, y, F.cross_entropy)
    events.write("pacing", mode="layer", n_layers=len(layers), passes=CALIBRATION_PASSES,
                 fwd_s=[float(v) for v in fc], bwd_s=[float(v) for v in bc])
    return layers, fc, bc


def make_paced_passes(model, costs):
    """The plain loop's :class:`~rog.schedules.pacing.PacedPasses` from :func:`layer_costs` (None: no per-layer pacing)."""
    if costs is None:
        return None
    from .pacing import PacedPasses

    return PacedPasses(model, *costs)


def make_trainer(cfg: RunConfig, model, opt, wl, k: int, costs=None):
    """The worker's :class:`~rog.schedules.trainer.ScheduledTrainer`, or None under ``sequential``;
    ``costs`` (:func:`layer_costs`) paces its layers."""
    sch, base_batch = cfg.schedule.plan, cfg.workload.base_batch
    if sch is None or sch.name == "sequential":
        return None
    from .pacing import LayerPacer
    from .trainer import ScheduledTrainer

    x, _ = next(wl.worker_batches(k, base_batch, seed=cfg.workload.seed))
    every = sch.epoch_iterations or max(1, len(wl.shards[k]) // base_batch)
    pacer = None if costs is None else LayerPacer(costs[1], costs[2])
    return ScheduledTrainer(model, opt, sch.name, x[:1].to(opt.device), epoch_iterations=every, pacer=pacer)
