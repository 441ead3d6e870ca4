"""Where a worker trains: the ``--device auto|cpu|cuda|cuda:N`` choice, checked and resolved on this machine.

torch is imported only when a CUDA device has to be asked for, so a launcher can check a ``--device``
choice without paying torch's import (``cpu``, and ``auto`` without an NVIDIA driver, never import it).
"""

from __future__ import annotations

import os
import re

__all__ = ["DEVICE_CHOICES", "check_device_spec", "nvidia_driver_present", "resolve_device"]

DEVICE_CHOICES = "auto|cpu|cuda|cuda:N"
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


def check_device_spec(spec: str, what: str = "--device") -> str:
    """``spec`` if it names a device choice (``auto``, ``cpu``, ``cuda``, ``cuda:N``), else ValueError."""
    if not isinstance(spec, str) or not _DEVICE_RE.match(spec):
        raise ValueError(f"{what} {spec!r}: choose one of {DEVICE_CHOICES} (N: a CUDA device index)")
    return spec


def nvidia_driver_present() -> bool:
    """Whether this machine shows an NVIDIA driver (``/proc/driver/nvidia`` or ``/dev/nvidia0``; Jetson: ``/dev/nvhost-ctrl-gpu``)."""
    return any(os.path.exists(p) for p in ("/proc/driver/nvidia/gpus", "/dev/nvidia0", "/dev/nvhost-ctrl-gpu"))


def resolve_device(spec: str = "auto", what: str = "--device") -> str:
    """The device ``spec`` means on this machine: ``cpu`` or ``cuda:N`` (``auto``: the GPU when one is present).

    ``cpu``, and ``auto`` on a machine without an NVIDIA driver, are answered without importing torch."""
    check_device_spec(spec, what)
    if spec == "cpu" or (spec == "auto" and not nvidia_driver_present()):
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    if spec == "auto":
        return f"cuda:{torch.cuda.current_device()}" if available else "cpu"
    if not available:
        raise ValueError(f"{what} {spec}: this machine has no CUDA device (torch {torch.__version__}, "
                         f"cuda {torch.version.cuda}); use --device cpu or auto")
    index = torch.cuda.current_device() if spec == "cuda" else int(spec.split(":")[1])
    if index >= torch.cuda.device_count():
        raise ValueError(f"{what} {spec}: only {torch.cuda.device_count()} CUDA device(s) here (cuda:0.."
                         f"cuda:{torch.cuda.device_count() - 1})")
    return f"cuda:{index}"
