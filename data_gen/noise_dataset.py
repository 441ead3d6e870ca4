"""DeepTest-style noising of a Fed-CIFAR100 HDF5 file (CRUDA's "mixed" data sets).

The paper degrades Fed-CIFAR100 with DeepTest's fog and brightness changes, which drops ConvMLP-M from
89.13 % to 52.88 %; the artifact shipped the result as ``mixed_fed_cifar100_{train,test}.h5``.  This
script makes such a file from a clean one, with the corruptions of :mod:`rog.workloads.noise`:

* ``compose`` (default): every image gets every corruption in ``--noise`` (in that order), each with
  its own random strength;
* ``one_of``: every image gets exactly one of them, chosen at random (a mixture of noises).

Strengths are drawn per image from ``rog.workloads.noise.DEFAULT_RANGES`` unless ``--range`` says
otherwise.  Everything is a function of ``--seed`` and the client id, so one client's images do not
depend on which other clients the file holds.  The input may be in any layout
:func:`rog.workloads.fedcifar.load_fedcifar` reads; the output is always the TFF layout
(``examples/<client_id>/{image,label[,coarse_label]}``; a flat input becomes the single client ``"0"``).

    python -m data_gen.noise_dataset fed_cifar100_train.h5 data/mixed_fed_cifar100_train.h5 --seed 1
    python -m data_gen.noise_dataset fed_cifar100_test.h5 data/mixed_fed_cifar100_test.h5 --seed 2 \\
        --noise fog+brightness --range fog=0.3,0.6
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Mapping

import numpy as np

from rog.workloads.fedcifar import load_fedcifar, write_tff
from rog.workloads.noise import DEFAULT_RANGES, apply_noise, parse_noise

__all__ = ["DEFAULT_NOISE", "MODES", "client_seed", "noise_images", "noise_file", "main"]

DEFAULT_NOISE = "fog+brightness"  # the paper's two corruptions (Sec. VI, Datasets)
MODES = ("compose", "one_of")


def client_seed(seed: int, client_id: str) -> int:
    """A 63-bit seed for one client, from the file seed and the client id (independent of other clients)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    return int(np.random.default_rng([int(seed), zlib.crc32(str(client_id).encode())]).integers(0, 2**63 - 1))


def noise_images(images: np.ndarray, noise: str = DEFAULT_NOISE, seed: int = 0,
                 ranges: Mapping[str, tuple[float, float]] | None = None, mode: str = "compose") -> np.ndarray:
    """Corrupt uint8 NHWC images; returns uint8 NHWC of the same shape (rounded, clipped to 0..255)."""
    x = np.asarray(images)
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"images must be uint8 of shape (N, H, W, 3); got {x.dtype} {x.shape}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    names = parse_noise(noise)
    if not names or x.shape[0] == 0:
        return x.copy()
    batch = x.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
    if mode == "compose":
        out = apply_noise(batch, "+".join(names), seed=seed, ranges=ranges)
    else:
        pick = np.random.default_rng([int(seed), 0x0BE0F]).integers(0, len(names), x.shape[0])
        out = batch.copy()
        for k, name in enumerate(names):
            sel = np.flatnonzero(pick == k)
            if sel.size:
                out[sel] = apply_noise(batch[sel], name, seed=seed + k + 1, ranges=ranges)
    u8 = np.clip(np.rint(out * np.float32(255.0)), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(u8.transpose(0, 2, 3, 1))


def noise_file(src: str | Path, dst: str | Path, noise: str = DEFAULT_NOISE, seed: int = 0,
               ranges: Mapping[str, tuple[float, float]] | None = None, mode: str = "compose") -> dict:
    """Write a noised copy of the Fed-CIFAR100 file ``src`` to ``dst`` (TFF layout); returns a summary dict."""
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise ValueError(f"dst must differ from src ({src}); the clean file is the input")
    parse_noise(noise)
    t0 = time.perf_counter()
    data = load_fedcifar(src)
    groups = data.client_indices() or [np.arange(len(data))]
    ids = data.client_ids or ("0",)
    clients = {}
    for cid, idx in zip(ids, groups):
        feats = {
            "image": noise_images(data.images[idx], noise, client_seed(seed, cid), ranges, mode),
            "label": data.labels[idx],
        }
        if data.coarse_labels is not None:
            feats["coarse_label"] = data.coarse_labels[idx]
        clients[cid] = feats
    write_tff(dst, clients)
    return dict(src=str(src), dst=str(dst), src_layout=data.layout, clients=len(clients), images=len(data),
                noise=noise, mode=mode, seed=int(seed), ranges={k: list(v) for k, v in (ranges or {}).items()},
                seconds=round(time.perf_counter() - t0, 3))


def _parse_range(text: str) -> tuple[str, tuple[float, float]]:
    try:
        name, lims = text.split("=", 1)
        lo, hi = (float(v) for v in lims.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--range must look like NAME=LOW,HIGH (e.g. fog=0.2,0.5); got {text!r}")
    name = name.strip().lower()
    if name not in DEFAULT_RANGES:
        raise argparse.ArgumentTypeError(f"--range: unknown corruption {name!r}; choose from {sorted(DEFAULT_RANGES)}")
    if not lo <= hi:
        raise argparse.ArgumentTypeError(f"--range {name}: LOW must be <= HIGH; got {lo},{hi}")
    return name, (lo, hi)


def main(argv: list[str] | None = None) -> int:
    """CLI: noise SRC into DST and print a JSON summary."""
    ap = argparse.ArgumentParser(prog="python -m data_gen.noise_dataset", description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="clean Fed-CIFAR100 .h5 file (TFF layout, or any layout the reader accepts)")
    ap.add_argument("dst", help="output .h5 file (TFF layout)")
    ap.add_argument("--noise", default=DEFAULT_NOISE, help=f"corruptions joined by '+' (default {DEFAULT_NOISE})")
    ap.add_argument("--mode", choices=MODES, default="compose", help="compose: all corruptions per image; "
                    "one_of: one random corruption per image")
    ap.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    ap.add_argument("--range", dest="ranges", action="append", type=_parse_range, default=[],
                    metavar="NAME=LOW,HIGH", help="per-image strength range of one corruption (repeatable)")
    a = ap.parse_args(argv)
    try:
        summary = noise_file(a.src, a.dst, a.noise, a.seed, dict(a.ranges), a.mode)
    except (ValueError, FileNotFoundError) as e:
        print(f"noise_dataset: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
