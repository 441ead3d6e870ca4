"""Fed-CIFAR100 HDF5 reader/writer (rog.workloads.fedcifar) and the data generators in data_gen/."""

from __future__ import annotations

import json
from pathlib import Path
import pickle

import numpy as np
import pytest

import h5py  # noqa: E402,F401  (a declared dependency: a broken install fails here, it does not skip)

from data_gen.make_tiny_fedcifar import main as tiny_main  # noqa: E402
from data_gen.make_tiny_fedcifar import make_tiny_fedcifar, tiny_clients  # noqa: E402
from data_gen.noise_dataset import client_seed, main as noise_main, noise_file, noise_images  # noqa: E402
from rog.workloads.fedcifar import detect_layout, load_fedcifar, write_tff  # noqa: E402


def _imgs(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)


def _write_tff_by_hand(path, clients: dict) -> None:
    """The TFF layout written directly with h5py (independent of write_tff)."""
    with h5py.File(path, "w") as f:
        for cid, (x, y, c) in clients.items():
            g = f.create_group(f"examples/{cid}")
            g["image"] = x
            g["label"] = y
            if c is not None:
                g["coarse_label"] = c


# ----------------------------------------------------------------------------------- reader
def test_reads_the_tff_layout(tmp_path):
    p = tmp_path / "fed.h5"
    clients = {
        "10": (_imgs(2, 3), np.array([7, 8]), np.array([1, 1])),
        "0": (_imgs(3, 1), np.array([5, 6, 99]), np.array([0, 1, 19])),
        "1": (_imgs(1, 2), np.array([[42]]), np.array([[8]])),  # (N, 1) labels are accepted
    }
    _write_tff_by_hand(p, clients)
    d = load_fedcifar(p)
    assert d.layout == "tff" and d.client_ids == ("0", "1", "10")  # numeric order, not "0","1","10" by accident
    np.testing.assert_array_equal(d.images, np.concatenate([clients[c][0] for c in ("0", "1", "10")]))
    np.testing.assert_array_equal(d.labels, [5, 6, 99, 42, 7, 8])
    np.testing.assert_array_equal(d.coarse_labels, [0, 1, 19, 8, 1, 1])
    np.testing.assert_array_equal(d.clients, [0, 0, 0, 1, 2, 2])
    assert d.images.dtype == np.uint8 and d.labels.dtype == np.int64 and len(d) == 6
    assert [ix.tolist() for ix in d.client_indices()] == [[0, 1, 2], [3], [4, 5]]
    with h5py.File(p, "r") as f:
        assert detect_layout(f) == "tff"


def test_reads_flat_and_keyed_layouts(tmp_path):
    x = _imgs(4, 5)
    y = np.array([3, 1, 4, 1])
    for ik, lk in (("image", "label"), ("x", "y"), ("images", "labels")):
        p = tmp_path / f"flat_{ik}.h5"
        with h5py.File(p, "w") as f:
            f[ik] = x
            f[lk] = y
        d = load_fedcifar(p)
        assert d.layout == "flat" and d.client_ids == () and d.client_indices() == []
        np.testing.assert_array_equal(d.images, x)
        np.testing.assert_array_equal(d.labels, y)
    p = tmp_path / "keyed.h5"
    with h5py.File(p, "w") as f:
        f["images/7"] = x[:1]
        f["images/2"] = x[1:]
        f["labels/7"] = y[:1]
        f["labels/2"] = y[1:]
    d = load_fedcifar(p)
    assert d.layout == "keyed" and d.client_ids == ("2", "7")
    np.testing.assert_array_equal(d.images, np.concatenate([x[1:], x[:1]]))
    np.testing.assert_array_equal(d.labels, [1, 4, 1, 3])


def test_nchw_and_float_images_are_converted(tmp_path):
    x = _imgs(2, 6)
    p = tmp_path / "f.h5"
    with h5py.File(p, "w") as f:
        f["image"] = x.transpose(0, 3, 1, 2).astype(np.float32) / 255.0
        f["label"] = np.array([0, 1])
    np.testing.assert_array_equal(load_fedcifar(p).images, x)


def test_unknown_layout_names_file_and_keys(tmp_path):
    p = tmp_path / "odd.h5"
    with h5py.File(p, "w") as f:
        f["pixels"] = np.zeros((2, 32, 32, 3), np.uint8)
        f.create_group("meta")
    with pytest.raises(ValueError) as e:
        load_fedcifar(p)
    msg = str(e.value)
    assert "odd.h5" in msg and "pixels" in msg and "meta/" in msg and "examples" in msg


def test_inconsistent_contents_are_rejected(tmp_path):
    p = tmp_path / "short.h5"
    _write_tff_by_hand(p, {"0": (_imgs(3, 1), np.array([1, 2]), None)})
    with pytest.raises(ValueError, match="2 labels for 3 images"):
        load_fedcifar(p)
    p = tmp_path / "nolabel.h5"
    with h5py.File(p, "w") as f:
        f["examples/0/image"] = _imgs(1, 1)
    with pytest.raises(ValueError, match="examples/0 must be a group with datasets 'image' and 'label'"):
        load_fedcifar(p)
    p = tmp_path / "notes.h5"
    p.write_text("not hdf5")
    with pytest.raises(ValueError, match="not a readable HDF5 file"):
        load_fedcifar(p)
    with pytest.raises(FileNotFoundError, match="download_data.sh"):
        load_fedcifar(tmp_path / "absent.h5")


class _Boom:
    """Unpickling this object writes a marker file: proof that a loader executed the pickle."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickle_files_are_refused_without_being_read(tmp_path):
    marker = tmp_path / "executed"
    p = tmp_path / "mixed_fed_cifar100_train.pkl"
    p.write_bytes(pickle.dumps({"images": _Boom(marker)}))
    with pytest.raises(ValueError, match="pickle files are not supported"):
        load_fedcifar(p)
    assert not marker.exists()


def test_write_tff_round_trip_is_atomic(tmp_path):
    clients = tiny_clients(n_clients=3, images_per_client=4, num_classes=10, seed=2)
    p = write_tff(tmp_path / "out.h5", clients)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.h5"]  # no temp file left
    d = load_fedcifar(p)
    for k, cid in enumerate(d.client_ids):
        idx = d.client_indices()[k]
        np.testing.assert_array_equal(d.images[idx], clients[cid]["image"])
        np.testing.assert_array_equal(d.labels[idx], clients[cid]["label"])
    with pytest.raises(ValueError, match="client id"):
        write_tff(tmp_path / "bad.h5", {"a/b": clients["0"]})
    assert not (tmp_path / "bad.h5").exists()


# ----------------------------------------------------------------------------------- tiny data
def test_tiny_file_shape_and_determinism(tmp_path):
    p = make_tiny_fedcifar(tmp_path / "t.h5", n_clients=8, images_per_client=12, num_classes=100, seed=3)
    d = load_fedcifar(p)
    assert d.layout == "tff" and len(d.client_ids) == 8 and d.images.shape == (96, 32, 32, 3)
    assert d.labels.min() >= 0 and d.labels.max() < 100
    np.testing.assert_array_equal(d.coarse_labels, d.labels // 5)
    assert np.bincount(d.clients).tolist() == [12] * 8
    again = load_fedcifar(make_tiny_fedcifar(tmp_path / "u.h5", seed=3))
    np.testing.assert_array_equal(again.images, d.images)
    other = load_fedcifar(make_tiny_fedcifar(tmp_path / "v.h5", seed=4))
    assert not np.array_equal(other.images, d.images)
    # images of one class look alike (shared colour): mean colour distance within a class is smaller
    mean_rgb = d.images.reshape(96, -1, 3).mean(axis=1)
    same = [np.abs(mean_rgb[i] - mean_rgb[j]).sum() for i in range(96) for j in range(i + 1, 96)
            if d.labels[i] == d.labels[j]]
    diff = [np.abs(mean_rgb[i] - mean_rgb[j]).sum() for i in range(96) for j in range(i + 1, 96)
            if d.labels[i] != d.labels[j]]
    assert same and np.mean(same) < 0.5 * np.mean(diff)
    with pytest.raises(ValueError, match="n_clients"):
        tiny_clients(n_clients=0)


def test_tiny_cli_writes_a_cruda_dir(tmp_path, capsys):
    assert tiny_main(["--out-dir", str(tmp_path / "c"), "--train-clients", "4", "--test-clients", "2",
                      "--per-client", "3"]) == 0
    paths = json.loads(capsys.readouterr().out)
    train, test = load_fedcifar(paths["train"]), load_fedcifar(paths["test"])
    assert len(train) == 12 and len(test) == 6 and "weights" not in paths


# ----------------------------------------------------------------------------------- noise
def test_brightness_noise_matches_a_hand_computation():
    x = _imgs(6, 7)
    delta = 51 / 255  # a whole number of grey levels, so rounding is unambiguous
    out = noise_images(x, "brightness", seed=11, ranges={"brightness": (delta, delta)})
    signs = []
    for i in range(6):  # each image moved by exactly +51 or -51 grey levels (random sign), clipped
        up = np.clip(x[i].astype(int) + 51, 0, 255)
        down = np.clip(x[i].astype(int) - 51, 0, 255)
        assert np.array_equal(out[i], up) or np.array_equal(out[i], down)
        signs.append(np.array_equal(out[i], up))
    assert len(set(signs)) == 2  # both directions occur (darker and lighter)
    assert out.dtype == np.uint8 and out.shape == x.shape


def test_fog_pulls_pixels_toward_grey_and_modes_differ():
    x = np.zeros((4, 32, 32, 3), np.uint8)  # black images: fog can only lighten them
    fogged = noise_images(x, "fog", seed=1, ranges={"fog": (0.4, 0.4)})
    grey = 0.85 * 255
    # t = 0.4 * density, density in [0.4, 1]: pixel = t * grey
    assert fogged.min() >= np.floor(0.4 * 0.4 * grey) and fogged.max() <= np.ceil(0.4 * grey)
    both = noise_images(_imgs(20, 2), "fog+brightness", seed=5, mode="compose")
    one = noise_images(_imgs(20, 2), "fog+brightness", seed=5, mode="one_of")
    assert not np.array_equal(both, one)
    np.testing.assert_array_equal(noise_images(x, "none"), x)
    with pytest.raises(ValueError, match="mode"):
        noise_images(x, "fog", mode="all")
    with pytest.raises(ValueError, match="uint8"):
        noise_images(x.astype(np.float32), "fog")


def test_noise_file_keeps_labels_and_is_per_client_deterministic(tmp_path):
    clients = tiny_clients(n_clients=4, images_per_client=5, num_classes=20, seed=1)
    full = write_tff(tmp_path / "clean.h5", clients)
    part = write_tff(tmp_path / "clean_part.h5", {cid: clients[cid] for cid in ("1", "3")})
    s = noise_file(full, tmp_path / "noisy.h5", seed=9)
    assert s["clients"] == 4 and s["images"] == 20 and s["src_layout"] == "tff"
    noise_file(part, tmp_path / "noisy_part.h5", seed=9)
    clean, noisy, noisy_part = (load_fedcifar(tmp_path / n) for n in ("clean.h5", "noisy.h5", "noisy_part.h5"))
    np.testing.assert_array_equal(noisy.labels, clean.labels)
    np.testing.assert_array_equal(noisy.coarse_labels, clean.coarse_labels)
    assert noisy.client_ids == clean.client_ids
    assert np.mean(noisy.images != clean.images) > 0.5
    # a client's noise depends only on the seed and its id, not on the other clients in the file
    for k, cid in enumerate(noisy_part.client_ids):
        np.testing.assert_array_equal(noisy_part.images[noisy_part.client_indices()[k]],
                                      noisy.images[noisy.client_indices()[noisy.client_ids.index(cid)]])
    noise_file(full, tmp_path / "noisy_other.h5", seed=10)
    assert not np.array_equal(load_fedcifar(tmp_path / "noisy_other.h5").images, noisy.images)
    assert client_seed(9, "1") != client_seed(9, "3") and client_seed(9, "1") != client_seed(10, "1")

    with pytest.raises(ValueError, match="dst must differ"):
        noise_file(full, full)


def test_client_seed_is_the_documented_function_and_independent_of_the_interpreter():
    """A client's seed is numpy's generator seeded with [file seed, crc32(client id)], drawn once: computed
    here without the module, and in a fresh interpreter with another hash salt (Python's own ``hash`` of
    a string changes from run to run; a seed built on it would too)."""
    import subprocess
    import sys
    import zlib

    for seed, cid in ((9, "1"), (0, "f0042"), (123456, "client with spaces")):
        want = int(np.random.default_rng([seed, zlib.crc32(cid.encode())]).integers(0, 2**63 - 1))
        assert client_seed(seed, cid) == want
    code = "from data_gen.noise_dataset import client_seed; print(client_seed(9, '1'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"}, cwd=Path(__file__).resolve().parents[1])
    assert int(out.stdout.strip()) == client_seed(9, "1")


def test_noise_cli(tmp_path, capsys):
    src = make_tiny_fedcifar(tmp_path / "c.h5", n_clients=2, images_per_client=2, num_classes=5)
    assert noise_main([str(src), str(tmp_path / "n.h5"), "--seed", "3", "--range", "fog=0.3,0.6"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ranges"] == {"fog": [0.3, 0.6]} and out["images"] == 4
    with pytest.raises(SystemExit):
        noise_main([str(src), str(tmp_path / "m.h5"), "--range", "fog=0.6,0.3"])
    assert noise_main([str(tmp_path / "absent.h5"), str(tmp_path / "m.h5")]) == 2
