"""A tiny ConvMLP for the quick profile: same classes and pipeline shape, seconds per epoch on a CPU.

Built from :class:`rog.models.convmlp.ConvMLP` (one block per stage, widths 32/64/96, tokenizer
width 16, one residual conv block, MLP ratio 2): 210,818 parameters in 73 tensors, 1,448 rows with
a 10-class head, so ROG has rows to schedule.  On 16x16 images the spatial size goes
16 -> 4 (tokenizer) -> 2 (conv stage) -> 1 (stages), so the head sees a 1x1 map.  One epoch of
1,500 such images at batch 32 takes about 0.8 s on a 2-core x86 CPU (1 or 2 torch threads).
"""

from __future__ import annotations

from .convmlp import ConvMLP

QUICK_CONFIG: dict = dict(blocks=[1, 1, 1], dims=[32, 64, 96], mlp_ratios=[2, 2, 2], channels=16, n_conv_blocks=1)


def convmlp_quick(num_classes: int = 10, in_chans: int = 3, drop_path_rate: float = 0.1) -> ConvMLP:
    """The quick-profile ConvMLP (about 0.21 M parameters, 1,448 rows with 10 classes)."""
    return ConvMLP(**QUICK_CONFIG, num_classes=num_classes, drop_path_rate=drop_path_rate, in_chans=in_chans)
