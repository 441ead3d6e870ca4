"""DynaComm's deep and branchy models: ResNet-152's depth, GoogLeNet-style Inception blocks grouped as
one layer each (``parallel_branches``), and layer schedules over such a block leaving the arithmetic
unchanged."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rog.models.convnets import MODELS, InceptionBlock, inception_mini, resnet152_mini
from rog.schedules.grouping import group_layers
from test_schedules_runtime import run


def test_resnet152_mini_has_resnet152s_depth():
    model = resnet152_mini()
    convs = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    shortcuts = [n for n in convs if ".short." in n]
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    # ResNet-152: a stem convolution, 50 bottlenecks of 3, one classifier = 152 weight layers
    assert len(convs) - len(shortcuts) == 1 + 3 * (3 + 8 + 36 + 3) == 151 and len(linears) == 1
    assert len(shortcuts) == 3  # stage 1 keeps the stem's 16 channels: stages 2-4 project
    layers = group_layers(model, torch.zeros(1, 3, 64, 64))
    assert len(layers) == len(convs) + len(linears) == 155
    assert sorted(i for lay in layers for i in lay.params) == list(range(len(list(model.parameters()))))


def _tiny_inception(seed=0, branches=True):
    torch.manual_seed(seed)
    block = InceptionBlock(8, 4, 2, 4, 2, 4, 4)
    if not branches:
        block.parallel_branches = False  # an instance attribute: this block is grouped per convolution
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), block, nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(block.c_out * 4 * 4, 5))


def test_an_inception_block_is_one_layer():
    model = _tiny_inception()
    layers = group_layers(model, torch.zeros(1, 3, 8, 8))
    names = [n for n, _ in model.named_parameters()]
    block = [i for i, n in enumerate(names) if n.startswith("3.")]
    assert len(block) == 6 * 3  # six convolutions (no bias), each with a BatchNorm's weight and bias
    stem = [i for i, n in enumerate(names) if n[:2] in ("0.", "1.")]  # the stem convolution (with bias), its BatchNorm
    head = [i for i, n in enumerate(names) if n.startswith("6.")]
    assert len(stem) == 4 and len(head) == 2
    assert [lay.params for lay in layers] == [stem, block, head]
    assert layers[1].gate == "3.b1.0"  # the block's first convolution waits for the block's pull segment
    assert "3.bp.0" in layers[1].modules  # the pool branch's max-pool runs inside the block's layer
    assert layers[2].modules == ["4", "5", "6"]
    # without the attribute every convolution (with its BatchNorm) is a layer of its own
    assert len(group_layers(_tiny_inception(branches=False), torch.zeros(1, 3, 8, 8))) == 1 + 6 + 1


def test_inception_mini_is_one_layer_per_block():
    model = inception_mini()
    blocks = sum(isinstance(m, InceptionBlock) for m in model.modules())
    assert blocks == 9  # GoogLeNet's 3a-b, 4a-e, 5a-b
    layers = group_layers(model, torch.zeros(1, 3, MODELS["inception_mini"][1], MODELS["inception_mini"][1]))
    assert len(layers) == 1 + blocks + 1
    assert sorted(i for lay in layers for i in lay.params) == list(range(len(list(model.parameters()))))


def test_schedules_over_an_inception_block_leave_the_weights_unchanged(tmp_path):
    ref = run("sequential", model=_tiny_inception)
    for schedule in ("lbl", "dynacomm"):
        got = run(schedule, model=_tiny_inception, tmp_path=tmp_path)
        for k in ref:
            np.testing.assert_allclose(got[k][0], ref[k][0], rtol=1e-6, atol=1e-7, err_msg=f"{schedule} w{k}")


def test_the_benchs_model_names_are_the_conv_models():
    """rog.papers.dynacomm.bench keeps a torch-free copy of the model names; the item sweeps only those."""
    from rog.papers.dynacomm.bench import MODEL_NAMES
    from rog.papers.dynacomm.item import SWEEP_MODELS

    assert set(MODEL_NAMES) == set(MODELS) and set(SWEEP_MODELS) <= set(MODELS)
