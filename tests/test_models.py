"""ConvMLP models: names/shapes/order against the architecture spec, the paper's counts, forward, registry."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from rog.models import MODELS, make_model
from rog.models.convmlp import ConvMLP, DropPath, convmlp_l, convmlp_m, convmlp_s
from rog.models.quick import convmlp_quick
from rog.rows import RowPartition


# --------------------------------------------------------------------------- independent spec
def spec_named_shapes(blocks, dims, mlp_ratios, channels, n_conv_blocks, num_classes, in_chans=3):
    """Expected (name, shape) of every parameter, in registration order, written from the spec."""
    c, h = channels, channels // 2
    out = []
    # tokenizer: conv(in->C/2, s2), BN, ReLU, conv(C/2->C/2), BN, ReLU, conv(C/2->C), BN, ReLU, pool
    for idx, (ci, co) in zip((0, 3, 6), ((in_chans, h), (h, h), (h, c))):
        out += [(f"tokenizer.block.{idx}.weight", (co, ci, 3, 3)),
                (f"tokenizer.block.{idx + 1}.weight", (co,)), (f"tokenizer.block.{idx + 1}.bias", (co,))]
    d0 = dims[0]
    for b in range(n_conv_blocks):
        for idx, shape in zip((0, 3, 6), ((d0, c, 1, 1), (d0, d0, 3, 3), (c, d0, 1, 1))):
            p = f"conv_stages.conv_blocks.{b}"
            out += [(f"{p}.{idx}.weight", shape),
                    (f"{p}.{idx + 1}.weight", (shape[0],)), (f"{p}.{idx + 1}.bias", (shape[0],))]
    out += [("conv_stages.downsample.weight", (d0, c, 3, 3)), ("conv_stages.downsample.bias", (d0,))]
    for i, (n, d, r) in enumerate(zip(blocks, dims, mlp_ratios)):
        hid = int(d * r)
        for j in range(n):
            p = f"stages.{i}.blocks.{j}"
            mlp = lambda m: [(f"{p}.{m}.fc1.weight", (hid, d)), (f"{p}.{m}.fc1.bias", (hid,)),
                             (f"{p}.{m}.fc2.weight", (d, hid)), (f"{p}.{m}.fc2.bias", (d,))]
            out += [(f"{p}.norm1.weight", (d,)), (f"{p}.norm1.bias", (d,))] + mlp("channel_mlp1")
            out += [(f"{p}.norm2.weight", (d,)), (f"{p}.norm2.bias", (d,)),
                    (f"{p}.connect.weight", (d, 1, 3, 3)),
                    (f"{p}.connect_norm.weight", (d,)), (f"{p}.connect_norm.bias", (d,))] + mlp("channel_mlp2")
        if i + 1 < len(blocks):
            out += [(f"stages.{i}.downsample_mlp.downsample.weight", (dims[i + 1], d, 3, 3)),
                    (f"stages.{i}.downsample_mlp.downsample.bias", (dims[i + 1],))]
    out += [("norm.weight", (dims[-1],)), ("norm.bias", (dims[-1],)),
            ("head.weight", (num_classes, dims[-1])), ("head.bias", (num_classes,))]
    return out


def spec_rows(shape):
    """The paper's rule, restated: >= 2 dims and >= 1000 elements -> shape[0] rows, else one row."""
    numel = int(np.prod(shape))
    return shape[0] if len(shape) >= 2 and numel >= 1000 else 1


def closed_form_params_m(k):
    """ConvMLP-M parameter count by a per-layer formula (k classes)."""
    tok = 32 * 3 * 9 + 2 * 32 + 32 * 32 * 9 + 2 * 32 + 64 * 32 * 9 + 2 * 64
    conv_block = 64 * 128 + 2 * 128 + 128 * 128 * 9 + 2 * 128 + 128 * 64 + 2 * 64
    conv = 3 * conv_block + 128 * 64 * 9 + 128
    def cm_block(d, hid):  # 3 LayerNorms, depthwise 3x3, two MLPs
        return 3 * 2 * d + 9 * d + 2 * (d * hid + hid + hid * d + d)
    stages = 3 * cm_block(128, 384) + 6 * cm_block(256, 768) + 3 * cm_block(512, 1536)
    down = (256 * 128 * 9 + 256) + (512 * 256 * 9 + 512)
    return tok + conv + stages + down + 2 * 512 + 512 * k + k


M_SPEC = dict(blocks=[3, 6, 3], dims=[128, 256, 512], mlp_ratios=[3, 3, 3], channels=64, n_conv_blocks=3)
S_SPEC = dict(blocks=[2, 4, 2], dims=[128, 256, 512], mlp_ratios=[2, 2, 2], channels=64, n_conv_blocks=2)
L_SPEC = dict(blocks=[4, 8, 3], dims=[192, 384, 768], mlp_ratios=[3, 3, 3], channels=96, n_conv_blocks=3)
QUICK_SPEC = dict(blocks=[1, 1, 1], dims=[32, 64, 96], mlp_ratios=[2, 2, 2], channels=16, n_conv_blocks=1)


def named_shapes(model):
    return [(n, tuple(p.shape)) for n, p in model.named_parameters()]


_BUILT: dict = {}


def built(factory):
    """One real (allocated, initialised) 100-class model per factory, shared read-only across tests."""
    if factory not in _BUILT:
        torch.manual_seed(0)
        _BUILT[factory] = factory(num_classes=100).eval()
    return _BUILT[factory]


@pytest.fixture(scope="module")
def model_m():
    return built(convmlp_m)


# --------------------------------------------------------------------------- structure
@pytest.mark.parametrize(
    "factory,spec", [(convmlp_s, S_SPEC), (convmlp_m, M_SPEC), (convmlp_l, L_SPEC), (convmlp_quick, QUICK_SPEC)]
)
def test_names_shapes_and_order_match_spec(factory, spec):
    with torch.device("meta"):  # structure only: no allocation, no initialisation
        model = factory(num_classes=7)
    assert named_shapes(model) == spec_named_shapes(**spec, num_classes=7)


def test_convmlp_m_paper_counts(model_m):
    spec = spec_named_shapes(**M_SPEC, num_classes=100)
    n_params = sum(int(np.prod(s)) for _, s in spec)
    n_rows = sum(spec_rows(s) for _, s in spec)
    # independent derivations agree with each other and with the paper (226 layers, 16.95 M, 33,307 rows)
    assert n_params == closed_form_params_m(100) == 16_948_804
    assert len(spec) == 226 and n_rows == 33_307
    part = RowPartition.from_module(model_m)
    assert part.n_tensors == len(list(model_m.parameters())) == 226
    assert part.n_elements == sum(p.numel() for p in model_m.parameters()) == n_params
    assert part.n_rows == n_rows
    assert part.row_elements.min() == 9 and part.row_elements.max() == 2304
    assert part.names == tuple(n for n, _ in spec)  # registration order defines row ids


def test_convmlp_m_largest_layer_is_1_18_m(model_m):
    params = dict(model_m.named_parameters())
    name, largest = max(params.items(), key=lambda kv: kv[1].numel())
    assert name == "stages.1.downsample_mlp.downsample.weight"
    assert largest.numel() == 512 * 256 * 9 == 1_179_648
    # as a layer (weight + bias) it is 1,180,160; either way the paper's "1.18 M elements"
    layer = largest.numel() + params["stages.1.downsample_mlp.downsample.bias"].numel()
    assert layer == 1_180_160
    assert round(largest.numel() / 1e6, 2) == round(layer / 1e6, 2) == 1.18


def test_selected_names_and_shapes(model_m):
    params = dict(model_m.named_parameters())
    assert params["tokenizer.block.0.weight"].shape == (32, 3, 3, 3)
    assert params["conv_stages.conv_blocks.2.6.weight"].shape == (64, 128, 1, 1)
    assert params["stages.1.blocks.5.connect.weight"].shape == (256, 1, 3, 3)
    assert params["stages.0.downsample_mlp.downsample.bias"].shape == (256,)
    assert params["head.weight"].shape == (100, 512)
    assert "stages.2.downsample_mlp.downsample.weight" not in params
    assert not any(n.startswith("stages.2.downsample_mlp") for n in model_m.state_dict())
    # BatchNorm running statistics are buffers (in the state_dict, not rows)
    sd = model_m.state_dict()
    assert "tokenizer.block.1.running_mean" in sd and "tokenizer.block.1.num_batches_tracked" in sd


def test_drop_path_rates_linspace_per_stage(model_m):
    for stage, n in zip(model_m.stages, M_SPEC["blocks"]):
        rates = [getattr(b.drop_path, "p", 0.0) for b in stage.blocks]
        np.testing.assert_allclose(rates, np.linspace(0, 0.1, n), atol=1e-7)
        assert isinstance(stage.blocks[0].drop_path, torch.nn.Identity)


# --------------------------------------------------------------------------- forward / state
@pytest.mark.parametrize("factory", [convmlp_s, convmlp_m, convmlp_l])
def test_forward_shape(factory):
    torch.manual_seed(1)
    model = built(factory)
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 100) and torch.isfinite(out).all()


def test_every_parameter_gets_a_gradient():
    torch.manual_seed(2)
    model = convmlp_quick(10).train()
    loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 3, 16, 16)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.any(p.grad != 0)]
    assert missing == []


def test_train_vs_eval_mode():
    torch.manual_seed(3)
    model = convmlp_quick(10)
    x = torch.randn(8, 3, 16, 16)
    bn = model.tokenizer.block[1]
    model.eval()
    with torch.no_grad():
        a, b = model(x), model(x)
    assert torch.equal(a, b)  # eval: deterministic
    assert torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))  # eval does not update BN stats
    model.train()
    with torch.no_grad():
        model(x)
    assert int(bn.num_batches_tracked) == 1 and not torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))


def test_state_dict_round_trip_strict_quick():
    torch.manual_seed(4)
    src = convmlp_quick(10)
    src.train()
    with torch.no_grad():
        src(torch.randn(4, 3, 16, 16))  # move BN running stats away from their initial values
    src.eval()
    torch.manual_seed(5)
    dst = convmlp_quick(10).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert not torch.allclose(src(x), dst(x))
        result = dst.load_state_dict(src.state_dict(), strict=True)
        assert not result.missing_keys and not result.unexpected_keys
        assert torch.equal(src(x), dst(x))


def test_state_dict_round_trip_strict_m(model_m):
    # perturb every tensor of a copy (BN statistics included) so the load is observable
    sd = {k: (v.clone() + 0.5 if v.is_floating_point() else v.clone() + 3) for k, v in model_m.state_dict().items()}
    torch.manual_seed(5)
    dst = convmlp_m(100)
    result = dst.load_state_dict(sd, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    got = dst.state_dict()
    assert list(got) == list(sd)
    assert all(torch.equal(got[k], sd[k]) for k in sd)


def test_drop_path_behaviour():
    torch.manual_seed(6)
    dp = DropPath(0.25)
    x = torch.ones(4000, 2, 2, 3)
    y = dp.train()(x)
    per_sample = y.reshape(4000, -1)
    # each sample is either dropped (all zero) or kept and scaled by 1 / (1 - p)
    kept = per_sample[:, 0] != 0
    torch.testing.assert_close(per_sample[kept], torch.full_like(per_sample[kept], 1 / 0.75))
    assert torch.all(per_sample[~kept] == 0)
    assert abs(kept.float().mean().item() - 0.75) < 0.03  # 4000 draws: sd 0.007
    assert torch.equal(dp.eval()(x), x)
    with pytest.raises(ValueError, match="p"):
        DropPath(1.0)


# --------------------------------------------------------------------------- quick model
def test_quick_model_size_and_rows():
    model = convmlp_quick(10)
    spec = spec_named_shapes(**QUICK_SPEC, num_classes=10)
    n_params = sum(int(np.prod(s)) for _, s in spec)
    assert sum(p.numel() for p in model.parameters()) == n_params
    assert 100_000 <= n_params <= 300_000
    part = RowPartition.from_module(model)
    assert part.n_rows == sum(spec_rows(s) for _, s in spec) >= 300


def test_quick_model_forward_and_in_chans():
    torch.manual_seed(7)
    model = convmlp_quick(10).eval()
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 10)
    gray = convmlp_quick(5, in_chans=1).eval()
    assert dict(gray.named_parameters())["tokenizer.block.0.weight"].shape == (8, 1, 3, 3)
    assert gray(torch.randn(3, 1, 16, 16)).shape == (3, 5)


# --------------------------------------------------------------------------- registry / validation
def test_registry_and_make_model():
    assert set(MODELS) == {"convmlp_s", "convmlp_m", "convmlp_l", "convmlp_quick", "cnn_bn_quick", "cnn_gn_quick", "vgg_bn_quick", "cnn_bn_wide_quick"}
    model = make_model("convmlp_quick", 4)
    assert isinstance(model, ConvMLP) and model.head.out_features == 4
    with torch.device("meta"):
        assert named_shapes(make_model("convmlp_s", 3)) == spec_named_shapes(**S_SPEC, num_classes=3)
    with pytest.raises(ValueError, match="unknown model name 'resnet'.*convmlp_m"):
        make_model("resnet", 10)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(channels=15), "channels"),
        (dict(dims=[32, 64]), "dims"),
        (dict(mlp_ratios=[2, 2]), "mlp_ratios"),
        (dict(num_classes=0), "num_classes"),
        (dict(blocks=[1, 0, 1]), "blocks"),
        (dict(drop_path_rate=1.5), "drop_path_rate"),
        (dict(in_chans=0), "in_chans"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    args = dict(QUICK_SPEC, num_classes=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ConvMLP(**args)


def test_no_torchvision_or_timm_import():
    code = "import sys, rog.models; print(any(m.split('.')[0] in ('torchvision', 'timm') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
