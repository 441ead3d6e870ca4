"""Why label skew hurts synchronous training: an in-process BSP replica that separates the causes.

With BSP every step applies the average of all workers' gradients.  When each worker's loss is a mean
over its own batch and the batches are equal, that average is the gradient of the union batch, and a
union of ten one-label batches covers every label: for a model without per-worker state the skewed
step is an IID (stratified) step.  Momentum and weight decay are linear in the gradient, so keeping
them per worker changes nothing either.  What is not linear is BatchNorm:

* in train mode each worker normalises with the mean and variance of its own one-label batch, so the
  gradients it computes are those of a different function than the one tested;
* each worker keeps its own running statistics (buffers are never synchronised, as in the released
  code), and the tested model (worker 0's) normalises test images with statistics of one label.

:func:`bsp_replica` trains the way the toolkit's BSP does (per-worker batches and BatchNorm buffers,
the averaged gradient, Nesterov momentum 0.9 and weight decay 5e-4 as DEFSGDM's rule) and tests the
model twice: with worker 0's running statistics (what a run reports) and with statistics re-estimated
on the union of the workers' data (``recalibrated``, which removes the second cause only).  A model
with GroupNorm (no batch statistics, no buffers) is the control with neither cause.

Run: ``python scripts/noniid_mechanism.py [--iterations 60]``; the JSON on the last line holds every
variant's accuracies.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

__all__ = ["bsp_replica", "VARIANTS", "main"]

# (model, learning rate): the pre-trained ConvMLP at the rate the earlier non-IID steps used, and the
# from-scratch CNNs at ScaDLES's ResNet152 rate (0.1), the steps' rate.
VARIANTS = (("convmlp_quick", 1e-3), ("cnn_bn_quick", 0.1), ("cnn_gn_quick", 0.1))


def _buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_buffers()}


def _load_buffers(model: nn.Module, bufs: dict[str, torch.Tensor]) -> None:
    own = dict(model.named_buffers())
    for k, v in bufs.items():
        own[k].copy_(v)


def _recalibrate(model: nn.Module, x: torch.Tensor, batch_size: int = 256) -> None:
    """Re-estimate every BatchNorm's running mean and variance as the plain average over ``x``."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
    was = model.training
    model.train()
    with torch.no_grad():
        for i in range(0, x.shape[0], batch_size):
            model(x[i : i + batch_size])
    for m, mom in zip(bns, saved):
        m.momentum = mom
    model.train(was)


def bsp_replica(wl, model_name: str, lr: float, iterations: int, batch_size: int = 32, seed: int = 0) -> dict:
    """Train ``model_name`` BSP-style on ``wl``'s shards in one process; test accuracy with worker 0's
    BatchNorm statistics (``worker0``) and with statistics re-estimated on the union (``recalibrated``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = wl.pretrained_model(model_name)
    n = len(wl.shards)
    bufs = [_buffers(model) for _ in range(n)]
    feeds = [wl.worker_batches(k, batch_size, seed=seed) for k in range(n)]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for _ in range(iterations):
        opt.zero_grad(set_to_none=True)
        for k in range(n):
            _load_buffers(model, bufs[k])
            x, y = next(feeds[k])
            (loss_fn(model(x), y) / n).backward()
            bufs[k] = _buffers(model)
        opt.step()
    _load_buffers(model, bufs[0])
    worker0 = wl.evaluate(model)
    _recalibrate(model, torch.from_numpy(wl._x_ada))
    return dict(worker0=worker0, recalibrated=wl.evaluate(model))


def main(argv=None) -> int:
    from rog.workloads.quick import QuickWorkload

    ap = argparse.ArgumentParser(prog="python scripts/noniid_mechanism.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=100, help="BSP iterations per variant (default 100, as the steps)")
    ap.add_argument("--workers", type=int, default=10, help="workers (default 10: one label each)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.iterations < 1 or a.workers < 2:
        ap.error("--iterations must be >= 1 and --workers >= 2")
    torch.set_num_threads(1)
    out = dict(iterations=a.iterations, workers=a.workers, seed=a.seed, batch_size=32, runs=[])
    for part in ("iid", "labels:1"):
        wl = QuickWorkload(seed=a.seed, n_workers=a.workers, split=part)
        for model_name, lr in VARIANTS:
            t0 = time.perf_counter()
            r = bsp_replica(wl, model_name, lr, a.iterations, seed=a.seed)
            r.update(model=model_name, lr=lr, partition=part, time_s=round(time.perf_counter() - t0, 1))
            print(f"{model_name:14s} lr {lr:g} {part:9s} worker0 {100 * r['worker0']:.1f} %  "
                  f"recalibrated {100 * r['recalibrated']:.1f} %  ({r['time_s']} s)", flush=True)
            out["runs"].append(r)
    print(json.dumps(out))
    return 0
