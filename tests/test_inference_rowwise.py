"""Row-wise operators as local units (rog/inference/graph.py's RowWise): a ConvNeXt-style channels-last block
(LayerNorm, Linear, GELU, Linear over the channels) and a Linear over the width are local with no halo, and
split plans through them give the whole model's output; a Linear over the flattened input stays global."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from inference_graphs import captured
from rog.inference.costmodel import Plan
from rog.inference.graph import Elementwise, Global, RowWise, UnsupportedModule, Window, capture
from rog.inference.loss import MultiPlan
from rog.inference.models import MODELS, Permute
from rog.inference.split import run_split
from rog.inference.stream import run_stream

SHAPE = (1, 3, 32, 32)


class _ConvNeXtStyle(nn.Module):
    """Conv stem, a depthwise 7x7 conv then an inverted-bottleneck MLP over the channels in channels-last
    layout (ConvNeXt's block without its shortcut), a pool, a Linear over the width, pooling and a classifier."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
            nn.Sequential(nn.Conv2d(8, 8, 7, padding=3, groups=8), Permute((0, 2, 3, 1)), nn.LayerNorm(8),
                          nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8), Permute((0, 3, 1, 2))),
            nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.Linear(16, 12), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(8, 10))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@pytest.fixture(scope="module")
def model():
    return _ConvNeXtStyle().eval()


@pytest.fixture(scope="module")
def graph(model):
    return capture(model, SHAPE)


def test_row_wise_units_are_local(graph):
    kinds = [(type(u.node).__name__, u.kind) for u in graph.units]
    assert kinds == [("Window", "local"), ("Elementwise", "local"), ("Window", "local"), ("RowWise", "local"),
                     ("Window", "local"), ("Window", "local"), ("RowWise", "local"), ("Elementwise", "local"),
                     ("Window", "local"), ("Global", "global"), ("Global", "global"), ("Global", "global")]
    block, width = graph.units[3], graph.units[6]
    assert block.node.channels_last and not width.node.channels_last
    assert block.in_shape == block.out_shape == (1, 8, 32, 32)
    assert width.out_shape == (1, 8, 16, 12)  # the Linear changed the width, not the height
    for u in (block, width):
        for a, b in ((0, 1), (5, 9), (0, u.out_h)):
            assert u.node.need(a, b, u.out_h) == (a, b)  # no halo
    assert graph.first_global == 9


def test_the_whole_graph_equals_the_model(model, graph):
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(graph.run_full(x), model(x), rtol=1e-5, atol=1e-6)


def test_split_plans_through_row_wise_units_equal_the_whole_output(graph):
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(1))
    ref = graph.run_full(x)
    g = graph.first_global
    for i, j in ((0, g), (3, 4), (2, 7), (4, 7), (0, 4)):
        for share in (0.25, 0.5, 0.8):
            for merge in ("robot", "server"):
                out = run_split(graph, Plan(i, j, share, merge), x)
                assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6), (i, j, share, merge)
    for bounds, xs in (((0, 4, 9), (0.3, 0.7)), ((2, 4, 7, 9), (0.6, 0.2, 0.5))):
        for merge in ("robot", "server"):
            assert torch.allclose(run_stream(graph, MultiPlan(bounds, xs, merge), x), ref, rtol=1e-5, atol=1e-6)


def test_row_wise_output_rows_equal_the_whole_ones(graph):
    """Any output rows of a row-wise unit equal the same rows of the whole unit's output (no halo)."""
    x = torch.randn(graph.shape_at(3), generator=torch.Generator().manual_seed(2))
    whole = graph.units[3].node.run(x, 0, 0, 32, 32)
    part = graph.units[3].node.run(x[:, :, 10:20], 10, 10, 20, 32)
    assert torch.allclose(part, whole[:, :, 10:20], rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError):
        graph.units[3].node.run(x[:, :, 10:20], 10, 9, 20, 32)  # row 9 was not given


def test_a_linear_over_the_flattened_input_stays_global(graph):
    assert isinstance(graph.units[-1].node, Global) and graph.units[-1].name == "classifier.0"


def test_unpaired_or_other_permutes_are_refused():
    for feats in ((nn.Conv2d(3, 4, 3, padding=1), Permute((0, 2, 3, 1)), nn.Linear(4, 4)),
                  (nn.Conv2d(3, 4, 3, padding=1), Permute((0, 1, 3, 2)), Permute((0, 1, 3, 2))),
                  (Permute((0, 2, 3, 1)), nn.Conv2d(3, 4, 1), Permute((0, 3, 1, 2)))):
        m = nn.Module()
        m.features, m.avgpool, m.classifier = nn.Sequential(*feats), nn.AdaptiveAvgPool2d(1), nn.Linear(4, 2)
        with pytest.raises(UnsupportedModule):
            capture(m, SHAPE)


def test_the_papers_models_have_no_row_wise_unit():
    """VGG19, ResNet-18 and DenseNet at batch 1: every unit is a window, elementwise, block or global one."""
    for name in MODELS:
        g = captured(name)
        assert not any(isinstance(u.node, RowWise) for u in g.units), name
        assert all(isinstance(u.node, Global) for u in g.units[g.first_global:])
        assert sum(isinstance(u.node, (Window, Elementwise)) for u in g.units) > 0
