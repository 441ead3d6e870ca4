"""The parameter server's view of the global model: its loss (ADSP's scheduler) and its loss and accuracy
on one time grid for every system (:mod:`rog.runtime.global_eval`, ``--global-eval-every-s``).  Imports
torch; only a PS that needs it loads it.

The PS holds no model, only ``total``, the sum of every committed push (weighted 1/W): its model is
the initial one minus ``total``.  :func:`make_global_eval` builds the run's initial model once (the
workers' start: the pre-trained one, or a from-scratch model's seeded random start) and returns
``evaluate(total) -> (loss, accuracy_pct)`` of ``w0 - total`` on one fixed held-out subset of the
workload's test set (the same images at every sample, so successive samples differ only by the
model; the released ADSP code drew 10 fresh training batches per sample).  Batch norm layers use the
subset's own statistics: the PS has no running statistics of its own (each worker keeps its local
ones, adapted to its data), and the pre-trained ones do not match the adapted weights, which made the
global loss rise while every worker's accuracy rose.  One lock serialises calls from the scheduler
and the evaluator threads (they share one model).
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np
from .run_config import RunConfig

HELD_OUT_IMAGES = 512  # images of the fixed subset (quick: a third of the noisy test set)
HELD_OUT_SEED = 12345  # which images


def make_global_eval(cfg: RunConfig, n_images: int = HELD_OUT_IMAGES) -> Callable[[np.ndarray], tuple[float, float]]:
    """``evaluate(total) -> (loss, accuracy_pct)`` of the run in ``cfg`` (``config.yaml``) at ``w0 - total``."""
    import torch
    import torch.nn.functional as F

    from ..workloads.registry import make_workload

    torch.set_num_threads(1)
    wl = make_workload(cfg.to_dict())
    model = wl.pretrained_model(cfg.workload.model)
    model.eval()  # no stochastic depth; batch norm below uses the held-out batch's own statistics
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.train()
    params = list(model.parameters())
    w0 = np.concatenate([p.detach().reshape(-1).numpy() for p in params]).astype(np.float32)
    x, y = wl.test_set()
    pick = np.sort(np.random.default_rng(HELD_OUT_SEED).permutation(x.shape[0])[: min(n_images, x.shape[0])])
    idx = torch.from_numpy(pick)
    x, y = x[idx], y[idx]
    sizes = [p.numel() for p in params]
    lock = threading.Lock()

    @torch.no_grad()
    def evaluate(total: np.ndarray) -> tuple[float, float]:
        if total.shape != w0.shape:
            raise ValueError(f"total has {total.size} elements, the model {w0.size}")
        flat = torch.from_numpy(w0 - total)
        with lock:
            for p, chunk in zip(params, torch.split(flat, sizes)):
                p.copy_(chunk.view_as(p))
            out = model(x)
        return float(F.cross_entropy(out, y)), 100.0 * float((out.argmax(1) == y).float().mean())

    return evaluate
