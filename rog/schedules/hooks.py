"""Per-layer hooks on a model: forward gating and timing, backward completion and timing.

* forward: a pre-hook on each layer's gate module closes the previous layer's compute span, waits
  until the layer's pull segment has been applied (:meth:`LayerHooks.open_segments`), then opens the
  layer's span; the waiting is not compute;
* backward: a post-accumulate-grad hook on every parameter counts the layer's parameters down; a
  layer is done when all have their gradients (or when the backward pass returns: parameters the
  loss did not reach keep no gradient); :meth:`LayerHooks.wait_layers` blocks until given layers are done;
* pacing (``pacer``, a :class:`rog.schedules.pacing.LayerPacer`): a layer's forward span and its
  backward completion wait for the pacer's deadline first, so the paced time counts as the layer's
  compute and its gradients appear when a slower device's would.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .grouping import Layer


class LayerHooks:
    """Hooks on ``model`` for the layers ``layers`` (:func:`rog.schedules.grouping.group_layers`)."""

    def __init__(self, model, layers: list[Layer], pacer=None) -> None:
        self.layers = layers
        self.pacer = pacer
        self.L = len(layers)
        params = list(model.parameters())
        modules = dict(model.named_modules())
        self._cond = threading.Condition()
        self._open = [True] * self.L  # pull segment applied (before the first pull: the initial model)
        self._done = [False] * self.L
        self._left = [0] * self.L
        self._param_layer = np.zeros(len(params), dtype=np.int64)
        for j, layer in enumerate(layers):
            self._param_layer[layer.params] = j
        self.fc = np.zeros(self.L)
        self.bc = np.zeros(self.L)
        self.done_at = np.zeros(self.L)
        self.fwd_wait_s = 0.0
        self.fwd_spans: list[tuple[float, float]] = []
        self._cur: int | None = None
        self._t_go = 0.0
        self._t_bwd0 = 0.0
        self._handles = []
        for j, layer in enumerate(layers):
            self._handles.append(modules[layer.gate].register_forward_pre_hook(self._make_gate(j)))
        for i, p in enumerate(params):
            if p.requires_grad:
                self._handles.append(p.register_post_accumulate_grad_hook(self._make_grad_hook(int(self._param_layer[i]))))

    # ------------------------------------------------------------------ forward
    def begin_forward(self) -> None:
        """Mark the start of a forward pass."""
        self.fc[:] = 0.0
        self.fwd_wait_s = 0.0
        self.fwd_spans = []
        self._cur = -1
        self._t_go = time.monotonic()
        self._seen = set()

    def _make_gate(self, j: int):
        def gate(_mod, _inp):
            if self._cur is None or j in self._seen:  # outside a scheduled forward pass, or a second call
                return None
            self._seen.add(j)
            if self.pacer is not None and self._cur >= 0:  # the layer before this one has computed
                self.pacer.forward_done(self._cur)
            t = time.monotonic()
            self._close_span(t)
            with self._cond:
                while not self._open[j]:
                    self._cond.wait()
            t_go = time.monotonic()
            self.fwd_wait_s += t_go - t
            if self.pacer is not None:
                self.pacer.shift(t_go - t)
            self._cur, self._t_go = j, t_go
            return None

        return gate

    def _close_span(self, t: float) -> None:
        self.fc[max(self._cur, 0)] += t - self._t_go
        self.fwd_spans.append((self._t_go, t))

    def end_forward(self) -> None:
        """Mark the end of the forward pass (the loss included)."""
        if self.pacer is not None:
            self.pacer.forward_done(self.L - 1)
        self._close_span(time.monotonic())
        self._cur = None

    # ------------------------------------------------------------------ pull segments
    def close_all(self) -> None:
        """A pull is about to be applied: every layer waits for its segment again."""
        with self._cond:
            self._open = [False] * self.L

    def open_segments(self, layers) -> None:
        """These layers' rows have been applied."""
        with self._cond:
            for j in layers:
                self._open[j] = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ backward
    def begin_backward(self) -> None:
        """Mark the start of a backward pass: every layer waits for its gradients."""
        with self._cond:
            self._done = [False] * self.L
            self._left = [len(layer.params) for layer in self.layers]
        self._t_bwd0 = time.monotonic()

    def _make_grad_hook(self, j: int):
        def hook(_p):
            with self._cond:
                self._left[j] -= 1
                finished = self._left[j] <= 0 and not self._done[j]
            if not finished:
                return
            if self.pacer is not None:  # outside the lock: the push thread keeps reading
                self.pacer.backward_done(j)
            with self._cond:
                self._done[j] = True
                self.done_at[j] = time.monotonic()
                self._cond.notify_all()

        return hook

    def end_backward(self) -> float:
        """The backward pass returned: every layer is done; per-layer backward times are set. Returns its end."""
        if self.pacer is not None:  # layers the loss did not reach end with the pass
            self.pacer.backward_done(0)
        t = time.monotonic()
        with self._cond:
            for j in range(self.L):
                if not self._done[j]:
                    self._done[j] = True
                    self.done_at[j] = t
            self._cond.notify_all()
        prev = self._t_bwd0
        for j in range(self.L - 1, -1, -1):  # the top layer's gradients come first
            self.bc[j] = max(0.0, self.done_at[j] - prev)
            prev = max(prev, self.done_at[j])
        return t

    def wait_layers(self, layers) -> None:
        """Block until every layer in ``layers`` has its gradients."""
        with self._cond:
            while not all(self._done[j] for j in layers):
                self._cond.wait()

    def remove(self) -> None:
        """Remove every hook."""
        for h in self._handles:
            h.remove()
        self._handles = []
