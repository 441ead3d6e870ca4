"""ScaDLES's randomised data injection (alpha, beta) against non-IID skew, as a wrapper of a worker's batches.

``network`` (the paper's design, the notes' resolution): at every iteration ``n`` a plan drawn from the
run's seed (the same on every worker) picks ``ceil(alpha N)`` senders; each sends ``floor(beta b)``
samples of its current batch to one random other worker, as raw arrays through the relay in the
parameter server's namespace (:mod:`rog.streams.inject_relay`), so the bytes cross the shaped links
and compete with the gradients.  A receiver adds whatever has arrived to its next batch (never
blocking on it).  Every send and receive is an ``inject`` record in the worker's event log (bytes
on the wire, samples).

``local`` (the released code's shortcut): every worker appends, each iteration, ``int(beta b)``
samples of each of ``ceil(alpha N)`` labels it does not hold, drawn from the whole data set in its
own process; nothing crosses the network (``inject`` records with ``bytes`` 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from rog.errors import ConfigError
from rog.options import check_choices, option

INJECT_SEED_SALT = 0x1E7EC7
MODES = ("network", "local")
FLAG_PREFIX = "inject"  # run.py --inject-<option>


@dataclass(frozen=True)
class Options:
    """Data injection's options (``run.py --inject-*``; ``config.yaml``'s ``inject`` when ``alpha`` > 0), checked
    here and nowhere else (the checks that need the rest of the run, such as two workers, are the flags' module's:
    :mod:`rog.experiment.topk_options`)."""

    alpha: float = option(0.0, "share of workers that send samples each iteration (ScaDLES alpha; 0 = off)")
    beta: float = option(0.0, "share of a sender's batch it sends (ScaDLES beta; 0 = off)")
    mode: str = option(MODES[0], "network = samples travel through the parameter server's namespace over the "
                       "shaped links; local = the released code's shortcut (copied locally, no bytes)", choices=MODES)

    def __post_init__(self) -> None:
        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 1):
                raise ConfigError(f"--inject-{name} must lie in [0, 1] (a share), got {v!r}; e.g. 0.25 as in ScaDLES")
        if (self.alpha > 0) != (self.beta > 0):
            raise ConfigError("--inject-alpha and --inject-beta go together: give both > 0 (e.g. 0.25 0.25), or neither")
        check_choices(self, FLAG_PREFIX)

    @property
    def on(self) -> bool:
        """Whether the run injects at all."""
        return self.alpha > 0


def plan(n_workers: int, alpha: float, iteration: int, seed: int) -> list[tuple[int, int]]:
    """The ``(sender, receiver)`` pairs of ``iteration``: ``ceil(alpha N)`` distinct senders, each with a
    random receiver other than itself; a pure function of its arguments (every worker draws the same)."""
    if n_workers < 2 or not 0 < alpha <= 1:
        return []
    rng = np.random.default_rng([int(seed), int(iteration), INJECT_SEED_SALT])
    m = min(n_workers, math.ceil(alpha * n_workers - 1e-9))
    senders = np.sort(rng.choice(n_workers, size=m, replace=False))
    pairs = []
    for s in senders.tolist():
        r = int(rng.integers(n_workers - 1))
        pairs.append((s, r + (r >= s)))
    return pairs


def samples_per_sender(beta: float, batch_size: int) -> int:
    """``floor(beta b)`` samples (at least 1 when beta > 0)."""
    return max(1, int(math.floor(beta * batch_size + 1e-9))) if beta > 0 else 0


def local_pool(wl, worker: int) -> tuple:
    """``(x_all, y_all, own_labels)`` of worker ``worker`` for ``local`` injection: the quick workload's
    whole adaptation set in memory and the labels of the worker's shard."""
    if not hasattr(wl, "_x_ada"):
        raise ValueError("--inject-mode local needs the quick workload (its whole adaptation set in memory)")
    return wl._x_ada, wl._y_ada, np.unique(wl._y_ada[wl.shards[worker]])


class InjectedBatches:
    """Wrap a worker's endless ``(x, y)`` torch batches with (alpha, beta) injection (or, for a streamed worker,
    apply it to each batch the stream gives: :meth:`inject`).

    ``exchange`` (network mode): an object with ``send(dst, iteration, x, y) -> bytes`` and
    ``drain() -> list[(src, iteration, x, y, bytes)]`` (:class:`rog.streams.inject_relay.InjectClient`);
    ``pool`` (local mode): ``(x_all, y_all, own_labels)`` numpy arrays of the whole adaptation set.
    ``log(kind_fields)`` writes one ``inject`` record.
    """

    def __init__(self, batches: Iterator, worker: int, n_workers: int, alpha: float, beta: float, seed: int,
                 mode: str, exchange=None, pool=None, log: Callable[..., None] | None = None) -> None:
        Options(alpha, beta, mode)  # the checks (ConfigError naming the flag)
        if mode == "network" and exchange is None:
            raise ValueError("network injection needs an exchange (the relay client)")
        if mode == "local" and pool is None:
            raise ValueError("local injection needs the pool of all samples")
        self.batches, self.worker, self.n_workers = batches, int(worker), int(n_workers)
        self.alpha, self.beta, self.seed, self.mode = float(alpha), float(beta), int(seed), mode
        self.exchange, self.log = exchange, log or (lambda **_: None)
        self.iteration = 0
        self.sent_bytes = self.received_bytes = self.sent_samples = self.received_samples = 0
        if pool is not None:
            x_all, y_all, own = pool
            self._x_all, self._y_all = x_all, np.asarray(y_all)
            self._others = np.array(sorted(set(np.unique(self._y_all).tolist()) - set(np.asarray(own).tolist())))
            self._rng = np.random.default_rng([self.seed, self.worker, INJECT_SEED_SALT])

    def __iter__(self):
        return self

    def __next__(self):
        return self.inject(*next(self.batches))

    def inject(self, x, y):
        """One iteration's injection on the batch ``(x, y)``: a sender sends ``floor(beta b)`` of this very batch
        (``b`` its size, so a streamed batch of any size works as a fixed one); the received samples are appended."""
        import torch

        self.iteration += 1
        n = samples_per_sender(self.beta, int(y.shape[0]))
        extra_x, extra_y = [], []
        if self.mode == "network":
            for src, dst in plan(self.n_workers, self.alpha, self.iteration, self.seed):
                if src == self.worker:
                    sent = self.exchange.send(dst, self.iteration, x[:n].numpy(), y[:n].numpy())
                    if sent == 0:  # the relay is gone: nothing was sent
                        continue
                    self.sent_bytes += sent
                    self.sent_samples += n
                    self.log(iteration=self.iteration, direction="send", peer=dst, samples=n, bytes=sent, mode="network")
            for src, it, xs, ys, nbytes in self.exchange.drain():
                extra_x.append(torch.from_numpy(xs))
                extra_y.append(torch.from_numpy(ys))
                self.received_bytes += nbytes
                self.received_samples += int(ys.shape[0])
                self.log(iteration=self.iteration, direction="recv", peer=src, samples=int(ys.shape[0]), bytes=nbytes,
                         mode="network")
        elif self._others.size:
            m = min(self._others.size, math.ceil(self.alpha * self.n_workers - 1e-9))
            for label in self._rng.choice(self._others, size=m, replace=False).tolist():
                pick = self._rng.choice(np.flatnonzero(self._y_all == label), size=n)
                extra_x.append(torch.from_numpy(self._x_all[pick]))
                extra_y.append(torch.from_numpy(self._y_all[pick]))
            got = sum(int(t.shape[0]) for t in extra_y)
            self.received_samples += got
            self.log(iteration=self.iteration, direction="recv", peer=-1, samples=got, bytes=0, mode="local")
        if extra_x:
            x = torch.cat([x, *[t.to(x.dtype) for t in extra_x]])
            y = torch.cat([y, *[t.to(y.dtype) for t in extra_y]])
        return x, y
