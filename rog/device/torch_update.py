"""The local update on torch tensors: a worker's flat buffers on its device.

On a CUDA device the worker keeps its flat parameters, gradient, momentum and accumulator as
torch tensors on that device (:class:`TorchLocalUpdate`, :mod:`rog.codecs.device_codec`); only packed
sign bits and scales cross to the host.  The same code runs on CPU tensors, which is how it is
tested on machines without a GPU.  torch is imported inside the functions that use it.
"""

from __future__ import annotations

import numpy as np

from ..local_update import GroupedRules, LocalUpdateConfig

__all__ = ["check_flat_tensor", "torch_defsgdm_update", "TorchLocalUpdate"]


def check_flat_tensor(flat, n_elements: int, device, what: str = "flat") -> None:
    """Raise ValueError unless ``flat`` is a contiguous 1-D float32 tensor of ``n_elements`` on ``device``."""
    import torch

    if not isinstance(flat, torch.Tensor) or flat.dtype != torch.float32 or tuple(flat.shape) != (n_elements,):
        got = f"{flat.dtype} {tuple(flat.shape)}" if isinstance(flat, torch.Tensor) else type(flat).__name__
        raise ValueError(f"{what} must be a float32 tensor of shape ({n_elements},), got {got}")
    if flat.device != device:
        raise ValueError(f"{what} is on {flat.device}, the codec works on {device}")
    if not flat.is_contiguous():
        raise ValueError(f"{what} must be contiguous (use .contiguous())")


def torch_defsgdm_update(grad, params, momentum_buf, *, lr: float, momentum: float, weight_decay: float,
                         nesterov: bool):
    """:func:`rog.local_update.defsgdm_update` on torch tensors, with the same float32 operations in the
    same order (one rounding per product and per sum, never a fused multiply-add), so it gives the
    same bits as the numpy kernel; updates ``momentum_buf`` in place and returns ``u`` (new)."""
    d = grad.clone()
    if weight_decay:
        d += params * float(np.float32(weight_decay))
    if momentum:
        m = float(np.float32(momentum))
        momentum_buf *= m
        momentum_buf += d
        if nesterov:
            d += momentum_buf * m
        else:
            d.copy_(momentum_buf)
    d *= float(np.float32(lr))
    return d


class TorchLocalUpdate(GroupedRules):
    """:class:`rog.local_update.LocalUpdate` with its momentum buffer on a torch device (the same group rules)."""

    def __init__(self, n_elements: int, config: LocalUpdateConfig | None, device, kernels: bool | None = None) -> None:
        import torch

        from ..codecs.device_kernels import cupy_or_none, kernels_for

        # on CUDA with cupy: the update in one kernel (rog.codecs.device_kernels); kernels=False keeps the torch operations
        self._kernels = None
        if kernels is not False and torch.device(device).type == "cuda":
            self._kernels = kernels_for(device, cupy_or_none())
        if kernels and self._kernels is None:
            raise ValueError("kernels=True needs cupy and a CUDA device (pip install 'rog[gpu]')")
        self._init_rules(n_elements, config)
        self.momentum_buf = torch.zeros(self.n_elements, dtype=torch.float32, device=device)

    def step_accumulate(self, grad, params, iteration: int, acc, want_u: bool = True):
        """:meth:`step` with ``acc += u`` (the same float32 add): in the same pass on the kernels, where ``u``
        itself is not even written unless ``want_u``; returns ``u`` (None when not wanted on the kernels)."""
        if self._kernels is None:
            u = self.step(grad, params, iteration)
            acc += u
            return u
        return self._step(grad, params, iteration, acc, want_u)

    def step(self, grad, params, iteration: int):
        """The update ``u`` of iteration ``iteration`` for gradient ``grad`` at ``params``."""
        return self._step(grad, params, iteration, None, True)

    def all_finite(self, grad) -> bool:
        """Whether every value of the gradient is finite (one kernel and a 4-byte copy on the kernels)."""
        if self._kernels is not None:
            return self._kernels.all_finite(grad.contiguous())
        return bool(grad.isfinite().all())

    def _step(self, grad, params, iteration: int, acc, want_u: bool):
        self._check_step(grad.shape, iteration)
        if self._whole():
            return self._rule(0, grad, params, iteration, acc, want_u)
        u = self.momentum_buf.new_zeros(self.n_elements) if want_u or self._kernels is None else None
        for i, g in enumerate(self.groups):
            sl = slice(g.start, g.stop)
            ui = self._rule(i, grad[sl], params[sl], iteration, None if acc is None else acc[sl], want_u, sl)
            if u is not None and ui is not None:
                u[sl] = ui
        return u

    def span_update(self, grad, params, start: int, stop: int, iteration: int):
        """``u`` of one tensor's span ``[start, stop)`` (zeros, momentum kept, when no rule covers it)."""
        i = self.rule_of(start, stop)
        if i is None:
            return grad.new_zeros(stop - start)
        return self._rule(i, grad, params, iteration, None, True, slice(start, stop))

    def _rule(self, i: int, grad, params, iteration: int, acc, want_u: bool, sl: slice = slice(None)):
        """Rule ``i`` on ``grad``/``params``/``acc`` (slices ``sl`` of the buffers)."""
        g, mbuf = self.groups[i], self.momentum_buf[sl]
        lr = self.lr_at(iteration, i)
        if self._kernels is not None:
            return self._kernels.defsgdm(grad.contiguous(), params.contiguous(), mbuf, lr=float(np.float32(lr)),
                                         momentum=float(np.float32(g.momentum)),
                                         weight_decay=float(np.float32(g.weight_decay)), nesterov=g.nesterov,
                                         acc=acc, want_u=want_u)
        return torch_defsgdm_update(grad, params, mbuf, lr=lr, momentum=g.momentum, weight_decay=g.weight_decay,
                                    nesterov=g.nesterov)
