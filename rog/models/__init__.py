"""Models for the ROG workloads: ConvMLP-S/M/L (CRUDA uses ConvMLP-M) and a quick-profile ConvMLP.

``make_model(name, num_classes)`` builds one by registry name; the registry is :data:`MODELS`.
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from .convmlp import ConvMLP, convmlp_l, convmlp_m, convmlp_s
from .quick import convmlp_quick
from .quick_cnn import cnn_bn_quick, cnn_bn_wide_quick, cnn_gn_quick, vgg_bn_quick

MODELS: dict[str, Callable[..., nn.Module]] = {
    "convmlp_s": convmlp_s,
    "convmlp_m": convmlp_m,
    "convmlp_l": convmlp_l,
    "convmlp_quick": convmlp_quick,
    "cnn_bn_quick": cnn_bn_quick,  # trained from scratch (QuickWorkload.SCRATCH_MODELS)
    "cnn_gn_quick": cnn_gn_quick,
    "cnn_bn_wide_quick": cnn_bn_wide_quick,  # trained from scratch; the non-IID steps' model
    "vgg_bn_quick": vgg_bn_quick,  # trained from scratch; VGG's fully connected classifier
}


def make_model(name: str, num_classes: int, **kwargs) -> nn.Module:
    """Build the registered model ``name`` with a ``num_classes``-way head (extra kwargs: ``in_chans``, ``drop_path_rate``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model name {name!r}; choose one of: {', '.join(sorted(MODELS))}")
    return MODELS[name](num_classes=num_classes, **kwargs)


__all__ = ["ConvMLP", "MODELS", "make_model", "convmlp_s", "convmlp_m", "convmlp_l", "convmlp_quick", "cnn_bn_quick", "cnn_gn_quick", "vgg_bn_quick", "cnn_bn_wide_quick"]
