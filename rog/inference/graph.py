"""Graph capture along the height: a model as a chain of units, each local or global, with exact halos.

Intra-DP splits a layer's output along one spatial dimension and computes each part from the part of
the input it depends on ("local operators", Sec. 4.1).  Here the split dimension is the height
(rows); the released code used the width, either is correct.

Capture (:func:`capture`) walks a torchvision-style model: the children of ``features`` (nested
``nn.Sequential`` flattened, so a DenseNet's dense blocks and transitions become their layers),
then ``avgpool``, a flatten, and the children of ``classifier``.  Every child becomes a
:class:`Unit`, the chain's cut points are the boundaries between units (boundary ``u`` = the
input of unit ``u``; boundary 0 is the image, boundary ``L`` the logits).

Classification: convolution, max/average pooling, batch norm (eval), ReLU, GELU and dropout (eval) are
local; residual blocks (``BasicBlock``) and dense layers (``DenseLayer``) are local units whose
halo is the union of their branches'; adaptive pooling, flatten and linear layers on the flattened
input are global (they need every row).  Row-wise operators (the paper's matmul by rows, weights on both
sides) are local with no halo (:class:`RowWise`): a linear layer or a layer norm applied to a 4-D tensor
(it acts on the last dimension, the width, never the height), and the modules between a ``Permute`` to
channels-last and the ``Permute`` back (a ConvNeXt-style block's layer norm, linear layers and GELU over the
channels), captured together as one unit.  Any other module type is an error naming it.

Halo arithmetic (:meth:`Node.need`): output rows ``[a, b)`` of an operator with kernel ``k``,
stride ``s``, padding ``p`` and dilation ``d`` need input rows ``[a*s - p, (b-1)*s - p + d*(k-1) + 1)``;
rows outside ``[0, H)`` are the operator's own padding.  :meth:`Node.run` computes output rows
``[a, b)`` from a tensor holding any input rows that cover the need: it crops to the need, pads
explicitly where the need crosses the image edge (zeros; ``-inf`` for max pooling) and applies the
operator with no padding along the height, so a split output equals the whole one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from rog.inference.models import BasicBlock, DenseLayer

__all__ = ["Node", "Unit", "Graph", "capture", "clamp", "UnsupportedModule", "RowWise"]

Rows = Tuple[int, int]  # typing.Tuple: evaluated at import, Python 3.8


class UnsupportedModule(TypeError):
    """A module type graph capture does not know how to split."""


def clamp(rows: Rows, h: int) -> Rows:
    """``rows`` cut to ``[0, h)``."""
    return max(rows[0], 0), min(rows[1], h)


class Node:
    """One operator (or block) along the height: which input rows an output range needs, and how to
    compute that range.  ``local``: False for operators that need the whole input."""

    local = True

    def out_h(self, h: int) -> int:
        return h

    def need(self, a: int, b: int, h: int) -> Rows:
        return a, b

    def run(self, x: torch.Tensor, x_lo: int, a: int, b: int, h: int) -> torch.Tensor:
        raise NotImplementedError


def _crop(x: torch.Tensor, x_lo: int, rows: Rows, h: int) -> tuple[torch.Tensor, int, int]:
    """Rows ``rows`` (unclamped) of a tensor holding rows from ``x_lo``: the clamped slice and the
    numbers of rows missing above and below the image."""
    lo, hi = clamp(rows, h)
    if lo < x_lo or hi > x_lo + x.shape[2]:
        raise ValueError(f"input rows [{x_lo}, {x_lo + x.shape[2]}) do not cover the needed rows [{lo}, {hi})")
    return x[:, :, lo - x_lo:hi - x_lo], lo - rows[0], rows[1] - hi


class Elementwise(Node):
    """ReLU, batch norm in eval mode, dropout in eval mode: row ``r`` needs row ``r``."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def run(self, x, x_lo, a, b, h):
        t, _, _ = _crop(x, x_lo, (a, b), h)
        return self.module(t)


_ROW_OPS = (nn.Linear, nn.LayerNorm, nn.GELU, nn.ReLU, nn.Dropout, nn.Identity)
TO_CHANNELS_LAST, FROM_CHANNELS_LAST = (0, 2, 3, 1), (0, 3, 1, 2)


class RowWise(Node):
    """Operators acting inside every row (the paper's row-wise operators: a matmul split by rows of its
    input, the weights on both sides): linear layers, layer norms over the last dimension and activations,
    on a 4-D tensor's last dimension (the width) or, ``channels_last``, on the channels (the tensor permuted
    to ``N, H, W, C`` and back).  Row ``r`` needs row ``r``: no halo."""

    def __init__(self, modules: Sequence[nn.Module], channels_last: bool = False) -> None:
        for m in modules:
            if not isinstance(m, _ROW_OPS) or isinstance(m, nn.LayerNorm) and len(m.normalized_shape) != 1:
                raise UnsupportedModule(f"{type(m).__name__} is not a row-wise operator (Linear, LayerNorm over the last "
                                        f"dimension, GELU, ReLU, Dropout, Identity)")
        self.modules, self.channels_last = list(modules), channels_last

    def run(self, x, x_lo, a, b, h):
        t, _, _ = _crop(x, x_lo, (a, b), h)
        if self.channels_last:
            t = t.permute(*TO_CHANNELS_LAST)
        for m in self.modules:
            t = m(t)
        return t.permute(*FROM_CHANNELS_LAST) if self.channels_last else t


class Window(Node):
    """Convolution or pooling with kernel/stride/padding/dilation along the height."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        if isinstance(module, nn.Conv2d):
            if isinstance(module.padding, str) or module.padding_mode != "zeros":
                raise UnsupportedModule(f"Conv2d with padding {module.padding!r}/{module.padding_mode!r}: use integer zero padding")
            self.k, self.s, self.p, self.d = module.kernel_size[0], module.stride[0], module.padding[0], module.dilation[0]
            self.pad_value = 0.0
        elif isinstance(module, (nn.MaxPool2d, nn.AvgPool2d)):
            if module.ceil_mode:
                raise UnsupportedModule(f"{type(module).__name__} with ceil_mode=True")
            pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
            self.k, self.s, self.p = pair(module.kernel_size)[0], pair(module.stride)[0], pair(module.padding)[0]
            self.d = pair(getattr(module, "dilation", 1))[0]
            self.kw, self.sw, self.pw = pair(module.kernel_size)[1], pair(module.stride)[1], pair(module.padding)[1]
            self.pad_value = float("-inf") if isinstance(module, nn.MaxPool2d) else 0.0
            if isinstance(module, nn.AvgPool2d) and (not module.count_include_pad or module.divisor_override):
                raise UnsupportedModule("AvgPool2d must count padding (count_include_pad=True, no divisor_override)")
        else:
            raise UnsupportedModule(type(module).__name__)

    def out_h(self, h):
        return (h + 2 * self.p - self.d * (self.k - 1) - 1) // self.s + 1

    def need(self, a, b, h):
        return a * self.s - self.p, (b - 1) * self.s - self.p + self.d * (self.k - 1) + 1

    def run(self, x, x_lo, a, b, h):
        rows = self.need(a, b, h)
        t, top, bottom = _crop(x, x_lo, rows, h)
        if top or bottom:
            t = F.pad(t, (0, 0, top, bottom), value=self.pad_value)
        m = self.module
        if isinstance(m, nn.Conv2d):
            return F.conv2d(t, m.weight, m.bias, m.stride, (0, m.padding[1]), m.dilation, m.groups)
        if isinstance(m, nn.MaxPool2d):
            return F.max_pool2d(t, (self.k, self.kw), (self.s, self.sw), (0, self.pw), (self.d, 1))
        return F.avg_pool2d(t, (self.k, self.kw), (self.s, self.sw), (0, self.pw), count_include_pad=True)


class Chain(Node):
    """Operators in sequence: the need is folded backwards, clamped at every level."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self._heights: dict[int, list[int]] = {}

    def heights(self, h: int) -> list[int]:
        if h not in self._heights:  # nodes are fixed once captured
            hs = [h]
            for n in self.nodes:
                hs.append(n.out_h(hs[-1]))
            self._heights[h] = hs
        return list(self._heights[h])

    def out_h(self, h):
        return self.heights(h)[-1]

    def ranges(self, a: int, b: int, h: int) -> list[Rows]:
        """Rows every level computes (clamped) for output rows ``[a, b)``; index 0 is the input."""
        hs = self.heights(h)
        rs: list[Rows] = [(a, b)]
        for n, hin in zip(reversed(self.nodes), reversed(hs[:-1])):
            rs.append(clamp(n.need(*rs[-1], hin), hin))
        return rs[::-1]

    def need(self, a, b, h):
        if not self.nodes:
            return a, b
        return self.nodes[0].need(*self.ranges(a, b, h)[1], h)

    def run(self, x, x_lo, a, b, h):
        hs, rs = self.heights(h), self.ranges(a, b, h)
        t, lo = x, x_lo
        for n, hin, r in zip(self.nodes, hs, rs[1:]):
            t, lo = n.run(t, lo, r[0], r[1], hin), r[0]
        if not self.nodes:
            t, _, _ = _crop(t, lo, (a, b), h)
        return t


def _union(r1: Rows, r2: Rows) -> Rows:
    return min(r1[0], r2[0]), max(r1[1], r2[1])


class Residual(Node):
    """``relu(main(x) + shortcut(x))`` (ResNet's basic block)."""

    def __init__(self, block: BasicBlock) -> None:
        self.main = Chain([_node(m) for m in (block.conv1, block.bn1, block.relu, block.conv2, block.bn2)])
        self.short = Chain([] if block.downsample is None else [_node(m) for m in block.downsample])
        self.relu = block.relu

    def out_h(self, h):
        return self.main.out_h(h)

    def need(self, a, b, h):
        return _union(self.main.need(a, b, h), self.short.need(a, b, h))

    def run(self, x, x_lo, a, b, h):
        return self.relu(self.main.run(x, x_lo, a, b, h) + self.short.run(x, x_lo, a, b, h))


class DenseConcat(Node):
    """``cat([x, inner(x)], channels)`` (DenseNet's dense layer)."""

    def __init__(self, layer: DenseLayer) -> None:
        self.inner = Chain([_node(m) for m in (layer.norm1, layer.relu1, layer.conv1, layer.norm2, layer.relu2, layer.conv2)])

    def need(self, a, b, h):
        return _union((a, b), self.inner.need(a, b, h))

    def run(self, x, x_lo, a, b, h):
        t, _, _ = _crop(x, x_lo, (a, b), h)
        return torch.cat([t, self.inner.run(x, x_lo, a, b, h)], 1)


class Global(Node):
    """An operator that needs its whole input (adaptive pooling, flatten, linear)."""

    local = False

    def __init__(self, fn) -> None:
        self.fn = fn

    def out_h(self, h):
        return 1

    def need(self, a, b, h):
        return 0, h

    def run(self, x, x_lo, a, b, h):
        if x_lo != 0 or x.dim() == 4 and x.shape[2] != h:
            raise ValueError("a global operator needs its whole input")
        return self.fn(x)


def _node(m: nn.Module) -> Node:
    if isinstance(m, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)):
        return Window(m)
    if isinstance(m, (nn.ReLU, nn.GELU, nn.BatchNorm2d, nn.Dropout, nn.Identity)):
        return Elementwise(m)
    if isinstance(m, BasicBlock):
        return Residual(m)
    if isinstance(m, DenseLayer):
        return DenseConcat(m)
    if isinstance(m, (nn.AdaptiveAvgPool2d, nn.Linear)):
        return Global(m)
    raise UnsupportedModule(f"graph capture cannot split a {type(m).__name__} along the height; "
                            f"supported: Conv2d, MaxPool2d, AvgPool2d, BatchNorm2d, ReLU, GELU, Dropout, BasicBlock, "
                            f"DenseLayer, AdaptiveAvgPool2d, Linear, LayerNorm, Permute to channels-last and back")


@dataclass
class Unit:
    """One cut-delimited unit of the chain: name, node, shapes of its input and output."""

    name: str
    kind: str  # "local" or "global"
    node: Node
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]

    @property
    def out_bytes(self) -> int:
        n = 1
        for d in self.out_shape:
            n *= d
        return 4 * n  # float32

    @property
    def row_bytes(self) -> int:
        """Bytes of one output row (local units)."""
        return self.out_bytes // self.out_shape[2] if len(self.out_shape) == 4 else self.out_bytes

    @property
    def out_h(self) -> int:
        return self.out_shape[2] if len(self.out_shape) == 4 else 1


class Graph:
    """A captured model: units in order, the input shape, helpers for boundaries."""

    def __init__(self, units: list[Unit], in_shape: tuple[int, ...], model: nn.Module | None = None) -> None:
        self.units = units
        self.in_shape = tuple(in_shape)
        self.model = model

    def to(self, device: str) -> "Graph":
        """Move the captured model's weights (shared with the units) to ``device``; returns self."""
        if self.model is not None:
            self.model.to(device)
        return self

    def __len__(self) -> int:
        return len(self.units)

    def shape_at(self, u: int) -> tuple[int, ...]:
        """Shape of the tensor at boundary ``u`` (0: the input, ``L``: the output)."""
        return self.in_shape if u == 0 else self.units[u - 1].out_shape

    def bytes_at(self, u: int) -> int:
        s = self.shape_at(u)
        n = 1
        for d in s:
            n *= d
        return 4 * n

    def h_at(self, u: int) -> int:
        s = self.shape_at(u)
        return s[2] if len(s) == 4 else 1

    @property
    def first_global(self) -> int:
        """Index of the first global unit (local units are ``0 .. first_global - 1``)."""
        return next(i for i, u in enumerate(self.units) if u.kind == "global")

    def run_full(self, x: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Units ``start .. stop-1`` on the whole tensor at boundary ``start``."""
        stop = len(self.units) if stop is None else stop
        for u in range(start, stop):
            h = self.h_at(u)
            x = self.units[u].node.run(x, 0, 0, self.units[u].out_h, h)
        return x

    def segment(self, i: int, j: int) -> Chain:
        """The local units ``i .. j-1`` as one chain (``i <= j <= first_global``)."""
        if not 0 <= i <= j <= self.first_global:
            raise ValueError(f"a split segment must lie inside the local units 0..{self.first_global}, got [{i}, {j})")
        return Chain([u.node for u in self.units[i:j]])


def _children(model: nn.Module) -> list[tuple[str, nn.Module]]:
    out: list[tuple[str, nn.Module]] = []

    def walk(prefix: str, m: nn.Module) -> None:
        if type(m) is nn.Sequential or (isinstance(m, nn.Sequential) and not isinstance(m, DenseLayer)):
            for name, c in m.named_children():
                walk(f"{prefix}.{name}", c)
        else:
            out.append((prefix, m))

    for attr in ("features", "avgpool"):
        if not hasattr(model, attr):
            raise UnsupportedModule(f"graph capture needs a torchvision-style model with 'features', 'avgpool' and "
                                    f"'classifier'; {type(model).__name__} has no {attr!r}")
        walk(attr, getattr(model, attr))
    out.append(("flatten", nn.Flatten(1)))
    walk("classifier", model.classifier)
    return out


def _permute_dims(m: nn.Module) -> tuple | None:
    """The dims of a ``Permute`` module (ours or torchvision's), else None."""
    return tuple(m.dims) if type(m).__name__ == "Permute" and hasattr(m, "dims") else None


def _grouped(children: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module | RowWise]]:
    """``children`` with each run ``Permute`` to channels-last .. ``Permute`` back replaced by one
    channels-last :class:`RowWise` node (UnsupportedModule for any other permute)."""
    out: list = []
    k = 0
    while k < len(children):
        name, m = children[k]
        dims = _permute_dims(m)
        if dims is None:
            out.append((name, m))
            k += 1
            continue
        end = next((e for e in range(k + 1, len(children)) if _permute_dims(children[e][1]) is not None), None)
        if dims != TO_CHANNELS_LAST or end is None or _permute_dims(children[end][1]) != FROM_CHANNELS_LAST:
            raise UnsupportedModule(f"{name}: only a Permute{TO_CHANNELS_LAST} later undone by a Permute"
                                    f"{FROM_CHANNELS_LAST} can be split along the height")
        out.append((f"{name}..{children[end][0]}", RowWise([c for _, c in children[k + 1:end]], channels_last=True)))
        k = end + 1
    return out


def capture(model: nn.Module, in_shape: Sequence[int]) -> Graph:
    """The model's units in execution order, with shapes from one forward of zeros."""
    units: list[Unit] = []
    x = torch.zeros(tuple(in_shape))
    seen_global = False
    with torch.no_grad():
        for name, m in _grouped(_children(model)):
            if isinstance(m, RowWise):
                if seen_global:
                    raise UnsupportedModule(f"{name}: a channels-last block after a global operator")
                node = m
            elif isinstance(m, nn.Flatten):
                node = Global(m)
            elif isinstance(m, (nn.Linear, nn.LayerNorm)) and x.dim() == 4 and not seen_global:
                node = RowWise([m])  # acts on the width: a matmul by rows
            else:
                node = _node(m)
            if seen_global and node.local:  # after the first global op the rows are gone: the tail is global
                node = Global(m)
            seen_global |= not node.local
            y = node.run(x, 0, 0, node.out_h(x.shape[2]) if x.dim() == 4 else 1, x.shape[2] if x.dim() == 4 else 1)
            units.append(Unit(name, "local" if node.local else "global", node, tuple(x.shape), tuple(y.shape)))
            x = y
    return Graph(units, tuple(in_shape), model)

