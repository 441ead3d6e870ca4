"""Tiny Fed-CIFAR100-layout files, so the full CRUDA path runs without a download.

Writes ``examples/<client_id>/{image,label,coarse_label}`` (the TensorFlow Federated layout, see
:mod:`rog.workloads.fedcifar`): uint8 32x32x3 images, fine labels in ``0..num_classes-1``.  Each client
draws its labels from its own Dirichlet(0.5) class mix (non-IID, like TFF's clients).  Images are
class-dependent patterns (a per-class colour and stripe frequency plus pixel noise), so a model can
tell classes apart.  ``coarse_label`` is ``label // 5``: NOT CIFAR-100's real fine-to-coarse mapping,
only the same shape.

:func:`make_tiny_cruda_dir` writes the pair a :class:`rog.workloads.cruda.CrudaWorkload` reads
(``mixed_fed_cifar100_{train,test}.h5``, noised with :mod:`data_gen.noise_dataset`) and, on request,
a seeded random ConvMLP state_dict (:func:`write_init_weights`): NOT pre-trained weights, only the
right shapes for a smoke run (ConvMLP-M at 224 px, a few iterations).

    python -m data_gen.make_tiny_fedcifar --out-dir /tmp/tiny_cruda --init-weights
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from rog.workloads.fedcifar import write_tff

__all__ = ["tiny_clients", "make_tiny_fedcifar", "make_tiny_cruda_dir", "write_init_weights", "INIT_WEIGHTS_FILE",
           "main"]

INIT_WEIGHTS_FILE = "convmlp_m_random_init.pt"  # deliberately not the release's file name


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return int(value)


def tiny_clients(n_clients: int = 8, images_per_client: int = 12, num_classes: int = 100, seed: int = 0,
                 image_size: int = 32) -> dict[str, dict[str, np.ndarray]]:
    """``{client_id: {"image", "label", "coarse_label"}}`` with ids ``"0"``.. (deterministic in ``seed``)."""
    n_clients = _positive("n_clients", n_clients)
    per = _positive("images_per_client", images_per_client)
    num_classes = _positive("num_classes", num_classes)
    size = _positive("image_size", image_size)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    cls_rng = np.random.default_rng([int(seed), 0xC1A55])
    colour = cls_rng.uniform(0.15, 0.85, (num_classes, 3))  # per-class base colour
    freq = cls_rng.uniform(0.5, 4.0, num_classes)  # per-class stripe frequency (cycles per image)
    angle = cls_rng.uniform(0.0, np.pi, num_classes)
    yy, xx = np.meshgrid(np.linspace(0, 1, size), np.linspace(0, 1, size), indexing="ij")
    out: dict[str, dict[str, np.ndarray]] = {}
    for c in range(n_clients):
        rng = np.random.default_rng([int(seed), c])
        mix = rng.dirichlet(np.full(num_classes, 0.5))
        labels = rng.choice(num_classes, size=per, p=mix).astype(np.int64)
        phase = (np.cos(angle[labels])[:, None, None] * xx + np.sin(angle[labels])[:, None, None] * yy)
        stripes = 0.5 + 0.5 * np.sin(2 * np.pi * freq[labels][:, None, None] * phase)  # (N, H, W)
        img = colour[labels][:, None, None, :] * (0.6 + 0.4 * stripes[..., None])
        img = img + rng.normal(0.0, 0.03, img.shape)
        out[str(c)] = {
            "image": np.clip(np.rint(img * 255), 0, 255).astype(np.uint8),
            "label": labels,
            "coarse_label": labels // 5,
        }
    return out


def make_tiny_fedcifar(path: str | Path, n_clients: int = 8, images_per_client: int = 12, num_classes: int = 100,
                       seed: int = 0) -> Path:
    """Write a tiny clean file in the TFF layout; returns its path."""
    return write_tff(path, tiny_clients(n_clients, images_per_client, num_classes, seed))


def write_init_weights(path: str | Path, model_name: str = "convmlp_m", num_classes: int = 100, seed: int = 0) -> Path:
    """Save a seeded, randomly initialised model ``state_dict`` (NOT pre-trained) with ``torch.save``."""
    import torch

    from rog.models import make_model

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = make_model(model_name, num_classes)
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, p)
    return p


def make_tiny_cruda_dir(out_dir: str | Path, train_clients: int = 8, test_clients: int = 4,
                        images_per_client: int = 12, num_classes: int = 100, seed: int = 0,
                        noise: str = "fog+brightness", init_weights: bool = False) -> dict[str, str]:
    """Write ``mixed_fed_cifar100_{train,test}.h5`` (clean tiny data noised with ``noise``; ``""`` keeps it
    clean) and, if ``init_weights``, :data:`INIT_WEIGHTS_FILE`; returns the paths written."""
    from data_gen.noise_dataset import noise_file

    from rog.workloads.cruda import TEST_FILE, TRAIN_FILE

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}
    for role, fname, n, s in (("train", TRAIN_FILE, train_clients, seed * 2), ("test", TEST_FILE, test_clients, seed * 2 + 1)):
        clean = d / f"clean_{fname}"
        make_tiny_fedcifar(clean, n, images_per_client, num_classes, s)
        if noise:
            noise_file(clean, d / fname, noise=noise, seed=s)
            clean.unlink()
        else:
            clean.replace(d / fname)
        paths[role] = str(d / fname)
    if init_weights:
        paths["weights"] = str(write_init_weights(d / INIT_WEIGHTS_FILE, "convmlp_m", num_classes, seed))
    return paths


def main(argv: list[str] | None = None) -> int:
    """CLI: write a tiny CRUDA data dir (or one file with --file) and print the paths as JSON."""
    ap = argparse.ArgumentParser(prog="python -m data_gen.make_tiny_fedcifar", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", help="write mixed_fed_cifar100_{train,test}.h5 here")
    ap.add_argument("--file", help="instead, write one clean file in the TFF layout to this path")
    ap.add_argument("--train-clients", type=int, default=8)
    ap.add_argument("--test-clients", type=int, default=4)
    ap.add_argument("--per-client", type=int, default=12, help="images per client (default 12)")
    ap.add_argument("--classes", type=int, default=100, help="number of fine labels (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", default="fog+brightness", help="corruptions for the data dir ('none' = clean)")
    ap.add_argument("--init-weights", action="store_true",
                    help=f"also write {INIT_WEIGHTS_FILE}: a seeded RANDOM ConvMLP-M state_dict (not pre-trained)")
    a = ap.parse_args(argv)
    if bool(a.out_dir) == bool(a.file):
        ap.error("give exactly one of --out-dir or --file")
    try:
        if a.file:
            paths = {"file": str(make_tiny_fedcifar(a.file, a.train_clients, a.per_client, a.classes, a.seed))}
        else:
            noise = "" if a.noise.strip().lower() in ("", "none", "clean") else a.noise
            paths = make_tiny_cruda_dir(a.out_dir, a.train_clients, a.test_clients, a.per_client, a.classes, a.seed,
                                        noise, a.init_weights)
    except ValueError as e:
        print(f"make_tiny_fedcifar: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
