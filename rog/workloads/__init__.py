"""Workloads: data, corruptions and non-IID splits for the training runs.

:mod:`rog.workloads.noise` holds DeepTest-style corruptions, :mod:`rog.workloads.split` the non-IID
partitions, :mod:`rog.workloads.quick` the download-free CRUDA-shaped workload (:class:`QuickWorkload`).
"""

from .noise import apply_noise, blur, brightness, contrast, fog, parse_noise
from .quick import QuickWorkload
from .split import dirichlet_split, iid_split, label_sorted_split, partition

__all__ = [
    "QuickWorkload",
    "apply_noise",
    "blur",
    "brightness",
    "contrast",
    "fog",
    "parse_noise",
    "partition",
    "label_sorted_split",
    "dirichlet_split",
    "iid_split",
]
