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

With ``--inject A,B`` the label-skewed runs are repeated with ScaDLES's (alpha, beta) injection in both
modes, through the runs' own batch wrapper (:class:`rog.streams.inject.InjectedBatches`): ``network``
with the same sender/receiver plan, the samples handed over in memory and added to the receiver's next
batch (in a run they cross the links and join the first batch drawn after they arrive), and ``local``.
Per seed it prints the gap recovered, ``(inject - skewed) / (IID - skewed)`` on the plateaus: many seeds
in minutes, where a run on the testbed gives one.

Run: ``python scripts/noniid_mechanism.py [--iterations 100] [--seeds 0,1,2] [--models cnn_bn_quick]
[--inject 0.25,0.25]``; the JSON on the last line holds every variant's accuracies.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

__all__ = ["bsp_replica", "InprocInjectExchange", "VARIANTS", "main"]

# (model, learning rate): the pre-trained ConvMLP at the rate the earlier non-IID steps used, and the
# from-scratch CNNs at ScaDLES's ResNet152 rate (0.1), the steps' rate.
VARIANTS = (("convmlp_quick", 1e-3), ("cnn_bn_quick", 0.1), ("cnn_gn_quick", 0.1), ("vgg_bn_quick", 0.1),
            ("cnn_bn_wide_quick", 0.1))


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


class InprocInjectExchange:
    """In-memory stand-in for the injection relay: ``client(k)`` has the relay client's ``send`` and
    ``drain``; what is sent during an iteration is delivered at :meth:`advance` (the next batch)."""

    def __init__(self, n_workers: int) -> None:
        self._pending: list[list] = [[] for _ in range(n_workers)]
        self._inbox: list[list] = [[] for _ in range(n_workers)]

    def advance(self) -> None:
        """End of an iteration: what was sent becomes receivable."""
        for k, items in enumerate(self._pending):
            self._inbox[k].extend(items)
            items.clear()

    def client(self, k: int) -> "_InprocClient":
        """Worker ``k``'s view (``send(dst, iteration, x, y) -> bytes``, ``drain()``)."""
        return _InprocClient(self, k)


class _InprocClient:
    """One worker's end of :class:`InprocInjectExchange`, with the relay client's interface."""

    def __init__(self, ex: InprocInjectExchange, k: int) -> None:
        self.ex, self.k = ex, k

    def send(self, dst, iteration, x, y) -> int:
        from rog.streams.inject_relay import HEADER_BYTES

        nbytes = HEADER_BYTES + 4 * int(x.size) + 8 * int(y.size)  # the relay's message: float32 images, int64 labels
        self.ex._pending[int(dst)].append((self.k, iteration, x.copy(), y.copy(), nbytes))
        return nbytes

    def drain(self) -> list:
        out, self.ex._inbox[self.k] = self.ex._inbox[self.k], []
        return out


def _feeds(wl, n: int, batch_size: int, seed: int, inject):
    """Each worker's batches, wrapped with ``inject = (alpha, beta, mode)`` (None: plain), and the exchange."""
    feeds = [wl.worker_batches(k, batch_size, seed=seed) for k in range(n)]
    if inject is None:
        return feeds, None
    from rog.streams.inject import InjectedBatches, local_pool

    alpha, beta, mode = inject
    ex = InprocInjectExchange(n) if mode == "network" else None
    out = [InjectedBatches(f, k, n, alpha, beta, seed, mode, exchange=ex.client(k) if ex else None,
                           pool=None if ex else local_pool(wl, k)) for k, f in enumerate(feeds)]
    return out, ex


def bsp_replica(wl, model_name: str, lr: float, iterations: int, batch_size: int = 32, seed: int = 0,
                eval_every: int = 10, inject: tuple[float, float, str] | None = None) -> dict:
    """Train ``model_name`` BSP-style on ``wl``'s shards in one process; test accuracy with worker 0's
    BatchNorm statistics (``worker0``) and with statistics re-estimated on the union (``recalibrated``)
    at the end, and ``plateau``: the mean of worker 0's last three tests, every ``eval_every`` iterations
    (the steps' rule).  ``inject = (alpha, beta, mode)`` adds ScaDLES's data injection; ``inject_samples`` and
    ``inject_bytes`` (the relay's message bytes) count what all workers sent."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = wl.pretrained_model(model_name)
    n = len(wl.shards)
    bufs = [_buffers(model) for _ in range(n)]
    feeds, exchange = _feeds(wl, n, batch_size, seed, inject)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    tests = []
    for it in range(1, iterations + 1):
        opt.zero_grad(set_to_none=True)
        for k in range(n):
            _load_buffers(model, bufs[k])
            x, y = next(feeds[k])
            (loss_fn(model(x), y) / n).backward()
            bufs[k] = _buffers(model)
        opt.step()
        if exchange is not None:
            exchange.advance()
        if it % eval_every == 0 or it == iterations:
            _load_buffers(model, bufs[0])
            tests.append(wl.evaluate(model))
    _load_buffers(model, bufs[0])
    worker0 = wl.evaluate(model)
    _recalibrate(model, torch.from_numpy(wl.adaptation_images()))
    sent = [(f.sent_samples, f.sent_bytes) for f in feeds if hasattr(f, "sent_bytes")]
    return dict(worker0=worker0, recalibrated=wl.evaluate(model), plateau=sum(tests[-3:]) / len(tests[-3:]),
                inject_samples=sum(n for n, _ in sent), inject_bytes=sum(b for _, b in sent),
                parameters=sum(p.numel() for p in model.parameters()))


def _runs(inject, skew: str = "labels:1"):
    """``(partition, inject)`` of each variant: IID, the ``skew`` partition, and with ``inject`` both modes."""
    out = [("iid", None), (skew, None)]
    if inject is not None:
        out += [(skew, (*inject, "network")), (skew, (*inject, "local"))]
    return out


def recovered(iid: float, skewed: float, injected: float) -> float | None:
    """The share of the skew's gap that injection recovers, ``(injected - skewed) / (iid - skewed)``
    (None when the skewed run is not below IID)."""
    return (injected - skewed) / (iid - skewed) if iid > skewed else None


def main(argv=None) -> int:
    from rog.workloads.quick import QuickWorkload

    ap = argparse.ArgumentParser(prog="python scripts/noniid_mechanism.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=100, help="BSP iterations per variant (default 100, as the steps)")
    ap.add_argument("--workers", type=int, default=10, help="workers (default 10: one label each)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (data split, noise, init; default 0)")
    ap.add_argument("--models", default=",".join(m for m, _ in VARIANTS),
                    help=f"comma-separated subset of {', '.join(m for m, _ in VARIANTS)}")
    ap.add_argument("--skew", default="labels:1", choices=("labels:1", "labels:2"),
                    help="the label-skewed partition (default labels:1: one label per worker)")
    ap.add_argument("--inject", default=None, metavar="ALPHA,BETA",
                    help="also run the skewed runs with (alpha, beta) injection, network and local, e.g. 0.25,0.25")
    a = ap.parse_args(argv)
    try:
        seeds = [int(x) for x in a.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds must be comma-separated integers, e.g. 0,1,2; got {a.seeds!r}")
    inject = None
    if a.inject is not None:
        try:
            inject = tuple(float(x) for x in a.inject.split(","))
        except ValueError:
            inject = ()
        if len(inject) != 2 or not all(0 < v <= 1 for v in inject):
            ap.error(f"--inject must be ALPHA,BETA with both in (0, 1], e.g. 0.25,0.25; got {a.inject!r}")
    lrs = dict(VARIANTS)
    models = a.models.split(",")
    if a.iterations < 1 or a.workers < 2 or any(m not in lrs for m in models) or any(s < 0 for s in seeds):
        ap.error("--iterations must be >= 1, --workers >= 2, --seeds >= 0 and --models among "
                 f"{', '.join(lrs)}")
    torch.set_num_threads(1)
    out = dict(iterations=a.iterations, workers=a.workers, seeds=seeds, batch_size=32, skew=a.skew, inject=inject,
               runs=[])
    for seed in seeds:
        for part, inj in _runs(inject, a.skew):
            wl = QuickWorkload(seed=seed, n_workers=a.workers, split=part)
            for model_name in models:
                t0 = time.perf_counter()
                r = bsp_replica(wl, model_name, lrs[model_name], a.iterations, seed=seed, inject=inj)
                r.update(model=model_name, lr=lrs[model_name], partition=part, seed=seed,
                         inject=None if inj is None else inj[2], time_s=round(time.perf_counter() - t0, 1))
                label = part + ("" if inj is None else f"+{inj[2]}")
                print(f"seed {seed} {model_name:14s} lr {r['lr']:g} {label:17s} plateau {100 * r['plateau']:.1f} %  "
                      f"final: worker0 {100 * r['worker0']:.1f} %  recalibrated {100 * r['recalibrated']:.1f} %  "
                      f"({r['time_s']} s)", flush=True)
                out["runs"].append(r)
    if inject is not None:
        out["recovered"] = _recovery_table(out["runs"], a.skew)
        for row in out["recovered"]:
            pct = ["-" if v is None else f"{100 * v:.0f} %" + ("" if c else " (no collapse)")
                   for v, c in zip(row["per_seed"], row["collapsed"])]
            med = "-" if row["median"] is None else f"{100 * row['median']:.0f} %"
            print(f"{row['model']} {row['mode']}: gap recovered per seed {', '.join(pct)}; median over the seeds "
                  f"that collapsed {med}", flush=True)
    print(json.dumps(out))
    return 0


def _recovery_table(runs: list[dict], skew: str = "labels:1", classes: int = 10) -> list[dict]:
    """Per model and injection mode: the gap recovered per seed (on plateaus), whether that seed's skewed
    run collapsed by the steps' rule (:func:`rog.papers.scadles.topk.collapse_reproduced`), and the
    median over the seeds that did (a share of a gap within test noise means nothing)."""
    import statistics

    from .topk import collapse_reproduced

    key = {(r["model"], r["seed"], r["partition"], r["inject"]): r["plateau"] for r in runs}
    rows = []
    for model in dict.fromkeys(r["model"] for r in runs):
        seeds = sorted({r["seed"] for r in runs if r["model"] == model})
        for mode in ("network", "local"):
            per_seed = [recovered(key[(model, s, "iid", None)], key[(model, s, skew, None)],
                                  key[(model, s, skew, mode)]) for s in seeds]
            collapsed = [collapse_reproduced(key[(model, s, "iid", None)], key[(model, s, skew, None)], classes)
                         for s in seeds]
            vals = [v for v, c in zip(per_seed, collapsed) if c and v is not None]
            rows.append(dict(model=model, mode=mode, seeds=seeds, per_seed=per_seed, collapsed=collapsed,
                             median=statistics.median(vals) if vals else None))
    return rows
