"""VGG-, ResNet- and DenseNet-style image classifiers with torchvision's layer structure, narrowed.

torchvision is not a dependency of the toolkit, and no pretrained weights are needed: latency and
energy depend on layer shapes, not on weight values, so every model here is randomly initialised
(seeded).  The layer structure and attribute names follow torchvision's ``vgg19``, ``resnet18`` and
``densenet121`` (``features``/``classifier``; ``BasicBlock`` with ``conv1, bn1, relu, conv2, bn2,
downsample``; ``_DenseLayer`` with ``norm1, relu1, conv1, norm2, relu2, conv2``), with the channel
widths divided by ``width_div`` and fewer dense layers, so that one forward at 224 px takes tens of
milliseconds on one CPU thread (the run has to finish in minutes on a 2-core machine).

Names (``MODELS``): ``vgg19`` (VGG19, widths / 8), ``resnet18`` (ResNet-18, widths / 4) and
``densenet`` (DenseNet-121-style, growth 8, blocks 3/6/12/8: light compute, wide activations).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from rog.inference import MODEL_NAMES

__all__ = ["MODELS", "INPUT_SHAPE", "build_model", "BasicBlock", "DenseLayer", "DenseBlock", "Transition", "Permute"]

INPUT_SHAPE = (1, 3, 224, 224)  # batch 1, one RGB image at ImageNet size (the paper's torchvision inputs)
NUM_CLASSES = 1000

VGG19_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M")


def _vgg19(width_div: int = 8) -> nn.Module:
    layers: list[nn.Module] = []
    c_in = 3
    for v in VGG19_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            c = v // width_div
            layers += [nn.Conv2d(c_in, c, kernel_size=3, padding=1), nn.ReLU(inplace=False)]
            c_in = c
    hidden = 4096 // width_div
    m = nn.Module()
    m.features = nn.Sequential(*layers)
    m.avgpool = nn.AdaptiveAvgPool2d((7, 7))
    m.classifier = nn.Sequential(nn.Linear(c_in * 49, hidden), nn.ReLU(), nn.Dropout(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Dropout(), nn.Linear(hidden, NUM_CLASSES))
    return _Classifier(m.features, m.avgpool, m.classifier)


class _Classifier(nn.Module):
    """``features -> avgpool -> flatten -> classifier`` (torchvision's VGG/DenseNet forward)."""

    def __init__(self, features: nn.Module, avgpool: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.features, self.avgpool, self.classifier = features, avgpool, classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions and a shortcut (1x1 strided conv when shapes change)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        idt = x if self.downsample is None else self.downsample(x)
        return self.relu(out + idt)


def _resnet18(width_div: int = 4) -> nn.Module:
    w = [64 // width_div, 128 // width_div, 256 // width_div, 512 // width_div]
    feats: list[nn.Module] = [nn.Conv2d(3, w[0], 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(w[0]), nn.ReLU(),
                              nn.MaxPool2d(3, stride=2, padding=1)]
    c_in = w[0]
    for i, c in enumerate(w):
        for b in range(2):
            feats.append(BasicBlock(c_in, c, stride=2 if (i > 0 and b == 0) else 1))
            c_in = c
    return _Classifier(nn.Sequential(*feats), nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(c_in, NUM_CLASSES))


class Permute(nn.Module):
    """``x.permute(*dims)`` as a module (torchvision's ConvNeXt block goes to channels-last and back with it)."""

    def __init__(self, dims) -> None:
        super().__init__()
        self.dims = tuple(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(*self.dims)


class DenseLayer(nn.Module):
    """DenseNet's bottleneck layer; its output is concatenated to its input along channels."""

    def __init__(self, c_in: int, growth: int, bn_size: int = 4) -> None:
        super().__init__()
        self.norm1, self.relu1 = nn.BatchNorm2d(c_in), nn.ReLU()
        self.conv1 = nn.Conv2d(c_in, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU()
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        new = self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))
        return torch.cat([x, new], 1)


class DenseBlock(nn.Sequential):
    """A run of dense layers (each adds ``growth`` channels)."""


class Transition(nn.Sequential):
    """BN, ReLU, 1x1 conv halving the channels, 2x2 average pool."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, c_out, 1, bias=False),
                         nn.AvgPool2d(2, stride=2))


def _densenet(growth: int = 8, blocks=(3, 6, 12, 8), init: int = 16) -> nn.Module:
    feats: list[nn.Module] = [nn.Conv2d(3, init, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(init), nn.ReLU(),
                              nn.MaxPool2d(3, stride=2, padding=1)]
    c = init
    for i, n in enumerate(blocks):
        layers = []
        for _ in range(n):
            layers.append(DenseLayer(c, growth))
            c += growth
        feats.append(DenseBlock(*layers))
        if i != len(blocks) - 1:
            feats.append(Transition(c, c // 2))
            c //= 2
    feats += [nn.BatchNorm2d(c), nn.ReLU()]
    return _Classifier(nn.Sequential(*feats), nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(c, NUM_CLASSES))


MODELS: dict[str, Callable[[], nn.Module]] = dict(zip(MODEL_NAMES, (_vgg19, _resnet18, _densenet)))


def build_model(name: str, seed: int = 0) -> nn.Module:
    """The named model in eval mode with seeded random weights (BatchNorm statistics randomised too,
    so that BN is not an identity)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    torch.manual_seed(seed)
    m = MODELS[name]()
    g = torch.Generator().manual_seed(seed + 1)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
    return m.eval()
