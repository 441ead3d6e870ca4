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
steps along.  Defaults are the paper's (Table II): learning rate 1e-6, momentum 0.9, Nesterov, weight
decay 5e-4, a constant rate.  The artifact's experiments halve the rate at iterations 800, 1600, 2400 and
3200 (:data:`PAPER_MILESTONES`): the experiment attaches that as a ``torch.optim.lr_scheduler.MultiStepLR``
(:mod:`rog.experiment.worker_loop`), the simulator as ``LocalUpdateConfig(milestones=PAPER_MILESTONES)``.

Parameter groups (``torch.optim`` param groups) are :class:`GroupRule` spans of the flat buffer, each with
its own hyper-parameters; elements no rule covers get ``u = 0`` and keep their momentum (a parameter
without a gradient this iteration, as ``torch.optim.SGD`` skips it).

The kernel :func:`defsgdm_update` is a plain function; :class:`LocalUpdate` holds one worker's
momentum buffer and rules around it (the shape of ``torch/optim/sgd.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PAPER_MILESTONES = (800, 1600, 2400, 3200)  # iterations at which the artifact's experiments halve the rate


def check_hyper(lr, momentum, weight_decay, nesterov, where: str = "") -> None:
    """ValueError (prefixed ``where``) unless the hyper-parameters are a valid DEFSGDM rule."""
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and lr >= 0):
        raise ValueError(f"{where}lr must be a finite number >= 0, got {lr!r}")
    if not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
        raise ValueError(f"{where}momentum must lie in [0, 1), got {momentum!r}")
    if not (isinstance(weight_decay, (int, float)) and math.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError(f"{where}weight_decay must be a finite number >= 0, got {weight_decay!r}")
    if nesterov and momentum <= 0:
        raise ValueError(f"{where}nesterov=True needs momentum > 0; set nesterov=False for plain SGD")


@dataclass(frozen=True)
class StepHalving:
    """Learning rate ``lr0`` halved at each milestone: iteration ``n`` uses ``lr0 / 2**k``,
    ``k`` = number of milestones ``<= n`` (iterations count from 1, so iteration 800 is the first
    one at half rate)."""

    lr0: float
    milestones: tuple[int, ...] = PAPER_MILESTONES

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
    milestones: tuple[int, ...] = ()  # rate halved at these iterations; () = constant (PAPER_MILESTONES: the artifact's)

    def __post_init__(self) -> None:
        check_hyper(self.lr, self.momentum, self.weight_decay, self.nesterov)
        StepHalving(self.lr, self.milestones)  # validates the milestones
        object.__setattr__(self, "milestones", tuple(int(m) for m in self.milestones))

    def schedule(self) -> StepHalving:
        """The learning-rate schedule these settings describe."""
        return StepHalving(self.lr, self.milestones)


@dataclass(frozen=True)
class GroupRule:
    """One parameter group's hyper-parameters over the flat elements ``[start, stop)``."""

    start: int
    stop: int
    lr: float
    momentum: float
    weight_decay: float
    nesterov: bool


class GroupedRules:
    """The rules of a worker's update over its flat buffer: one per parameter group (or per run of a group's
    tensors that have gradients), from a :class:`LocalUpdateConfig` until :meth:`set_groups` replaces them.
    Shared by the numpy (:class:`LocalUpdate`) and the torch (:class:`rog.device.torch_update.TorchLocalUpdate`)
    update; subclasses own ``momentum_buf``."""

    def _init_rules(self, n_elements: int, config: LocalUpdateConfig | None) -> None:
        if int(n_elements) != n_elements or n_elements < 0:
            raise ValueError(f"n_elements must be a non-negative integer, got {n_elements!r}")
        self.n_elements = int(n_elements)
        self.config = config if config is not None else LocalUpdateConfig()
        self._factor = StepHalving(1.0, self.config.milestones)  # the iteration schedule on top of each group's lr
        self.lr_multiplier = 1.0  # set per iteration by streaming runs (rog.streams.weighting)
        c = self.config
        self.groups: tuple[GroupRule, ...] = (GroupRule(0, self.n_elements, c.lr, c.momentum, c.weight_decay,
                                                        c.nesterov),)

    def set_groups(self, groups) -> None:
        """Replace the rules: :class:`GroupRule` spans, in order, not overlapping, inside the buffer."""
        groups = tuple(groups)
        end = 0
        for i, g in enumerate(groups):
            if not (end <= g.start <= g.stop <= self.n_elements):
                raise ValueError(f"group {i}: span [{g.start}, {g.stop}) overlaps another or leaves [0, {self.n_elements})")
            check_hyper(g.lr, g.momentum, g.weight_decay, g.nesterov, f"group {i}: ")
            end = g.stop
        self.groups = groups

    def lr_at(self, iteration: int, group: int = 0) -> float:
        """Learning rate of group ``group`` at iteration ``iteration`` (its lr, the config's milestones, times
        :attr:`lr_multiplier`)."""
        return self.groups[group].lr * self._factor(iteration) * self.lr_multiplier

    def _check_step(self, grad_shape, iteration: int) -> None:
        if int(iteration) != iteration or iteration < 1:
            raise ValueError(f"iteration must be an integer >= 1, got {iteration!r}")
        if tuple(grad_shape) != (self.n_elements,):
            raise ValueError(f"grad has shape {tuple(grad_shape)}, expected ({self.n_elements},)")

    def _whole(self) -> bool:
        """Whether one rule covers the whole buffer (the update is one call)."""
        return len(self.groups) == 1 and self.groups[0].start == 0 and self.groups[0].stop == self.n_elements

    def rule_of(self, start: int, stop: int) -> int | None:
        """The index of the rule covering ``[start, stop)`` (a tensor's span), None if none does."""
        for i, g in enumerate(self.groups):
            if g.start <= start and stop <= g.stop:
                return i
        return None


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


class LocalUpdate(GroupedRules):
    """One worker's update rule: its momentum buffer and its groups' rules."""

    def __init__(self, n_elements: int, config: LocalUpdateConfig | None = None) -> None:
        self._init_rules(n_elements, config)
        self.momentum_buf = np.zeros(self.n_elements, dtype=np.float32)

    def _rule(self, i: int, grad, params, iteration: int, out=None):
        g = self.groups[i]
        sl = slice(g.start, g.stop)
        whole = g.start == 0 and g.stop == self.n_elements  # no slicing: ``out`` itself comes back
        return defsgdm_update(grad if whole else grad[sl], params if whole else params[sl], self.momentum_buf[sl],
                              lr=self.lr_at(iteration, i), momentum=g.momentum, weight_decay=g.weight_decay,
                              nesterov=g.nesterov, out=out if whole or out is None else out[sl])

    def step(self, grad: np.ndarray, params: np.ndarray, iteration: int, out: np.ndarray | None = None) -> np.ndarray:
        """The update ``u`` of iteration ``iteration`` for gradient ``grad`` at ``params``."""
        grad = np.asarray(grad)
        self._check_step(grad.shape, iteration)
        if self._whole():
            return self._rule(0, grad, params, iteration, out)
        if out is None:
            out = np.zeros(self.n_elements, dtype=np.float32)
        else:
            out.fill(0.0)
        for i in range(len(self.groups)):
            self._rule(i, grad, params, iteration, out)
        return out

    def span_update(self, grad, params, start: int, stop: int, iteration: int) -> np.ndarray:
        """``u`` of one tensor's span ``[start, stop)`` (``grad``, ``params``: its slices), under the rule
        covering it (zeros, momentum kept, when none does): the segmented schedules update tensor by tensor."""
        i = self.rule_of(start, stop)
        if i is None:
            return np.zeros(stop - start, dtype=np.float32)
        g = self.groups[i]
        return defsgdm_update(grad, params, self.momentum_buf[start:stop], lr=self.lr_at(iteration, i),
                              momentum=g.momentum, weight_decay=g.weight_decay, nesterov=g.nesterov)
