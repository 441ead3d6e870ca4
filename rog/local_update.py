"""DEFSGDM's worker-side update rule: Nesterov momentum SGD with weight decay, on flat buffers.

A ROG worker does not step its parameters when it computes a gradient.  It turns the gradient
into an update ``u`` with its own momentum (DEFSGDM keeps momentum on the worker), adds ``u`` to
its accumulator, and pushes rows of that accumulator; its parameters change only when a pull
arrives (``w -= pulled``).  Per iteration, with flat gradient ``g`` and flat parameters ``w``::

    g = g + weight_decay * w
    m = momentum * m + g
    direction = g + momentum * m   (Nesterov)   or   m   (heavy ball)
    u = lr * direction

which is exactly the direction ``torch.optim.SGD(momentum, nesterov, weight_decay, dampening=0)``
steps along.  Defaults are the paper's (Table II) and the artifact's (docs/design.md#artifact-choices): learning
rate 1e-6, momentum 0.9, Nesterov, weight decay 5e-4, the rate halved at iterations 800, 1600,
2400 and 3200 (stepped per iteration).

The kernel :func:`defsgdm_update` is a plain function; :class:`LocalUpdate` holds one worker's
momentum buffer and schedule around it (the shape of ``torch/optim/sgd.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_MILESTONES = (800, 1600, 2400, 3200)  # iterations at which the artifact halved the rate


@dataclass(frozen=True)
class StepHalving:
    """Learning rate ``lr0`` halved at each milestone: iteration ``n`` uses ``lr0 / 2**k``,
    ``k`` = number of milestones ``<= n`` (iterations count from 1, so iteration 800 is the first
    one at half rate)."""

    lr0: float
    milestones: tuple[int, ...] = DEFAULT_MILESTONES

    def __post_init__(self) -> None:
        if not (isinstance(self.lr0, (int, float)) and math.isfinite(self.lr0) and self.lr0 >= 0):
            raise ValueError(f"lr0 must be a finite number >= 0, got {self.lr0!r}")
        ms = tuple(self.milestones)
        if any(int(m) != m or m < 1 for m in ms):
            raise ValueError(f"milestones must be positive integer iterations, got {ms!r}")
        if any(b <= a for a, b in zip(ms, ms[1:])):
            raise ValueError(f"milestones must be strictly increasing, got {ms!r}")
        object.__setattr__(self, "milestones", tuple(int(m) for m in ms))

    def __call__(self, iteration: int) -> float:
        """The learning rate of iteration ``iteration`` (>= 1)."""
        k = sum(1 for m in self.milestones if m <= iteration)
        return self.lr0 * 0.5**k


@dataclass(frozen=True)
class LocalUpdateConfig:
    """Hyper-parameters of the worker-side rule (defaults: the paper's Table II and the artifact)."""

    lr: float = 1e-6  # initial learning rate (Table II)
    momentum: float = 0.9  # DEFSGDM momentum, kept on the worker
    nesterov: bool = True  # Nesterov direction g + momentum * m
    weight_decay: float = 5e-4  # L2 term added to the gradient
    milestones: tuple[int, ...] = DEFAULT_MILESTONES  # rate halved at these iterations; () = constant

    def __post_init__(self) -> None:
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr >= 0):
            raise ValueError(f"lr must be a finite number >= 0, got {self.lr!r}")
        if not (isinstance(self.momentum, (int, float)) and 0 <= self.momentum < 1):
            raise ValueError(f"momentum must lie in [0, 1), got {self.momentum!r}")
        wd = self.weight_decay
        if not (isinstance(wd, (int, float)) and math.isfinite(wd) and wd >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        if self.nesterov and self.momentum <= 0:
            raise ValueError("nesterov=True needs momentum > 0; set nesterov=False for plain SGD")
        StepHalving(self.lr, self.milestones)  # validates the milestones
        object.__setattr__(self, "milestones", tuple(int(m) for m in self.milestones))

    def schedule(self) -> StepHalving:
        """The learning-rate schedule these settings describe."""
        return StepHalving(self.lr, self.milestones)


def defsgdm_update(
    grad: np.ndarray,
    params: np.ndarray,
    momentum_buf: np.ndarray,
    *,
    lr: float,
    momentum: float,
    weight_decay: float,
    nesterov: bool,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """One DEFSGDM step on flat buffers: update ``momentum_buf`` in place and return ``u``.

    ``grad`` and ``params`` are left untouched; ``u = lr * direction`` is written into ``out``
    (a new float32 array when ``None``).  The caller subtracts ``u`` from its parameters (plain
    SGD) or adds it to an accumulator (ROG).
    """
    if not (grad.shape == params.shape == momentum_buf.shape):
        raise ValueError(
            f"grad {grad.shape}, params {params.shape} and momentum_buf {momentum_buf.shape} must have one shape"
        )
    d = np.array(grad, dtype=np.float32, copy=True)
    if weight_decay:
        d += np.float32(weight_decay) * params
    if momentum:
        momentum_buf *= np.float32(momentum)
        momentum_buf += d
        if nesterov:
            d += np.float32(momentum) * momentum_buf
        else:
            d[...] = momentum_buf
    if out is None:
        out = d
    np.multiply(d, np.float32(lr), out=out)
    return out


class LocalUpdate:
    """One worker's update rule: its momentum buffer and learning-rate schedule."""

    def __init__(self, n_elements: int, config: LocalUpdateConfig | None = None) -> None:
        if int(n_elements) != n_elements or n_elements < 0:
            raise ValueError(f"n_elements must be a non-negative integer, got {n_elements!r}")
        self.config = config if config is not None else LocalUpdateConfig()
        self.schedule = self.config.schedule()
        self.lr_multiplier = 1.0  # set per iteration by streaming runs (rog.streams.weighting)
        self.momentum_buf = np.zeros(int(n_elements), dtype=np.float32)

    def lr_at(self, iteration: int) -> float:
        """Learning rate of iteration ``iteration`` (times :attr:`lr_multiplier`)."""
        return self.schedule(iteration) * self.lr_multiplier

    def step(self, grad: np.ndarray, params: np.ndarray, iteration: int, out: np.ndarray | None = None) -> np.ndarray:
        """The update ``u`` of iteration ``iteration`` for gradient ``grad`` at ``params``."""
        if int(iteration) != iteration or iteration < 1:
            raise ValueError(f"iteration must be an integer >= 1, got {iteration!r}")
        grad = np.asarray(grad)
        if grad.shape != self.momentum_buf.shape:
            raise ValueError(f"grad has shape {grad.shape}, expected ({self.momentum_buf.size},)")
        c = self.config
        return defsgdm_update(
            grad,
            params,
            self.momentum_buf,
            lr=self.lr_at(iteration),
            momentum=c.momentum,
            weight_decay=c.weight_decay,
            nesterov=c.nesterov,
            out=out,
        )
