"""Per-layer compute pacing (``--pacing layer``): the device profile's compute time, spread over the layers.

End-of-iteration pacing sleeps once, after the backward pass, up to the profile's compute time: a
slower device's compute cannot overlap anything there.  Per-layer pacing gives each layer's forward
and backward computation its share of the paced time, in proportion to the layer's measured share of
this machine's forward + backward compute (:func:`measure_layer_compute`, the schedules' own per-layer
profile), and sleeps right after the layer computes (:class:`~rog.schedules.hooks.LayerHooks` calls
the pacer), so a layer's gradients or activations appear when a slower device's would, and segment
transfers overlap the paced compute.

The pacer keeps deadlines, not per-layer sleeps: forward layer ``j`` ends no earlier than
``t_fwd + B * sum(fc[:j+1]) / total`` and backward layer ``j`` no earlier than
``t_bwd + B * sum(bc[j:]) / total`` (``B`` the pass's budget), so a layer that ran over its share
is caught up by the next ones and the pass takes ``max(B, its real compute)``, as end-of-iteration
pacing does.  Time the forward pass waits for a pull segment is not compute: it moves the forward
deadlines (:meth:`LayerPacer.shift`).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from .hooks import LayerHooks
from .profiler import ComputeProfile

CALIBRATION_PASSES = 5  # measured forward + backward passes (after one cold pass) for the layer shares


class LayerPacer:
    """Deadlines for each layer's forward and backward end, from per-layer compute ``fc``, ``bc`` (seconds or any unit)."""

    def __init__(self, fc, bc, *, clock=time.monotonic, sleep=time.sleep) -> None:
        fc, bc = np.asarray(fc, dtype=np.float64), np.asarray(bc, dtype=np.float64)
        if fc.shape != bc.shape or fc.ndim != 1 or fc.size == 0:
            raise ValueError(f"fc and bc must be per-layer vectors of one length, got {fc.shape} and {bc.shape}")
        if not (np.all(np.isfinite(fc)) and np.all(np.isfinite(bc)) and fc.min() >= 0 and bc.min() >= 0):
            raise ValueError("per-layer compute times must be finite and >= 0")
        total = float(fc.sum() + bc.sum())
        if total <= 0:
            raise ValueError("per-layer compute times sum to 0: no share to pace by")
        self.fwd_share, self.bwd_share = fc / total, bc / total
        self._fwd_end = np.cumsum(self.fwd_share)  # share of the pass at forward layer j's end
        self._bwd_end = np.cumsum(self.bwd_share[::-1])[::-1]  # backward runs top-down: layer j ends after L-1..j
        self._clock, self._sleep = clock, sleep
        self.budget_s = 0.0
        self._t_fwd = self._t_bwd = 0.0
        self.slept_s = 0.0  # sleeps since the last take_slept()

    @property
    def n_layers(self) -> int:
        """L, the number of layers paced."""
        return int(self.fwd_share.size)

    def begin_pass(self, budget_s: float) -> None:
        """The next forward + backward pass paces to ``budget_s`` seconds in all."""
        if not (budget_s >= 0 and np.isfinite(budget_s)):
            raise ValueError(f"budget_s must be a finite number of seconds >= 0, got {budget_s!r}")
        self.budget_s = float(budget_s)

    def begin_forward(self) -> None:
        """The forward pass starts now."""
        self._t_fwd = self._clock()

    def shift(self, wait_s: float) -> None:
        """The forward pass waited ``wait_s`` (for a pull segment): not compute, so its deadlines move."""
        self._t_fwd += max(0.0, float(wait_s))

    def forward_done(self, j: int) -> float:
        """Forward layer ``j`` has computed: sleep to its deadline; returns the sleep."""
        return self._until(self._t_fwd + self.budget_s * float(self._fwd_end[j]))

    def begin_backward(self) -> None:
        """The backward pass starts now."""
        self._t_bwd = self._clock()

    def backward_done(self, j: int) -> float:
        """Backward layer ``j`` has its gradients: sleep to its deadline; returns the sleep."""
        return self._until(self._t_bwd + self.budget_s * float(self._bwd_end[j]))

    def take_slept(self) -> float:
        """The seconds slept since the last call (and start counting again)."""
        s, self.slept_s = self.slept_s, 0.0
        return s

    def _until(self, deadline: float) -> float:
        t = self._clock()
        if deadline <= t:
            return 0.0
        self._sleep(deadline - t)
        slept = self._clock() - t  # as slept: an oversleep is not compute (the next deadline absorbs it)
        self.slept_s += slept
        return slept


def measure_layer_compute(model, layers, x, y, loss_fn, passes: int = CALIBRATION_PASSES):
    """Per-layer forward and backward seconds ``(fc, bc)`` of ``model`` on batch ``(x, y)``: the median of
    ``passes`` passes after one cold pass, timed by :class:`~rog.schedules.hooks.LayerHooks` as the
    schedules profile.  Gradients, buffers (BatchNorm statistics) and the random state are restored."""
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes!r}")
    params = list(model.parameters())
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    rng = torch.get_rng_state()
    hooks = LayerHooks(model, layers)
    prof = ComputeProfile(window=passes)
    try:
        for k in range(passes + 1):
            for p in params:
                if p.grad is not None:
                    p.grad.zero_()
            hooks.begin_forward()
            loss = loss_fn(model(x), y)
            hooks.end_forward()
            hooks.begin_backward()
            loss.backward()
            hooks.end_backward()
            if k > 0:  # the first pass is cold (allocations, first touches)
                prof.add(hooks.fc, hooks.bc)
    finally:
        hooks.remove()
        torch.set_rng_state(rng)
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
            for p, g in zip(params, grads):
                if g is None:
                    p.grad = None
                else:
                    p.grad.copy_(g)
    return prof.median()


class PacedPasses:
    """Per-layer pacing of the plain training loop (the sequential schedule): hooks on ``model``'s
    ``layers`` and a :class:`LayerPacer`; an iteration's target is spread over its passes by their samples,
    less the iteration's compute outside the passes (the update and the push's encoding, measured on the
    last iteration), which the engine's end-of-iteration pacing then fills up to the target."""

    def __init__(self, model, layers, fc, bc) -> None:
        self.pacer = LayerPacer(fc, bc)
        self.hooks = LayerHooks(model, layers, pacer=self.pacer)
        self.outside_s = 0.0  # the last iteration's compute outside its passes
        self._budgets: list[float] = []
        self._t_it = self._in_passes_s = self._t_pass = 0.0

    def begin_iteration(self, target_s: float | None, pass_samples: list[int]) -> None:
        """An iteration of ``len(pass_samples)`` passes pacing to ``target_s`` in all (None: unpaced) starts now."""
        self._t_it, self._in_passes_s = time.monotonic(), 0.0
        total = float(sum(pass_samples))
        left = 0.0 if target_s is None else max(0.0, float(target_s) - self.outside_s)
        self._budgets = [left * s / total if total > 0 else 0.0 for s in pass_samples]

    def begin_pass(self, i: int) -> None:
        """Pass ``i`` of the iteration: its forward pass starts now."""
        self._t_pass = time.monotonic()
        self.pacer.begin_pass(self._budgets[i] if i < len(self._budgets) else 0.0)
        self.hooks.begin_forward()
        self.pacer.begin_forward()

    def end_forward(self) -> None:
        """The loss is computed: the forward pass ends (paced), the backward pass starts."""
        self.hooks.end_forward()
        self.hooks.begin_backward()
        self.pacer.begin_backward()

    def end_backward(self) -> None:
        """The backward pass returned (paced)."""
        self.hooks.end_backward()
        self._in_passes_s += time.monotonic() - self._t_pass

    def end_iteration(self, engine) -> None:
        """After the optimizer step: measure the iteration's compute outside its passes (up to the engine's
        pacing point)."""
        if engine.paced_at is not None:
            self.outside_s = max(0.0, engine.paced_at - self._t_it - self._in_passes_s)

    def take_slept(self) -> float:
        """The layers' sleeps since the last call."""
        return self.pacer.take_slept()

    def remove(self) -> None:
        """Remove the hooks."""
        self.hooks.remove()
