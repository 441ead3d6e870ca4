"""The local update on torch tensors: a worker's flat buffers on its device.

On a CUDA device the worker keeps its flat parameters, gradient, momentum and accumulator as
torch tensors on that device (:class:`TorchLocalUpdate`, :mod:`rog.codecs.device_codec`); only packed
sign bits and scales cross to the host.  The same code runs on CPU tensors, which is how it is
tested on machines without a GPU.  torch is imported inside the functions that use it.
"""

from __future__ import annotations

import numpy as np

from ..local_update import LocalUpdateConfig

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


class TorchLocalUpdate:
    """:class:`rog.local_update.LocalUpdate` with its momentum buffer on a torch device."""

    def __init__(self, n_elements: int, config: LocalUpdateConfig | None, device, kernels: bool | None = None) -> None:
        import torch

        from ..codecs.device_kernels import cupy_or_none, kernels_for

        # on CUDA with cupy: the update in one kernel (rog.codecs.device_kernels); kernels=False keeps the torch operations
        self._kernels = None
        if kernels is not False and torch.device(device).type == "cuda":
            self._kernels = kernels_for(device, cupy_or_none())
        if kernels and self._kernels is None:
            raise ValueError("kernels=True needs cupy and a CUDA device (pip install 'rog[gpu]')")
        self.config = config if config is not None else LocalUpdateConfig()
        self.schedule = self.config.schedule()
        self.lr_multiplier = 1.0  # set per iteration by streaming runs (rog.streams.weighting)
        self.momentum_buf = torch.zeros(int(n_elements), dtype=torch.float32, device=device)

    def lr_at(self, iteration: int) -> float:
        """Learning rate of iteration ``iteration`` (times :attr:`lr_multiplier`)."""
        return self.schedule(iteration) * self.lr_multiplier

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
        if int(iteration) != iteration or iteration < 1:
            raise ValueError(f"iteration must be an integer >= 1, got {iteration!r}")
        if tuple(grad.shape) != tuple(self.momentum_buf.shape):
            raise ValueError(f"grad has shape {tuple(grad.shape)}, expected ({self.momentum_buf.numel()},)")
        c = self.config
        if self._kernels is not None:
            return self._kernels.defsgdm(grad.contiguous(), params.contiguous(), self.momentum_buf,
                                         lr=float(np.float32(self.lr_at(iteration))),
                                         momentum=float(np.float32(c.momentum)),
                                         weight_decay=float(np.float32(c.weight_decay)), nesterov=c.nesterov,
                                         acc=acc, want_u=want_u)
        return torch_defsgdm_update(grad, params, self.momentum_buf, lr=self.lr_at(iteration), momentum=c.momentum,
                                    weight_decay=c.weight_decay, nesterov=c.nesterov)
