"""A streaming worker's batches: the blocking take on its stream (:mod:`rog.streams`), the ``data_wait``
record, the batch policy and the update multiplier (weighted aggregation, linear learning rate)."""

from __future__ import annotations

import time

from rog.streams import ArrivalProcess, StreamBuffer, batch_size, load_rate_trace, update_multiplier
from .run_config import RunConfig

CHUNK = 64  # samples drawn from the shard at a time


def pass_pacer(cfg: RunConfig, k: int):
    """``(BatchPacer, worker k's compute ratio)`` from config.yaml's ``compute_model`` (None, 1.0: unpaced)."""
    from rog.testbed.compute_fit import BatchPacer

    from .sync_options import worker_compute_s

    entry, base = cfg.device.compute_model, cfg.device.compute_s
    if not entry or base is None:
        return None, 1.0
    return BatchPacer.from_config(entry), float(worker_compute_s(cfg, k)) / float(base)


class ShardSamples:
    """A worker's shard as a sample sequence in arrival order: ``take(n)`` the next ``n``, ``skip(n)``."""

    def __init__(self, batches):
        self.batches, self.x, self.y = batches, None, None

    def _fill(self, n: int) -> None:
        import torch

        while self.x is None or self.x.shape[0] < n:
            x, y = next(self.batches)
            self.x = x if self.x is None else torch.cat([self.x, x])
            self.y = y if self.y is None else torch.cat([self.y, y])

    def take(self, n: int):
        self._fill(n)
        x, y = self.x[:n], self.y[:n]
        self.x, self.y = self.x[n:], self.y[n:]
        return x, y

    def skip(self, n: int) -> None:
        while n > 0:
            k = min(n, CHUNK * 16)
            self.take(k)
            n -= k


class StreamFeed:
    """Worker ``k``'s batches from its stream; :meth:`take` blocks on the arrival clock and logs ``data_wait``."""

    def __init__(self, cfg: RunConfig, k: int, wl, events, local_update=None):
        st = cfg.stream
        self.st, self.k, self.events, self.local = st, k, events, local_update
        trace = st["traces"][k]
        self.process = ArrivalProcess(load_rate_trace(trace) if trace else st["rates"][k])
        self.window_s, self.fixed = float(st["window_s"]), int(st["fixed_batch"])
        peak = max(self.process.trace.rates)
        max_b = max(batch_size(st["batch_policy"], peak, self.window_s, self.fixed), self.fixed)
        self.buffer = StreamBuffer(self.process, st["buffer"], max_batch=max_b)
        self.samples = ShardSamples(wl.worker_batches(k, CHUNK, seed=cfg.workload.seed))
        self.pacer, self.ratio = pass_pacer(cfg, k)
        self.buffer.start()

    def compute_target_s(self, samples: int) -> float | None:
        """Pacing target of this worker's pass over ``samples`` (None: the run is unpaced)."""
        return None if self.pacer is None else self.ratio * self.pacer.target_s(samples)

    def take(self, n: int) -> list:
        """Iteration ``n``'s batch as ``[(x, y)]``, after waiting for it on the stream."""
        st = self.st
        rate = self.process.rate_at(time.monotonic() - self.buffer.origin_s)
        b = batch_size(st["batch_policy"], rate, self.window_s, self.fixed)
        t0 = time.monotonic()
        res = self.buffer.take(b)
        self.events.write("data_wait", self.events.at(t0), iteration=n, duration_s=res.wait_s, worker=self.k,
                          batch=b, buffer=res.buffer_before, buffer_after=res.buffer_after, dropped=res.dropped_total,
                          arrived=res.arrived_total, analytic_s=res.analytic_wait_s)
        self.samples.skip(res.skip)
        if self.local is not None:
            self.local.lr_multiplier = update_multiplier(b, st["batches"], self.fixed, st["weighted_aggregation"],
                                                         st["lr_scaling"])
        return [self.samples.take(b)]
