"""Workloads: data, corruptions and non-IID splits for the training runs.

:mod:`rog.workloads.noise` holds DeepTest-style corruptions, :mod:`rog.workloads.split` the non-IID
partitions, :mod:`rog.workloads.quick` the download-free CRUDA-shaped workload (:class:`QuickWorkload`),
:mod:`rog.workloads.cruda` the paper's CRUDA, :mod:`rog.workloads.registry` which one a run trains.
"""

import importlib

_HOME = {  # public name -> submodule; imported on first use, so importing rog.workloads.registry stays
    # torch-free for the launcher and the parameter server (noise and quick import torch)
    "QuickWorkload": "quick",
    "apply_noise": "noise", "blur": "noise", "brightness": "noise", "contrast": "noise", "fog": "noise",
    "parse_noise": "noise",
    "partition": "split", "label_sorted_split": "split", "dirichlet_split": "split", "iid_split": "split",
}


def __getattr__(name: str):
    """The public names of the workload submodules, imported lazily (see ``_HOME``)."""
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
