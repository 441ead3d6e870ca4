"""The CRUDA workload (rog.workloads.cruda) on tiny generated Fed-CIFAR100-layout files."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest
import torch
from torch import nn

import h5py  # noqa: E402,F401  (a declared dependency: a broken install fails here, it does not skip)

import rog.workloads.cruda as cruda  # noqa: E402
from data_gen.make_tiny_fedcifar import make_tiny_cruda_dir, write_init_weights  # noqa: E402
from rog.workloads.cruda import CrudaWorkload, load_state_dict_file, pachinko_client_split  # noqa: E402
from rog.workloads.fedcifar import load_fedcifar  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cruda")
    make_tiny_cruda_dir(d, train_clients=8, test_clients=4, images_per_client=12, num_classes=100, seed=0)
    return d


@pytest.fixture(scope="module")
def s_weights(tmp_path_factory):
    """A seeded ConvMLP-S state_dict file (cheaper than -M for the strict-loading tests)."""
    return write_init_weights(tmp_path_factory.mktemp("w") / "s.pt", "convmlp_s", 100, seed=1)


def wl(data_dir, **kw) -> CrudaWorkload:
    kw.setdefault("image_size", 32)
    return CrudaWorkload(data_dir, **kw)


class ConstantModel(nn.Module):
    """Predicts class ``c`` for every image: logit 10 for ``c``, 0 elsewhere."""

    def __init__(self, c: int):
        super().__init__()
        self.c = c
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        out = torch.zeros(x.shape[0], 100) + 0 * self.dummy
        out[:, self.c] = 10.0
        return out


# ----------------------------------------------------------------------------- splits
def test_label_sorted_split_gives_contiguous_disjoint_class_blocks(data_dir):
    w = wl(data_dir, n_workers=4, split="label_sorted")
    y = w.train.labels
    allidx = np.sort(np.concatenate(w.shards))
    np.testing.assert_array_equal(allidx, np.arange(y.size))  # every sample exactly once
    blocks = [np.unique(y[s]) for s in w.shards]
    for a, b in zip(blocks, blocks[1:]):
        assert a.max() < b.min()  # contiguous class blocks in order
    classes = np.unique(y)
    assert [len(b) for b in blocks] == [len(p) for p in np.array_split(classes, 4)]


def test_pachinko_deals_whole_clients(data_dir):
    w = wl(data_dir, n_workers=4, split="pachinko", seed=3)
    clients = w.train.clients
    per_worker = [set(np.unique(clients[s]).tolist()) for s in w.shards]
    assert [len(c) for c in per_worker] == [2, 2, 2, 2]  # 8 clients dealt equally
    assert set().union(*per_worker) == set(range(8))
    for s, cs in zip(w.shards, per_worker):  # a worker holds all samples of its clients
        np.testing.assert_array_equal(np.sort(s), np.flatnonzero(np.isin(clients, list(cs))))
    assert w.split_method.startswith("pachinko: 8")
    other = wl(data_dir, n_workers=4, split="pachinko", seed=4)
    assert any(not np.array_equal(a, b) for a, b in zip(w.shards, other.shards))  # seeded shuffle
    with pytest.raises(ValueError, match="exceeds the 8 clients"):
        wl(data_dir, n_workers=9, split="pachinko")
    parts = pachinko_client_split(np.array([0, 0, 1, 2, 2, 2, 3]), 4, 3, seed=0)
    assert sorted(len(np.unique(np.array([0, 0, 1, 2, 2, 2, 3])[p])) for p in parts) == [1, 1, 2]


def test_pachinko_on_a_flat_file_falls_back_to_dirichlet(tmp_path, data_dir):
    d = load_fedcifar(data_dir / cruda.TRAIN_FILE)
    flat = tmp_path / "flat_train.h5"
    with h5py.File(flat, "w") as f:
        f["image"] = d.images
        f["label"] = d.labels
    w = wl(data_dir, split="pachinko", train_file=flat, alpha=0.3)
    assert "approximated by dirichlet(alpha=0.3)" in w.split_method and "no client ids" in w.split_method
    np.testing.assert_array_equal(np.sort(np.concatenate(w.shards)), np.arange(d.labels.size))


# ----------------------------------------------------------------------------- inputs and batches
def test_preprocess_without_resize_is_plain_normalisation(data_dir):
    w = wl(data_dir, image_size=32, normalize="cifar100")
    imgs = w.train.images[:5]
    mean = np.array([0.5071, 0.4867, 0.4408]).reshape(1, 3, 1, 1)
    std = np.array([0.2675, 0.2565, 0.2761]).reshape(1, 3, 1, 1)
    want = (imgs.transpose(0, 3, 1, 2) / 255.0 - mean) / std
    np.testing.assert_allclose(w.preprocess(imgs).numpy(), want, rtol=0, atol=1e-5)
    wi = wl(data_dir, image_size=32, normalize="imagenet")
    want_i = (imgs.transpose(0, 3, 1, 2) / 255.0 - np.array([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1)) \
        / np.array([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(wi.preprocess(imgs).numpy(), want_i, atol=1e-5)


def test_preprocess_resizes_to_224(data_dir):
    w = CrudaWorkload(data_dir)  # the paper's 224 px
    assert w.input_shape == (3, 224, 224)
    flat = np.full((2, 32, 32, 3), 200, np.uint8)  # a constant image stays constant under resizing
    x = w.preprocess(flat)
    assert x.shape == (2, 3, 224, 224) and x.dtype == torch.float32
    want = (200 / 255 - np.array([0.5071, 0.4867, 0.4408])) / np.array([0.2675, 0.2565, 0.2761])
    np.testing.assert_allclose(x.mean(dim=(0, 2, 3)).numpy(), want, atol=1e-5)
    assert float(x.std(dim=(2, 3)).max()) < 1e-5
    xb, yb = next(w.worker_batches(1, 3, seed=0))
    assert xb.shape == (3, 3, 224, 224) and yb.dtype == torch.int64
    with pytest.raises(ValueError, match="uint8"):
        w.preprocess(flat.astype(np.float32))


def _unnormalise(w: CrudaWorkload, x: torch.Tensor) -> np.ndarray:
    """Recover uint8 NHWC images from a 32 px (no resize) batch."""
    u = (x * w._std + w._mean) * 255.0
    return np.rint(u.numpy()).astype(np.uint8).transpose(0, 2, 3, 1)


def test_union_batches_cover_every_sample_once_per_epoch(data_dir):
    w = wl(data_dir)
    n = w.train.labels.size  # 96 = 4 batches of 24
    seen_x, seen_y = [], []
    it = w.union_batches(24, seed=5)
    for _ in range(n // 24):
        x, y = next(it)
        seen_x.append(_unnormalise(w, x))
        seen_y.append(y.numpy())
    got = np.concatenate(seen_x).reshape(n, -1)
    want = w.train.images.reshape(n, -1)
    order = lambda a: a[np.lexsort(a.T[::-1])]  # noqa: E731 - rows sorted lexicographically
    np.testing.assert_array_equal(order(got), order(want))
    np.testing.assert_array_equal(np.sort(np.concatenate(seen_y)), np.sort(w.train.labels))


def test_worker_batches_stay_in_the_shard(data_dir):
    w = wl(data_dir, n_workers=4, split="label_sorted")
    for k, shard in enumerate(w.shards):
        it = w.worker_batches(k, int(shard.size), seed=2)
        _, y = next(it)  # one batch = one epoch of this shard
        np.testing.assert_array_equal(np.sort(y.numpy()), np.sort(w.train.labels[shard]))
    a = [batch[1].tolist() for _, batch in zip(range(3), w.worker_batches(0, 5, seed=1))]
    b = [batch[1].tolist() for _, batch in zip(range(3), w.worker_batches(0, 5, seed=1))]
    c = [batch[1].tolist() for _, batch in zip(range(3), w.worker_batches(0, 5, seed=2))]
    assert a == b and a != c
    with pytest.raises(ValueError, match="worker"):
        w.worker_batches(4, 5)
    with pytest.raises(ValueError, match="batch_size"):
        w.worker_batches(0, 0)


# ----------------------------------------------------------------------------- evaluation
def test_evaluate_matches_an_independent_count(data_dir):
    w = wl(data_dir)
    with h5py.File(data_dir / cruda.TEST_FILE, "r") as f:  # labels read straight from the file
        labels = np.concatenate([f["examples"][c]["label"][()] for c in f["examples"]])
    c = int(np.bincount(labels).argmax())
    m = ConstantModel(c)
    m.train()
    res = w.test_metrics(m, batch_size=7)
    hit = float(np.mean(labels == c))
    z = math.exp(10) + 99  # softmax normaliser of the constant logits
    want_loss = hit * -math.log(math.exp(10) / z) + (1 - hit) * -math.log(1 / z)
    assert res["n"] == labels.size and res["accuracy"] == pytest.approx(hit)
    assert res["loss"] == pytest.approx(want_loss, rel=1e-5)
    assert w.evaluate(m) == pytest.approx(hit) and m.training  # training flag restored


def test_test_limit_and_test_set(data_dir, monkeypatch):
    w = wl(data_dir, test_limit=10, seed=1)
    x, y = w.test_set()
    assert x.shape == (10, 3, 32, 32) and y.shape == (10,)
    assert w.sizes()["test"] == 10 and w.test_metrics(ConstantModel(0))["n"] == 10
    np.testing.assert_array_equal(y.numpy(), w.test.labels[w._test_idx])
    np.testing.assert_array_equal(_unnormalise(w, x), w.test.images[w._test_idx])
    monkeypatch.setattr(cruda, "MAX_TEST_SET_BYTES", 1000)
    with pytest.raises(ValueError, match="use evaluate"):
        w.test_set()


# ----------------------------------------------------------------------------- weights
def test_pretrained_state_loads_strictly(data_dir, s_weights):
    w = wl(data_dir, pretrained_path=s_weights)
    state = w.pretrained_state("convmlp_s")
    saved = torch.load(s_weights, weights_only=True)
    assert state.keys() == saved.keys()
    assert all(torch.equal(state[k], saved[k]) for k in saved)


def test_wrapped_and_prefixed_checkpoints_are_accepted(tmp_path, s_weights):
    saved = torch.load(s_weights, weights_only=True)
    torch.save({"state_dict": {f"module.{k}": v for k, v in saved.items()}, "epoch": 3}, tmp_path / "ck.pth")
    got = load_state_dict_file(tmp_path / "ck.pth")
    assert got.keys() == saved.keys() and all(torch.equal(got[k], saved[k]) for k in saved)


def test_bad_weights_give_clear_errors(tmp_path, data_dir, s_weights):
    with pytest.raises(FileNotFoundError, match="utils/download_data.sh"):
        wl(data_dir, pretrained_path=tmp_path / "absent.pth").pretrained_state("convmlp_s")
    # default path: <data_dir>/convmlp_m_cifar100.pth
    assert wl(data_dir).pretrained_path == data_dir / cruda.WEIGHTS_FILE
    saved = torch.load(s_weights, weights_only=True)
    broken = dict(saved)
    broken.pop("head.bias")
    broken["head.weight"] = torch.zeros(10, broken["head.weight"].shape[1])
    torch.save(broken, tmp_path / "broken.pt")
    with pytest.raises(ValueError, match=r"missing 1: \['head.bias'\].*shape mismatches 1"):
        wl(data_dir, pretrained_path=tmp_path / "broken.pt").pretrained_state("convmlp_s")
    torch.save({"args": argparse.Namespace(lr=1.0), "state_dict": saved}, tmp_path / "timm.pth")
    with pytest.raises(ValueError, match="not a weights-only state_dict"):
        load_state_dict_file(tmp_path / "timm.pth")
    torch.save({"epoch": 1}, tmp_path / "nodict.pth")
    with pytest.raises(ValueError, match="expected a state_dict"):
        load_state_dict_file(tmp_path / "nodict.pth")


def test_convmlp_m_is_the_default_model(data_dir, tmp_path):
    p = write_init_weights(tmp_path / "m.pt", "convmlp_m", 100, seed=0)
    w = wl(data_dir, pretrained_path=p)
    model = w.pretrained_model()
    assert sum(t.numel() for t in model.parameters()) == 16_948_804  # ConvMLP-M, 100-class head
    with pytest.raises(ValueError, match="does not match convmlp_s"):
        w.pretrained_state("convmlp_s")


# ----------------------------------------------------------------------------- validation, summary
def test_bad_arguments_and_labels(tmp_path, data_dir):
    with pytest.raises(ValueError, match="split"):
        wl(data_dir, split="random")
    with pytest.raises(ValueError, match="image_size"):
        CrudaWorkload(data_dir, image_size=8)
    with pytest.raises(ValueError, match="normalize"):
        wl(data_dir, normalize="none")
    with pytest.raises(ValueError, match="test_limit"):
        wl(data_dir, test_limit=0)
    with pytest.raises(ValueError, match="model_name"):
        wl(data_dir).make_model("resnet50")
    bad = tmp_path / "bad_labels.h5"
    with h5py.File(bad, "w") as f:
        f["examples/0/image"] = np.zeros((2, 32, 32, 3), np.uint8)
        f["examples/0/label"] = np.array([5, 100])
    with pytest.raises(ValueError, match=r"labels must lie in 0\.\.99"):
        wl(data_dir, train_file=bad)
    with pytest.raises(FileNotFoundError, match="download_data.sh"):
        CrudaWorkload(tmp_path / "empty")


def test_summary(data_dir):
    s = wl(data_dir, split="pachinko").summary()
    assert s["workload"] == "cruda" and s["layout"] == {"train": "tff", "test": "tff"}
    assert s["clients"] == {"train": 8, "test": 4} and sum(s["shard_sizes"]) == s["adaptation"] == 96
    assert s["test"] == 48 and s["pretrained_present"] is False and "noisy_accuracy" not in s
