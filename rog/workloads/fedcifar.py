"""Fed-CIFAR100 reader and writer (HDF5): the TensorFlow Federated layout and the artifact's noised files.

CRUDA's data is Fed-CIFAR100 as TensorFlow Federated (TFF) publishes it (``fed_cifar100_train.h5``,
500 clients; ``fed_cifar100_test.h5``, 100 clients; partitioned by Pachinko allocation).  What this
module relies on about that layout, from TFF's ``tff.simulation.datasets.cifar100.load_data``
documentation and its ``HDF5ClientData`` reader, and the original artifact's ``adapt_noise.py`` /
``add_noise.ipynb`` (which read ``f['examples'][cid]['image']`` and ``['label']``):

* ``tff``: a group ``examples`` holding one group per client id (a string, ``"0"`` ... ``"499"``),
  each with datasets ``image`` (uint8, ``(N, 32, 32, 3)``), ``label`` (fine label 0-99, int64,
  ``(N,)``) and ``coarse_label`` (0-19).  The artifact's noise notebook copies ``examples`` and
  rewrites ``image`` in place, so its noised h5 files are expected in this layout too.

The exact inner layout of the artifact's ``datasets/mixed_fed_cifar100_{train,test}.h5`` is not
documented anywhere we could read, so the reader also accepts, and detects:

* ``keyed``: top-level groups ``images`` / ``labels`` (or ``image`` / ``label``) holding one dataset
  per client id (the shape of the artifact's ``.pkl`` dicts ``{'images': {cid: ...}, 'labels': ...}``);
* ``flat``: top-level datasets ``image`` / ``label`` (or ``images`` / ``labels``, or ``x`` / ``y``);
  no client ids.

Anything else raises a ``ValueError`` naming the file and the keys found.  Images may be NHWC or NCHW
(3 channels), uint8 or float (``[0, 1]`` or ``[0, 255]``); labels ``(N,)`` or ``(N, 1)`` integers.

The artifact's ``.pkl`` variants are NOT supported, on purpose: unpickling executes arbitrary code
from the file, so a data file could run commands on every robot that loads it.  Use the ``.h5`` files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

__all__ = ["LAYOUTS", "FedCifarData", "detect_layout", "load_fedcifar", "write_tff", "h5py_or_error"]

LAYOUTS = ("tff", "keyed", "flat")

_FLAT_PAIRS = (("image", "label"), ("images", "labels"), ("x", "y"))
_KEYED_PAIRS = (("images", "labels"), ("image", "label"))


def h5py_or_error():
    """The ``h5py`` module, or an ImportError that says how to install it."""
    try:
        import h5py
    except ImportError as e:  # pragma: no cover - exercised only without h5py
        raise ImportError("Fed-CIFAR100 files are HDF5: install h5py (pip install h5py)") from e
    return h5py


@dataclass(frozen=True)
class FedCifarData:
    """A Fed-CIFAR100 split in memory.

    ``images`` uint8 ``(N, 32, 32, 3)`` (NHWC), ``labels`` int64 ``(N,)``, ``clients`` int64 ``(N,)``
    indexing ``client_ids`` (all zeros and ``client_ids == ()`` for the flat layout),
    ``coarse_labels`` int64 ``(N,)`` or None, ``layout`` one of :data:`LAYOUTS`, ``path`` the file.
    Samples are in client order (numeric client ids in numeric order, then any others as strings).
    """

    images: np.ndarray
    labels: np.ndarray
    clients: np.ndarray
    client_ids: tuple[str, ...]
    coarse_labels: np.ndarray | None
    layout: str
    path: str

    def __len__(self) -> int:
        return int(self.labels.size)

    def client_indices(self) -> list[np.ndarray]:
        """Sample indices of each client, in ``client_ids`` order (empty list for the flat layout)."""
        if not self.client_ids:
            return []
        order = np.argsort(self.clients, kind="stable")
        cuts = np.searchsorted(self.clients[order], np.arange(1, len(self.client_ids)))
        return np.split(order, cuts)


def _keys(group) -> list[str]:
    return sorted(str(k) for k in group.keys())


def _is_dataset(obj) -> bool:
    return hasattr(obj, "shape") and hasattr(obj, "dtype")


def _describe(f) -> str:
    """Top-level keys, and for a group the first few of its keys, for error messages."""
    parts = []
    for k in _keys(f)[:20]:
        obj = f[k]
        if _is_dataset(obj):
            parts.append(f"{k} (dataset {tuple(obj.shape)} {obj.dtype})")
        else:
            sub = _keys(obj)
            more = f", ... {len(sub)} in all" if len(sub) > 5 else ""
            parts.append(f"{k}/ (group: {', '.join(sub[:5])}{more})")
    return "; ".join(parts) if parts else "(no keys: empty file)"


def _detect(f) -> tuple[str, str | None, str | None]:
    """``(layout, image_key, label_key)`` of an open ``h5py.File``; ValueError naming the keys otherwise."""
    keys = set(_keys(f))
    if "examples" in keys and not _is_dataset(f["examples"]):
        return "tff", None, None
    for ik, lk in _KEYED_PAIRS:
        if ik in keys and lk in keys and not _is_dataset(f[ik]) and not _is_dataset(f[lk]):
            return "keyed", ik, lk
    for ik, lk in _FLAT_PAIRS:
        if ik in keys and lk in keys and _is_dataset(f[ik]) and _is_dataset(f[lk]):
            return "flat", ik, lk
    name = getattr(f, "filename", "?")
    raise ValueError(
        f"{name}: not a Fed-CIFAR100 file this reader knows; found {_describe(f)}. Expected the TFF layout "
        "(examples/<client_id>/image and .../label), per-client groups images/<client_id> and labels/<client_id>, "
        "or top-level datasets image/label (or x/y)"
    )


def detect_layout(f) -> str:
    """Which of :data:`LAYOUTS` an open ``h5py.File`` holds; ValueError naming the file and keys otherwise."""
    return _detect(f)[0]


def _images_u8(arr: np.ndarray, where: str) -> np.ndarray:
    """Images as uint8 NHWC with 3 channels."""
    a = np.asarray(arr)
    if a.ndim != 4:
        raise ValueError(f"{where}: images must be 4-D (N, H, W, 3) or (N, 3, H, W); got shape {a.shape}")
    if a.shape[-1] != 3 and a.shape[1] == 3:
        a = a.transpose(0, 2, 3, 1)
    if a.shape[-1] != 3:
        raise ValueError(f"{where}: images must have 3 colour channels; got shape {a.shape}")
    if a.dtype == np.uint8:
        return np.ascontiguousarray(a)
    if np.issubdtype(a.dtype, np.floating):
        if a.size and not np.all(np.isfinite(a)):
            raise ValueError(f"{where}: images hold NaN or infinite values")
        scale = 255.0 if a.size == 0 or float(a.max()) <= 1.0 else 1.0
        return np.ascontiguousarray(np.clip(np.rint(a * scale), 0, 255).astype(np.uint8))
    if np.issubdtype(a.dtype, np.integer):
        if a.size and (a.min() < 0 or a.max() > 255):
            raise ValueError(f"{where}: integer images must lie in 0..255; got {a.min()}..{a.max()}")
        return np.ascontiguousarray(a.astype(np.uint8))
    raise ValueError(f"{where}: images must be uint8 or float; got dtype {a.dtype}")


def _labels(arr, n: int, where: str) -> np.ndarray:
    y = np.asarray(arr)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{where}: labels must have shape (N,) or (N, 1); got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{where}: labels must be integers; got dtype {y.dtype}")
    if y.size != n:
        raise ValueError(f"{where}: {y.size} labels for {n} images; the counts must match")
    return y.astype(np.int64)


def _client_order(ids: Sequence[str]) -> list[str]:
    """Client ids sorted as TFF lists them (strings), numeric ids in numeric order."""
    return sorted(ids, key=lambda s: (0, int(s), s) if s.isdigit() else (1, 0, s))


def load_fedcifar(path: str | os.PathLike) -> FedCifarData:
    """Read a Fed-CIFAR100 HDF5 file in any of :data:`LAYOUTS` into memory (:class:`FedCifarData`).

    Raises FileNotFoundError for a missing file and ValueError (naming the file) for a ``.pkl``
    file, an unknown layout or inconsistent contents.
    """
    p = Path(path)
    if p.suffix.lower() in (".pkl", ".pickle"):
        raise ValueError(
            f"{p}: pickle files are not supported (unpickling runs code from the file); use the .h5 variant, "
            "e.g. mixed_fed_cifar100_train.h5 from utils/download_data.sh"
        )
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file (run bash utils/download_data.sh, or generate a tiny one "
                                "with python -m data_gen.make_tiny_fedcifar)")
    h5py = h5py_or_error()
    try:
        f = h5py.File(p, "r")
    except OSError as e:
        raise ValueError(f"{p}: not a readable HDF5 file ({e})") from e
    with f:
        layout, ik, lk = _detect(f)
        images, labels, clients, coarse = [], [], [], []
        if layout == "flat":
            x = _images_u8(f[ik][()], f"{p}:/{ik}")
            y = _labels(f[lk][()], x.shape[0], f"{p}:/{lk}")
            c = None
            if "coarse_label" in f and _is_dataset(f["coarse_label"]):
                c = _labels(f["coarse_label"][()], x.shape[0], f"{p}:/coarse_label")
            return FedCifarData(x, y, np.zeros(y.size, dtype=np.int64), (), c, layout, str(p))
        # one (image dataset path, label dataset path, coarse-label path or None) per client
        if layout == "tff":
            ids = _client_order(_keys(f["examples"]))
            entries = []
            for cid in ids:
                grp = f["examples"][cid]
                if _is_dataset(grp) or "image" not in grp or "label" not in grp:
                    found = "a dataset" if _is_dataset(grp) else _keys(grp)
                    raise ValueError(f"{p}:/examples/{cid} must be a group with datasets 'image' and 'label'; found {found}")
                coarse_path = f"examples/{cid}/coarse_label" if "coarse_label" in grp else None
                entries.append((f"examples/{cid}/image", f"examples/{cid}/label", coarse_path))
        else:
            img_ids, lab_ids = set(_keys(f[ik])), set(_keys(f[lk]))
            if img_ids != lab_ids:
                odd = sorted(img_ids ^ lab_ids)[:5]
                raise ValueError(f"{p}: {ik}/ and {lk}/ hold different client ids (e.g. {odd}); they must match")
            ids = _client_order(list(img_ids))
            entries = [(f"{ik}/{cid}", f"{lk}/{cid}", None) for cid in ids]
        if not ids:
            raise ValueError(f"{p}: the {layout} layout holds no clients")
        for k, (img_path, lab_path, coarse_path) in enumerate(entries):
            x = _images_u8(f[img_path][()], f"{p}:/{img_path}")
            images.append(x)
            labels.append(_labels(f[lab_path][()], x.shape[0], f"{p}:/{lab_path}"))
            clients.append(np.full(x.shape[0], k, dtype=np.int64))
            if coarse_path is not None:
                coarse.append(_labels(f[coarse_path][()], x.shape[0], f"{p}:/{coarse_path}"))
        have_coarse = len(coarse) == len(entries)
        shapes = {im.shape[1:] for im in images}
        if len(shapes) != 1:
            raise ValueError(f"{p}: clients hold images of different sizes {sorted(shapes)}; all must match")
        return FedCifarData(
            images=np.concatenate(images),
            labels=np.concatenate(labels),
            clients=np.concatenate(clients),
            client_ids=tuple(ids),
            coarse_labels=np.concatenate(coarse) if have_coarse else None,
            layout=layout,
            path=str(p),
        )


def write_tff(path: str | os.PathLike, clients: Mapping[str, Mapping[str, np.ndarray]]) -> Path:
    """Write ``{client_id: {"image": uint8 (N,32,32,3), "label": (N,), ["coarse_label": (N,)]}}`` in the
    TFF layout (``examples/<client_id>/...``, labels int64), atomically (temp file + rename)."""
    h5py = h5py_or_error()
    p = Path(path)
    if not clients:
        raise ValueError("clients must hold at least one client")
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            root = f.create_group("examples")
            for cid, feats in clients.items():
                if not isinstance(cid, str) or not cid or "/" in cid:
                    raise ValueError(f"client id must be a non-empty string without '/'; got {cid!r}")
                x = _images_u8(feats["image"], f"client {cid}: image")
                g = root.create_group(cid)
                g.create_dataset("image", data=x, compression="gzip", compression_opts=4)
                g.create_dataset("label", data=_labels(feats["label"], x.shape[0], f"client {cid}: label"))
                if feats.get("coarse_label") is not None:
                    g.create_dataset("coarse_label",
                                     data=_labels(feats["coarse_label"], x.shape[0], f"client {cid}: coarse_label"))
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()
    return p
