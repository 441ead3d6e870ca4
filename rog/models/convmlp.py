"""ConvMLP (Li et al. 2021, "ConvMLP: Hierarchical Convolutional MLPs for Vision"), torch only.

Written from the paper's architecture description.  Module structure and parameter names follow
the official SHI-Labs release so that its pre-trained ``state_dict`` files load one-to-one with
``load_state_dict(strict=True)``.  Parameter registration order (tokenizer, conv_stages, stages,
norm, head) is part of the contract: it fixes the row ids of :class:`rog.rows.RowPartition`.

Layout: a convolutional tokenizer (stride 4), a convolutional stage of residual bottleneck blocks
and a stride-2 downsample, then hierarchical Conv-MLP stages working in NHWC (channel MLP, depthwise
3x3 conv, channel MLP), a LayerNorm, global average pooling and a linear head.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

__all__ = [
    "DropPath",
    "ConvTokenizer",
    "ConvStage",
    "Mlp",
    "ConvMLPStage",
    "ConvDownsample",
    "BasicStage",
    "ConvMLP",
    "VARIANTS",
    "convmlp_s",
    "convmlp_m",
    "convmlp_l",
]


class DropPath(nn.Module):
    """Stochastic depth: in training, drop a residual branch per sample with probability ``p``.

    Kept samples are scaled by ``1 / (1 - p)`` so the expected output equals the input; in eval
    mode (or with ``p == 0``) it is the identity.
    """

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0.0 <= float(p) < 1.0:
            raise ValueError(f"DropPath p must lie in [0, 1); got {p}")
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        mask_shape = (x.shape[0],) + (1,) * (x.dim() - 1)
        mask = torch.empty(mask_shape, dtype=x.dtype, device=x.device).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.p}"


def _conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int, padding: int) -> list[nn.Module]:
    """Conv (no bias) + BatchNorm + ReLU, as a flat list so Sequential indices match the release."""
    return [
        nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    ]


class ConvTokenizer(nn.Module):
    """Three 3x3 conv-BN-ReLU layers (first with stride 2) and a stride-2 max pool: image -> C maps."""

    def __init__(self, embedding_dim: int = 64, in_chans: int = 3):
        super().__init__()
        half = embedding_dim // 2
        self.block = nn.Sequential(
            *_conv_bn_relu(in_chans, half, 3, 2, 1),
            *_conv_bn_relu(half, half, 3, 1, 1),
            *_conv_bn_relu(half, embedding_dim, 3, 1, 1),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class ConvStage(nn.Module):
    """Residual bottleneck conv blocks (1x1, 3x3, 1x1) at C channels, then a stride-2 3x3 downsample."""

    def __init__(self, num_blocks: int, embedding_dim_in: int, hidden_dim: int, embedding_dim_out: int):
        super().__init__()
        self.conv_blocks = nn.ModuleList(
            nn.Sequential(
                *_conv_bn_relu(embedding_dim_in, hidden_dim, 1, 1, 0),
                *_conv_bn_relu(hidden_dim, hidden_dim, 3, 1, 1),
                *_conv_bn_relu(hidden_dim, embedding_dim_in, 1, 1, 0),
            )
            for _ in range(num_blocks)
        )
        self.downsample = nn.Conv2d(embedding_dim_in, embedding_dim_out, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.conv_blocks:
            x = x + block(x)
        return self.downsample(x)


class Mlp(nn.Module):
    """Channel MLP on the last dimension: Linear, GELU, Linear."""

    def __init__(self, embedding_dim_in: int, hidden_dim: int, embedding_dim_out: int | None = None):
        super().__init__()
        out = embedding_dim_in if embedding_dim_out is None else embedding_dim_out
        self.fc1 = nn.Linear(embedding_dim_in, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class ConvMLPStage(nn.Module):
    """One Conv-MLP block (NHWC in and out): channel MLP, depthwise 3x3 conv, channel MLP.

    Both MLPs are residual (with stochastic depth); the depthwise conv is not, as in the paper.
    """

    def __init__(self, embedding_dim: int, dim_feedforward: int, stochastic_depth_rate: float = 0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(embedding_dim)
        self.channel_mlp1 = Mlp(embedding_dim, dim_feedforward)
        self.norm2 = nn.LayerNorm(embedding_dim)
        self.connect = nn.Conv2d(
            embedding_dim, embedding_dim, 3, stride=1, padding=1, groups=embedding_dim, bias=False
        )
        self.connect_norm = nn.LayerNorm(embedding_dim)
        self.channel_mlp2 = Mlp(embedding_dim, dim_feedforward)
        self.drop_path = DropPath(stochastic_depth_rate) if stochastic_depth_rate > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.channel_mlp1(self.norm1(x)))
        x = self.connect(self.connect_norm(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        x = x + self.drop_path(self.channel_mlp2(self.norm2(x)))
        return x


class ConvDownsample(nn.Module):
    """Stride-2 3x3 conv between Conv-MLP stages; takes and returns NHWC (convolves in NCHW)."""

    def __init__(self, embedding_dim_in: int, embedding_dim_out: int):
        super().__init__()
        self.downsample = nn.Conv2d(embedding_dim_in, embedding_dim_out, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.downsample(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


class BasicStage(nn.Module):
    """A run of Conv-MLP blocks at one width, optionally followed by a downsample to the next width.

    The drop-path rate grows linearly from 0 to ``stochastic_depth_rate`` across the stage's blocks.
    """

    def __init__(
        self,
        num_blocks: int,
        embedding_dims: Sequence[int],
        mlp_ratio: float = 1.0,
        stochastic_depth_rate: float = 0.1,
        downsample: bool = True,
    ):
        super().__init__()
        dim = int(embedding_dims[0])
        last = max(num_blocks - 1, 1)
        rates = [stochastic_depth_rate * j / last for j in range(num_blocks)]  # linspace(0, rate, n)
        self.blocks = nn.ModuleList(
            ConvMLPStage(dim, int(dim * mlp_ratio), stochastic_depth_rate=r) for r in rates
        )
        self.downsample_mlp = ConvDownsample(dim, int(embedding_dims[1])) if downsample else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.downsample_mlp(x)


def _check_positive_ints(name: str, values: Sequence, n: int | None = None) -> list[int]:
    """Validate a list of positive integers (optionally of length ``n``)."""
    try:
        out = [int(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a sequence of positive integers; got {values!r}") from None
    if not out or any(v <= 0 for v in out) or any(float(v) != float(o) for v, o in zip(out, values)):
        raise ValueError(f"{name} must be a non-empty sequence of positive integers; got {list(values)!r}")
    if n is not None and len(out) != n:
        raise ValueError(f"{name} must have one entry per stage ({n}); got {len(out)}: {out}")
    return out


class ConvMLP(nn.Module):
    """The ConvMLP classifier: tokenizer, conv stage, Conv-MLP stages, LayerNorm, pooling, linear head.

    ``blocks``, ``dims`` and ``mlp_ratios`` give one entry per Conv-MLP stage; ``channels`` is the
    tokenizer width (even); ``n_conv_blocks`` the number of residual conv blocks; ``in_chans`` the
    number of image channels.  Input is NCHW, output ``(batch, num_classes)`` logits.
    """

    def __init__(
        self,
        blocks: Sequence[int],
        dims: Sequence[int],
        mlp_ratios: Sequence[float],
        channels: int = 64,
        n_conv_blocks: int = 3,
        num_classes: int = 1000,
        drop_path_rate: float = 0.1,
        in_chans: int = 3,
    ):
        super().__init__()
        blocks = _check_positive_ints("blocks", blocks)
        dims = _check_positive_ints("dims", dims, len(blocks))
        mlp_ratios = [float(r) for r in mlp_ratios]
        if len(mlp_ratios) != len(blocks) or any(r <= 0 for r in mlp_ratios):
            raise ValueError(f"mlp_ratios must hold one positive ratio per stage ({len(blocks)}); got {mlp_ratios}")
        for d, r in zip(dims, mlp_ratios):
            if int(d * r) < 1:
                raise ValueError(f"mlp_ratios: dim {d} x ratio {r} gives an empty hidden layer; raise the ratio")
        (channels,) = _check_positive_ints("channels", [channels])
        if channels % 2:
            raise ValueError(f"channels must be even (the tokenizer starts at channels/2); got {channels}")
        (n_conv_blocks,) = _check_positive_ints("n_conv_blocks", [n_conv_blocks])
        (num_classes,) = _check_positive_ints("num_classes", [num_classes])
        (in_chans,) = _check_positive_ints("in_chans", [in_chans])
        if not 0.0 <= float(drop_path_rate) < 1.0:
            raise ValueError(f"drop_path_rate must lie in [0, 1); got {drop_path_rate}")

        self.num_classes = num_classes
        self.tokenizer = ConvTokenizer(embedding_dim=channels, in_chans=in_chans)
        self.conv_stages = ConvStage(n_conv_blocks, channels, hidden_dim=dims[0], embedding_dim_out=dims[0])
        self.stages = nn.ModuleList(
            BasicStage(
                blocks[i],
                dims[i : i + 2],
                mlp_ratio=mlp_ratios[i],
                stochastic_depth_rate=float(drop_path_rate),
                downsample=i + 1 < len(blocks),
            )
            for i in range(len(blocks))
        )
        self.norm = nn.LayerNorm(dims[-1])
        self.head = nn.Linear(dims[-1], num_classes)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        """Truncated-normal linears, Kaiming convs, unit norms (the usual ConvMLP initialisation)."""
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Image (NCHW) -> final feature map (NHWC, ``dims[-1]`` channels)."""
        x = self.conv_stages(self.tokenizer(x))
        x = x.permute(0, 2, 3, 1)
        for stage in self.stages:
            x = stage(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.forward_features(x))
        return self.head(x.mean(dim=(1, 2)))


# Variant hyper-parameters of the paper (Table 1 of Li et al.).
VARIANTS: dict[str, dict] = {
    "s": dict(blocks=[2, 4, 2], dims=[128, 256, 512], mlp_ratios=[2, 2, 2], channels=64, n_conv_blocks=2),
    "m": dict(blocks=[3, 6, 3], dims=[128, 256, 512], mlp_ratios=[3, 3, 3], channels=64, n_conv_blocks=3),
    "l": dict(blocks=[4, 8, 3], dims=[192, 384, 768], mlp_ratios=[3, 3, 3], channels=96, n_conv_blocks=3),
}


def convmlp_s(num_classes: int = 100, in_chans: int = 3, drop_path_rate: float = 0.1) -> ConvMLP:
    """ConvMLP-S (9.0 M parameters with a 1000-class head)."""
    return ConvMLP(**VARIANTS["s"], num_classes=num_classes, drop_path_rate=drop_path_rate, in_chans=in_chans)


def convmlp_m(num_classes: int = 100, in_chans: int = 3, drop_path_rate: float = 0.1) -> ConvMLP:
    """ConvMLP-M: the paper's CRUDA model (16.95 M parameters, 33,307 rows with a 100-class head)."""
    return ConvMLP(**VARIANTS["m"], num_classes=num_classes, drop_path_rate=drop_path_rate, in_chans=in_chans)


def convmlp_l(num_classes: int = 100, in_chans: int = 3, drop_path_rate: float = 0.1) -> ConvMLP:
    """ConvMLP-L (42.7 M parameters with a 1000-class head)."""
    return ConvMLP(**VARIANTS["l"], num_classes=num_classes, drop_path_rate=drop_path_rate, in_chans=in_chans)
