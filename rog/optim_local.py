"""A torch optimizer as ROG's local rule: ``ROGOptimizer(..., local_update=torch.optim.AdamW)``.

The paper's worker turns its gradient into an update ``u`` with DEFSGDM (:mod:`rog.local_update`).  Here any
``torch.optim.Optimizer`` class does instead: it owns a shadow copy of the flat parameters (one view per row
tensor, its param groups the application's), and per iteration the shadow is set to the worker's parameters,
the optimizer steps it with the gradient, and ``u = w - w_stepped`` is what ROG accumulates and pushes.  With one
worker and an identity exchange the model then follows the torch optimizer step for step (up to the float32
rounding of ``w - (w - step)``: ``tests/test_optim_torch.py``).  Its per-parameter state (Adam's moments and step)
goes into the ROGOptimizer's ``state_dict`` under ``inner_*`` keys.
"""

from __future__ import annotations

import numpy as np
import torch

from .rows import RowPartition

INNER_PREFIX = "inner_"


class TorchOptimizerUpdate:
    """The local update of one worker by a torch optimizer class (see the module docstring)."""

    def __init__(self, optimizer_cls, partition: RowPartition, groups: list, device, on_device: bool,
                 **options) -> None:
        if not (isinstance(optimizer_cls, type) and issubclass(optimizer_cls, torch.optim.Optimizer)):
            raise TypeError(f"local_update must be 'DEFSGDM' or a torch.optim.Optimizer class such as "
                            f"torch.optim.AdamW, got {optimizer_cls!r}")
        self.n_elements = partition.n_elements
        self.on_device = bool(on_device)
        self.shadow = torch.zeros(self.n_elements, dtype=torch.float32, device=device)
        off = partition.tensor_offset.tolist()
        self.views = [self.shadow[off[i] : off[i + 1]].view(shape).requires_grad_()
                      for i, shape in enumerate(partition.shapes)]
        self._grads = [None] * len(self.views)
        first = {k: v for k, v in groups[0][2].items()}
        self.inner = optimizer_cls([{"params": self.views[a:b]} for a, b, _ in groups],
                                   **self._known(optimizer_cls, first, options))
        self.lr_multiplier = 1.0  # as rog.local_update's (streaming runs)
        self._base: list[dict] = []
        self.set_groups(groups, set())

    @staticmethod
    def _known(optimizer_cls, hyper: dict, options: dict) -> dict:
        """``options``, plus ``lr`` and ``weight_decay`` of ``hyper`` unless ``options`` sets them."""
        out = {k: hyper[k] for k in ("lr", "weight_decay") if k in hyper}
        out.update(options)
        return out

    def set_groups(self, groups: list, no_grad: set) -> None:
        """Each group's hyper-parameters that the torch optimizer knows (``lr`` times :attr:`lr_multiplier`);
        row tensors in ``no_grad`` get no gradient this step (the optimizer skips them)."""
        if len(groups) != len(self.inner.param_groups):
            raise ValueError(f"{len(groups)} param groups, the local optimizer has {len(self.inner.param_groups)}")
        for g_in, (_, _, hyper) in zip(self.inner.param_groups, groups):
            for k, v in hyper.items():
                if k in g_in and k != "params":
                    g_in[k] = v * self.lr_multiplier if k == "lr" else v
        self._skip = set(no_grad)

    def lr_at(self, iteration: int, group: int = 0) -> float:
        """The rate group ``group`` steps with (as set by the last :meth:`set_groups`)."""
        return float(self.inner.param_groups[group]["lr"])

    def all_finite(self, grad) -> bool:
        """Whether every gradient value is finite."""
        return bool(torch.as_tensor(grad).isfinite().all())

    @torch.no_grad()
    def _u(self, grad, params) -> torch.Tensor:
        w = params if isinstance(params, torch.Tensor) else torch.from_numpy(params)
        g = grad if isinstance(grad, torch.Tensor) else torch.from_numpy(np.asarray(grad))
        self.shadow.copy_(w)
        off = 0
        for i, v in enumerate(self.views):
            n = v.numel()
            v.grad = None if i in self._skip else g[off : off + n].view(v.shape)
            off += n
        self.inner.step()
        return w - self.shadow

    def step(self, grad, params, iteration: int, out=None):
        """The update ``u`` of this iteration (numpy on the host path, a tensor on the device path)."""
        u = self._u(grad, params)
        if self.on_device:
            return u
        u = u.numpy()
        if out is not None:
            np.copyto(out, u)
            return out
        return u

    def step_accumulate(self, grad, params, iteration: int, acc, want_u: bool = True):
        """:meth:`step` and ``acc += u`` (the device path)."""
        u = self._u(grad, params)
        acc += u
        return u

    def inner_state(self) -> dict:
        """Row tensor -> its torch-optimizer state, keys prefixed ``inner_`` (tensors cloned)."""
        out = {}
        for t, v in enumerate(self.views):
            st = self.inner.state.get(v, {})
            out[t] = {INNER_PREFIX + k: (x.detach().clone() if isinstance(x, torch.Tensor) else x) for k, x in st.items()}
        return out

    def load_inner_state(self, states: dict) -> None:
        """Restore :meth:`inner_state`'s output."""
        for t, st in states.items():
            inner = {k[len(INNER_PREFIX):]: v for k, v in st.items() if k.startswith(INNER_PREFIX)}
            v = self.views[t]
            self.inner.state[v] = {k: (x.detach().clone().to(x.device if k == "step" else v.device)
                                       if isinstance(x, torch.Tensor) else x) for k, x in inner.items()}
