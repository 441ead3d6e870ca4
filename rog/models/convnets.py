"""Small VGG-style and ResNet-style convolutional models for timing runs on a CPU.

:data:`MODELS` maps a name to ``(constructor, input height and width)``: the input size sets the
compute per parameter byte (a link calibrated so that communication takes the computation's time
then needs a rate the loopback transport can shape on a 2-core machine, tens of Mbit/s).

* :func:`vgg_mini`: VGG's shape (3x3 convolutions with ReLU and max-pooling, then three fully
  connected layers), 128 x 128 inputs: 9 layers, about 0.48 M parameters;
* :func:`resnet_mini` (32 x 32 inputs): ResNet's shape (a stem, bottleneck blocks with BatchNorm and a projection
  shortcut per stage, global pooling, one classifier): many small layers, compute-heavy per byte.
"""

from __future__ import annotations

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


def resnet_mini(num_classes: int = 10, blocks: tuple[int, ...] = (2, 2, 2), widths: tuple[int, ...] = (16, 32, 64)) -> nn.Module:
    """ResNet-style: stride-2 stem conv+BN, bottleneck stages (stride 2 between stages), pooling, one classifier."""
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True)]
    c = 32
    for i, (n, w) in enumerate(zip(blocks, widths)):
        for j in range(n):
            layers.append(Bottleneck(c, w, stride=2 if (i > 0 and j == 0) else 1))
            c = 4 * w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes))


MODELS = {"vgg_mini": (vgg_mini, 128), "resnet_mini": (resnet_mini, 32)}
