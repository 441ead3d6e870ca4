"""Small VGG-style and ResNet-style convolutional models for timing runs on a CPU.

:data:`MODELS` maps a name to ``(constructor, input height and width)``: the input size sets the
compute per parameter byte (a link calibrated so that communication takes the computation's time
then needs a rate the loopback transport can shape on a 2-core machine, tens of Mbit/s).

* :func:`vgg_mini`: VGG's shape (3x3 convolutions with ReLU and max-pooling, then three fully
  connected layers), 128 x 128 inputs: 9 layers, about 0.48 M parameters;
* :func:`resnet_mini` (32 x 32 inputs): ResNet's shape (a stem, bottleneck blocks with BatchNorm and a projection
  shortcut per stage, global pooling, one classifier): many small layers, compute-heavy per byte;
* :func:`resnet152_mini` (64 x 64 inputs): ResNet-152's depth (bottleneck stages of 3, 8, 36 and 3 blocks:
  151 convolutions and one classifier; 155 DynaComm layers with its 3 projection shortcuts), narrow enough
  (widths 4-32) to train on a CPU;
* :func:`inception_mini` (64 x 64 inputs): GoogLeNet's shape (a stem, nine Inception blocks of four parallel
  branches concatenated, max-pooling after the 2nd and 7th, global pooling, one classifier), narrow.  Each
  block sets :attr:`InceptionBlock.parallel_branches`, so :mod:`rog.schedules.grouping` makes it one layer.
"""

from __future__ import annotations

import torch
from torch import nn

VGG_MINI = (16, "M", 32, "M", 64, 64, "M", 128, 128, "M")


def vgg_mini(num_classes: int = 10) -> nn.Module:
    """VGG-style: conv3x3+ReLU stacks with max-pooling, a 2 x 2 max-pool, then FC 512-256-256-classes."""
    layers, c = [], 3
    for v in VGG_MINI:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
            c = v
    return nn.Sequential(*layers, nn.AdaptiveMaxPool2d(2), nn.Flatten(), nn.Linear(c * 2 * 2, 256), nn.ReLU(inplace=True),
                         nn.Linear(256, 256), nn.ReLU(inplace=True), nn.Linear(256, num_classes))


class Bottleneck(nn.Module):
    """1x1 - 3x3 - 1x1 bottleneck with BatchNorm; a projection shortcut when the shape changes."""

    def __init__(self, c_in: int, width: int, stride: int = 1) -> None:
        super().__init__()
        c_out = 4 * width
        self.conv1, self.bn1 = nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, c_out, 1, bias=False), nn.BatchNorm2d(c_out)
        self.relu1, self.relu2, self.relu3 = nn.ReLU(inplace=True), nn.ReLU(inplace=True), nn.ReLU(inplace=True)
        self.short = None
        if stride != 1 or c_in != c_out:
            self.short = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        s = x if self.short is None else self.short(x)
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.relu2(self.bn2(self.conv2(y)))
        return self.relu3(self.bn3(self.conv3(y)) + s)


def resnet_mini(num_classes: int = 10, blocks: tuple[int, ...] = (2, 2, 2), widths: tuple[int, ...] = (16, 32, 64),
                stem_channels: int = 32) -> nn.Module:
    """ResNet-style: stride-2 stem conv+BN, bottleneck stages (stride 2 between stages), pooling, one classifier."""
    c = stem_channels
    layers: list[nn.Module] = [nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
    for i, (n, w) in enumerate(zip(blocks, widths)):
        for j in range(n):
            layers.append(Bottleneck(c, w, stride=2 if (i > 0 and j == 0) else 1))
            c = 4 * w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes))


RESNET152_BLOCKS = (3, 8, 36, 3)  # ResNet-152's bottleneck stages (He et al. 2016, Table 1)


def resnet152_mini(num_classes: int = 10) -> nn.Module:
    """ResNet-152's depth (blocks 3-8-36-3, 151 convolutions + one classifier) at widths 4, 8, 16, 32 and a 16-channel stem."""
    return resnet_mini(num_classes, blocks=RESNET152_BLOCKS, widths=(4, 8, 16, 32), stem_channels=16)


class InceptionBlock(nn.Module):
    """GoogLeNet's Inception module: 1x1 | 1x1-3x3 | 1x1-5x5 | 3x3 max-pool-1x1, concatenated on channels.

    ``parallel_branches = True`` tells :func:`rog.schedules.grouping.group_layers` to make the whole block one
    layer (the branches are parallel: none of them is "before" another)."""

    parallel_branches = True

    def __init__(self, c_in: int, c1: int, r3: int, c3: int, r5: int, c5: int, cp: int) -> None:
        super().__init__()

        def conv(a: int, b: int, k: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(a, b, k, padding=k // 2, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True))

        self.b1 = conv(c_in, c1, 1)
        self.b3 = nn.Sequential(conv(c_in, r3, 1), conv(r3, c3, 3))
        self.b5 = nn.Sequential(conv(c_in, r5, 1), conv(r5, c5, 5))
        self.bp = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1), conv(c_in, cp, 1))
        self.c_out = c1 + c3 + c5 + cp

    def forward(self, x):
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], dim=1)


# GoogLeNet's nine Inception blocks (3a-b, 4a-e, 5a-b; Szegedy et al. 2015, Table 1), channels divided by 8
INCEPTION_BLOCKS = ((8, 12, 16, 2, 4, 4), (16, 16, 24, 4, 12, 8), "M",
                    (24, 12, 26, 2, 6, 8), (20, 14, 28, 3, 8, 8), (16, 16, 32, 3, 8, 8), (14, 18, 36, 4, 8, 8),
                    (32, 20, 40, 4, 16, 16), "M", (32, 20, 40, 4, 16, 16), (48, 24, 48, 6, 16, 16))


def inception_mini(num_classes: int = 10) -> nn.Module:
    """GoogLeNet-style: a 3x3 stem conv+BN, nine :class:`InceptionBlock` (channels / 8), max-pooling between
    stages, global pooling, one classifier."""
    layers: list[nn.Module] = [nn.Conv2d(3, 24, 3, padding=1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True),
                               nn.MaxPool2d(2)]
    c = 24
    for spec in INCEPTION_BLOCKS:
        if spec == "M":
            layers.append(nn.MaxPool2d(2))
            continue
        block = InceptionBlock(c, *spec)
        layers.append(block)
        c = block.c_out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes))


MODELS = {"vgg_mini": (vgg_mini, 128), "resnet_mini": (resnet_mini, 32), "resnet152_mini": (resnet152_mini, 64),
          "inception_mini": (inception_mini, 64)}
