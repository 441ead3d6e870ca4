"""A small convolutional classifier trained from scratch on the quick workload's 16x16 images.

ScaDLES trains VGG19-BN and ResNet152 from a random start; both normalise every convolution with
BatchNorm.  :func:`cnn_bn_quick` keeps those two properties at laptop scale: three 3x3 convolutions
(16, 32, 64 channels), each followed by BatchNorm and ReLU, max-pooling after the first two, global
average pooling and one linear head (24,346 parameters with 10 classes).  :func:`cnn_gn_quick` is the
same network with GroupNorm (per-sample statistics, no running buffers) in place of BatchNorm, the
control that removes the per-worker normalisation state.  :func:`vgg_bn_quick` gives the same
BatchNorm features VGG's classifier form: the 64 x 4 x 4 map flattened into a hidden fully connected
layer (:data:`VGG_HIDDEN` units, ReLU) before the output (156,186 parameters with 10 classes).  Its
gradient (0.62 MB) is large next to an injected sample (3 KB), as ScaDLES's 230-548 MB updates are;
but unlike the average-pooled head it does not collapse under one label per worker
(``scripts/noniid_mechanism.py``).  :func:`cnn_bn_wide_quick` is :func:`cnn_bn_quick` with widths
:data:`WIDE_WIDTHS` (132,394 parameters): its average-pooled head is the one that collapses under label
skew, and its gradient (0.53 MB) puts ScaDLES's injection at (0.25, 0.25) under 1 % of the gradient
bytes (10 workers: 3 x 8 samples of 3,072 B against 10 pushes and pulls, 0.70 %).
"""

from __future__ import annotations

from torch import nn

WIDTHS = (16, 32, 64)
GROUPS = 4  # channels per group: 4, 8, 16
VGG_HIDDEN = 128
WIDE_WIDTHS = (32, 64, 192)


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(GROUPS, channels)
    raise ValueError(f"norm must be 'batch' or 'group'; got {kind!r}")


def _features(in_chans: int, norm: str, widths=WIDTHS) -> list[nn.Module]:
    """conv3x3-norm-ReLU x 3 (``widths``), max-pool after the first two."""
    layers: list[nn.Module] = []
    c = in_chans
    for i, w in enumerate(widths):
        layers += [nn.Conv2d(c, w, 3, padding=1, bias=False), _norm(norm, w), nn.ReLU(inplace=True)]
        if i < len(widths) - 1:
            layers.append(nn.MaxPool2d(2))
        c = w
    return layers


def quick_cnn(num_classes: int = 10, in_chans: int = 3, norm: str = "batch", widths=WIDTHS) -> nn.Sequential:
    """conv3x3-norm-ReLU x 3 (``widths``, max-pool after the first two), average pool, linear head."""
    return nn.Sequential(*_features(in_chans, norm, widths), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(widths[-1], num_classes))


def cnn_bn_quick(num_classes: int = 10, in_chans: int = 3, **_ignored) -> nn.Sequential:
    """The from-scratch quick CNN with BatchNorm (ScaDLES's models normalise with BatchNorm)."""
    return quick_cnn(num_classes, in_chans, norm="batch")


def cnn_bn_wide_quick(num_classes: int = 10, in_chans: int = 3, **_ignored) -> nn.Sequential:
    """The from-scratch BatchNorm CNN with widths :data:`WIDE_WIDTHS`: a gradient large next to 3 KB samples."""
    return quick_cnn(num_classes, in_chans, norm="batch", widths=WIDE_WIDTHS)


def cnn_gn_quick(num_classes: int = 10, in_chans: int = 3, **_ignored) -> nn.Sequential:
    """The same CNN with GroupNorm: no batch statistics, no running buffers."""
    return quick_cnn(num_classes, in_chans, norm="group")


def vgg_bn_quick(num_classes: int = 10, in_chans: int = 3, **_ignored) -> nn.Sequential:
    """The BatchNorm features with VGG's classifier form: flatten the 4 x 4 map (16 x 16 inputs), a hidden
    fully connected layer with ReLU, the output layer."""
    side = 16 // 2 ** (len(WIDTHS) - 1)
    return nn.Sequential(*_features(in_chans, "batch"), nn.Flatten(),
                         nn.Linear(WIDTHS[-1] * side * side, VGG_HIDDEN), nn.ReLU(inplace=True),
                         nn.Linear(VGG_HIDDEN, num_classes))
