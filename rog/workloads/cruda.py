"""CRUDA, the paper's main workload: ConvMLP-M adapted online to noisy Fed-CIFAR100 across robots.

A team of robots shares an object-recognition model pre-trained on CIFAR-100 (ConvMLP-M, 89.13 %
clean); fog and lighting changes drop it to 52.88 % and the robots win it back by training together on
the noisy images they collect (Sec. VI; Table II: batch 24 per robot, 16 per laptop, learning rate
1e-6).  This module serves that workload with the same methods as :class:`rog.workloads.quick.QuickWorkload`
(``pretrained_state``, ``worker_batches``, ``test_set``, ``evaluate``, ``summary``), so the runtime
takes either.

Data: ``<data_dir>/mixed_fed_cifar100_{train,test}.h5`` (the artifact's noised files, from
``utils/download_data.sh``, or any Fed-CIFAR100-layout file, e.g. from ``data_gen``); read by
:mod:`rog.workloads.fedcifar`.  Non-IID split of the noisy training set across workers:

* ``label_sorted`` (default; what the artifact ran): classes sorted and dealt in blocks (4 workers x
  25 classes), a worker holds every sample of its classes.
* ``pachinko`` (what the paper describes): TFF made Fed-CIFAR100's 500 training clients by Pachinko
  allocation (coarse-label Dirichlet(0.1), coarse-to-fine Dirichlet(10)), and the paper divides those
  500 shards equally among the workers.  With client ids in the file, the clients are shuffled (from
  ``seed``) and dealt in equal counts.  A flat file has no client ids: then a per-class
  Dirichlet(``alpha``) split stands in as an approximation of Pachinko allocation (one level instead
  of two); ``split_method`` says which one ran.
* ``dirichlet`` and ``iid`` as in :mod:`rog.workloads.split`.

Inputs: uint8 32x32 images, bicubic-resized to ``image_size`` (224) per batch, scaled to [0, 1] and
normalised.  Default normalisation ``cifar100`` (mean 0.5071/0.4867/0.4408, std 0.2675/0.2565/0.2761)
is what the official ConvMLP CIFAR-100 fine-tuning config (``convmlp_m_cifar100.yml``: 224 px,
bicubic, crop_pct 1.0) and the artifact used with these weights; ``imagenet`` is available.  No
training augmentation (the artifact ran timm's RandAugment/mixup pipeline; here the noise is the only
perturbation, fixed per image as in CRUDA's pre-corrupted data set).  Test: the whole noisy test file
(``test_limit`` takes a seeded subset for slow CPUs; the artifact evaluated each worker on its own
label shard of the test set instead).

Weights: ``pretrained_path`` (default ``<data_dir>/convmlp_m_cifar100.pth``, the official SHI-Labs
CIFAR-100 release) holds a ``state_dict``; it is read with ``torch.load(weights_only=True)`` only and
loaded strictly.  ``random_init=True`` replaces it by a seeded random initialisation (every worker
gets the same one): NOT the paper's starting point, only for smoke runs without the download, and
``summary()["weights"]`` says so.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .fedcifar import FedCifarData, load_fedcifar
from .split import partition

__all__ = [
    "TRAIN_FILE",
    "TEST_FILE",
    "WEIGHTS_FILE",
    "LEARNING_RATE",
    "BATCH_SIZE",
    "NORMALIZATIONS",
    "CRUDA_SPLITS",
    "MAX_TEST_SET_BYTES",
    "load_state_dict_file",
    "pachinko_client_split",
    "CrudaWorkload",
]

TRAIN_FILE = "mixed_fed_cifar100_train.h5"
TEST_FILE = "mixed_fed_cifar100_test.h5"
WEIGHTS_FILE = "convmlp_m_cifar100.pth"
LEARNING_RATE = 1e-6  # Table II
BATCH_SIZE = {"robot": 24, "laptop": 16}  # Table II; the runtime takes the batch size from device profiles
NORMALIZATIONS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
CRUDA_SPLITS = ("label_sorted", "pachinko", "dirichlet", "iid")
CONVMLP_MODELS = ("convmlp_s", "convmlp_m", "convmlp_l")
MAX_TEST_SET_BYTES = 1 << 30  # test_set() refuses to materialise more than this; use test_batches()

_MISSING_WEIGHTS_HINT = (
    "run `bash utils/download_data.sh` to fetch the ConvMLP-M CIFAR-100 weights into the data dir, or pass "
    "pretrained_path=...; for a smoke run without a download, `python -m data_gen.make_tiny_fedcifar "
    "--out-dir DIR --init-weights` writes random (not pre-trained) weights"
)


def _is_tensor_dict(obj) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                      for k, v in obj.items())


def load_state_dict_file(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A ``state_dict`` from a .pth/.pt file, read with ``torch.load(weights_only=True)`` only.

    Accepts a plain ``{name: tensor}`` dict, or a checkpoint dict holding one under ``state_dict`` or
    ``model``; a ``module.`` prefix (DataParallel) is removed.  FileNotFoundError if missing, ValueError
    if the file is not a weights-only tensor dict.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"pretrained weights {p} not found: {_MISSING_WEIGHTS_HINT}")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as e:
        raise ValueError(f"{p}: not a weights-only state_dict file (torch.load(weights_only=True) refused it: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}); re-save it as a plain "
                         "{name: tensor} dict") from e
    if not _is_tensor_dict(obj) and isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if _is_tensor_dict(obj.get(key)):
                obj = obj[key]
                break
    if not _is_tensor_dict(obj):
        kind = f"dict with keys {sorted(map(str, obj))[:8]}" if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(f"{p}: expected a state_dict ({{name: tensor}}), or a checkpoint holding one under "
                         f"'state_dict' or 'model'; got a {kind}")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return obj


def pachinko_client_split(clients: np.ndarray, n_clients: int, n_workers: int, seed: int = 0) -> list[np.ndarray]:
    """Deal whole clients (TFF's Pachinko-allocated shards) to workers in equal counts (differing by at most
    one), after a seeded shuffle; returns each worker's sorted sample indices."""
    if isinstance(n_workers, bool) or not isinstance(n_workers, (int, np.integer)) or n_workers < 1:
        raise ValueError(f"n_workers must be a positive integer; got {n_workers!r}")
    if n_workers > n_clients:
        raise ValueError(f"n_workers={n_workers} exceeds the {n_clients} clients in the file (pachinko deals whole "
                         "clients); use fewer workers or split='dirichlet'")
    order = np.random.default_rng([int(seed), 0x9AC1]).permutation(n_clients)
    return [np.flatnonzero(np.isin(clients, part)) for part in np.array_split(order, n_workers)]


class CrudaWorkload:
    """CRUDA: noisy Fed-CIFAR100 split non-IID across ``n_workers``, ConvMLP with a 100-class head.

    ``split`` one of :data:`CRUDA_SPLITS` (``alpha`` for the Dirichlet forms); ``normalize`` a key of
    :data:`NORMALIZATIONS`; ``test_limit`` evaluates on a seeded subset of that many test images
    (None: the whole test set, as the paper).  Everything is a function of ``seed``.  The batch size
    comes from the caller (24 per robot, 16 per laptop: :data:`BATCH_SIZE`), the learning rate from the
    caller too (:data:`LEARNING_RATE` = 1e-6, Table II).
    """

    num_classes = 100

    def __init__(self, data_dir: str | os.PathLike = "data", n_workers: int = 4, split: str = "label_sorted",
                 image_size: int = 224, seed: int = 0, pretrained_path: str | os.PathLike | None = None,
                 normalize: str = "cifar100", alpha: float = 0.5, test_limit: int | None = None,
                 train_file: str | os.PathLike | None = None, test_file: str | os.PathLike | None = None,
                 random_init: bool = False):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
        if split not in CRUDA_SPLITS:
            raise ValueError(f"split must be one of {CRUDA_SPLITS}; got {split!r}")
        if isinstance(image_size, bool) or not isinstance(image_size, (int, np.integer)) or not 16 <= image_size <= 1024:
            raise ValueError(f"image_size must be an integer in [16, 1024] pixels (the paper: 224); got {image_size!r}")
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {sorted(NORMALIZATIONS)}; got {normalize!r}")
        if test_limit is not None and (isinstance(test_limit, bool) or not isinstance(test_limit, (int, np.integer))
                                       or test_limit < 1):
            raise ValueError(f"test_limit must be None (whole test set) or a positive integer; got {test_limit!r}")
        self.data_dir = Path(data_dir)
        self.seed = int(seed)
        self.split = split
        self.alpha = alpha
        self.image_size = int(image_size)
        self.normalize = normalize
        self.train_path = Path(train_file) if train_file is not None else self.data_dir / TRAIN_FILE
        self.test_path = Path(test_file) if test_file is not None else self.data_dir / TEST_FILE
        self.pretrained_path = Path(pretrained_path) if pretrained_path is not None else self.data_dir / WEIGHTS_FILE
        if random_init and pretrained_path is not None:
            raise ValueError("random_init=True and pretrained_path exclude each other: random_init ignores any weights file")
        self.random_init = bool(random_init)
        mean, std = NORMALIZATIONS[normalize]
        self._mean = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
        self._std = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)

        self.train: FedCifarData = load_fedcifar(self.train_path)
        self.test: FedCifarData = load_fedcifar(self.test_path)
        for name, d in (("train", self.train), ("test", self.test)):
            if d.labels.size == 0:
                raise ValueError(f"{d.path}: the {name} file holds no images")
            if d.labels.min() < 0 or d.labels.max() >= self.num_classes:
                raise ValueError(f"{d.path}: labels must lie in 0..{self.num_classes - 1} (CIFAR-100 fine labels); "
                                 f"got {d.labels.min()}..{d.labels.max()}")
        self.shards, self.split_method = self._split(n_workers)
        self.n_workers = len(self.shards)
        self._test_idx = np.arange(self.test.labels.size)
        if test_limit is not None and test_limit < self._test_idx.size:
            rng = np.random.default_rng([self.seed, 0x7E57])
            self._test_idx = np.sort(rng.choice(self._test_idx.size, size=int(test_limit), replace=False))

    def _split(self, n_workers: int) -> tuple[list[np.ndarray], str]:
        y = self.train.labels
        if self.split == "pachinko":
            if self.train.client_ids:
                n = len(self.train.client_ids)
                return (pachinko_client_split(self.train.clients, n, n_workers, self.seed),
                        f"pachinko: {n} Fed-CIFAR100 clients (TFF's Pachinko allocation) dealt equally to workers")
            return (partition(y, n_workers, "dirichlet", alpha=self.alpha, seed=self.seed),
                    f"pachinko approximated by dirichlet(alpha={self.alpha}) over labels: {self.train.path} has no client ids")
        method = {"label_sorted": "label_sorted: contiguous class blocks", "iid": "iid",
                  "dirichlet": f"dirichlet(alpha={self.alpha}) over labels"}[self.split]
        return partition(y, n_workers, self.split, alpha=self.alpha, seed=self.seed), method

    # ------------------------------------------------------------------ model and weights
    @property
    def input_shape(self) -> tuple[int, int, int]:
        """Model input shape ``(3, image_size, image_size)``."""
        return (3, self.image_size, self.image_size)

    def make_model(self, model_name: str = "convmlp_m") -> nn.Module:
        """A freshly initialised ConvMLP (``convmlp_m`` for CRUDA) with a 100-class head."""
        if model_name not in CONVMLP_MODELS:
            raise ValueError(f"model_name must be one of {CONVMLP_MODELS} for CRUDA; got {model_name!r}")
        from ..models import make_model

        return make_model(model_name, self.num_classes)

    def pretrained_state(self, model_name: str = "convmlp_m") -> dict[str, torch.Tensor]:
        """The pre-trained ``state_dict`` from ``pretrained_path`` after a strict load into ``model_name``.

        FileNotFoundError (saying to run ``utils/download_data.sh``) if the file is missing; ValueError if it
        is not a weights-only state_dict or does not match the model exactly.  With ``random_init`` the
        seeded random initialisation instead (same ``seed``, same weights; global RNG untouched).
        """
        if self.random_init:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                model = self.make_model(model_name)
            return {k: v.detach().clone() for k, v in model.state_dict().items()}
        state = load_state_dict_file(self.pretrained_path)
        with torch.random.fork_rng(devices=[]):
            model = self.make_model(model_name)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as e:
            expected = model.state_dict()
            missing = sorted(set(expected) - set(state))
            unexpected = sorted(set(state) - set(expected))
            shapes = [f"{k}: file {tuple(state[k].shape)} vs model {tuple(v.shape)}" for k, v in expected.items()
                      if k in state and tuple(state[k].shape) != tuple(v.shape)]
            raise ValueError(
                f"{self.pretrained_path}: does not match {model_name} with a {self.num_classes}-class head "
                f"(missing {len(missing)}: {missing[:3]}; unexpected {len(unexpected)}: {unexpected[:3]}; "
                f"shape mismatches {len(shapes)}: {shapes[:3]}); use the CIFAR-100 ConvMLP-M release"
            ) from e
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    def pretrained_model(self, model_name: str = "convmlp_m") -> nn.Module:
        """A model with the pre-trained weights loaded (in train mode)."""
        with torch.random.fork_rng(devices=[]):
            model = self.make_model(model_name)
        model.load_state_dict(self.pretrained_state(model_name))
        return model

    # ------------------------------------------------------------------ inputs
    def preprocess(self, images: np.ndarray) -> torch.Tensor:
        """uint8 NHWC images -> float32 NCHW model input: [0, 1], bicubic resize to ``image_size``
        (clamped to [0, 1]), normalised per channel."""
        a = np.asarray(images)
        if a.dtype != np.uint8 or a.ndim != 4 or a.shape[-1] != 3:
            raise ValueError(f"images must be uint8 of shape (N, H, W, 3); got {a.dtype} {a.shape}")
        x = torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2).to(torch.float32).div_(255.0)
        if x.shape[-2:] != (self.image_size, self.image_size):
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bicubic", align_corners=False)
            x = x.clamp_(0.0, 1.0)
        return ((x - self._mean) / self._std).contiguous()

    def worker_batches(self, worker: int, batch_size: int, seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Endless ``(x, y)`` batches from ``worker``'s noisy training shard.

        The shard is reshuffled each epoch (from ``seed`` and ``worker``); batches are always full and may
        straddle an epoch boundary, so every sample is seen once per epoch.
        """
        if isinstance(worker, bool) or not isinstance(worker, (int, np.integer)) or not 0 <= worker < len(self.shards):
            raise ValueError(f"worker must be an integer in [0, {len(self.shards)}); got {worker!r}")
        _check_batch_size(batch_size)
        return self._batches(self.shards[worker], int(batch_size), np.random.default_rng([int(seed), int(worker)]))

    def union_batches(self, batch_size: int, seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Endless batches from the whole noisy training set (the single-process baseline)."""
        _check_batch_size(batch_size)
        return self._batches(np.arange(self.train.labels.size), int(batch_size),
                             np.random.default_rng([int(seed), 0xA11]))

    def _batches(self, shard: np.ndarray, batch_size: int, rng: np.random.Generator):
        queue = np.empty(0, dtype=np.int64)
        while True:
            while queue.size < batch_size:
                queue = np.concatenate([queue, rng.permutation(shard)])
            b, queue = queue[:batch_size], queue[batch_size:]
            yield self.preprocess(self.train.images[b]), torch.from_numpy(self.train.labels[b])

    # ------------------------------------------------------------------ evaluation
    def test_batches(self, batch_size: int = 64) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The noisy test set (or its ``test_limit`` subset) as model-ready batches, in file order."""
        _check_batch_size(batch_size)
        for i in range(0, self._test_idx.size, int(batch_size)):
            idx = self._test_idx[i : i + int(batch_size)]
            yield self.preprocess(self.test.images[idx]), torch.from_numpy(self.test.labels[idx])

    def test_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole (limited) noisy test set ``(x, y)`` as tensors, if it fits :data:`MAX_TEST_SET_BYTES`.

        At 224 px the full 10,000-image test set is 6 GB of float32: use :meth:`evaluate` or
        :meth:`test_batches` there (a ValueError says so).
        """
        n = int(self._test_idx.size)
        nbytes = n * 3 * self.image_size**2 * 4
        if nbytes > MAX_TEST_SET_BYTES:
            raise ValueError(
                f"test_set: {n} images at {self.image_size} px need {nbytes / 2**30:.1f} GiB (limit "
                f"{MAX_TEST_SET_BYTES / 2**30:.1f} GiB); use evaluate(model) or test_batches(), or set test_limit"
            )
        xs, ys = zip(*self.test_batches(256))
        return torch.cat(xs), torch.cat(ys)

    def test_metrics(self, model: nn.Module, batch_size: int = 64) -> dict:
        """``{"accuracy": [0, 1], "loss": mean cross-entropy, "n": images}`` on the noisy test set, in eval
        mode on the model's device (training flag restored)."""
        was_training = model.training
        device = next(model.parameters()).device
        model.eval()
        correct, loss_sum, n = 0, 0.0, 0
        try:
            with torch.no_grad():
                for x, y in self.test_batches(batch_size):
                    x, y = x.to(device), y.to(device)
                    logits = model(x)
                    loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
                    correct += int((logits.argmax(dim=1) == y).sum())
                    n += int(y.numel())
        finally:
            model.train(was_training)
        return dict(accuracy=correct / n, loss=loss_sum / n, n=n)

    def evaluate(self, model: nn.Module, batch_size: int = 64) -> float:
        """Top-1 accuracy in [0, 1] on the noisy test set (streamed in batches)."""
        return self.test_metrics(model, batch_size)["accuracy"]

    def sizes(self) -> dict[str, int]:
        """Sample counts of the training (adaptation) and evaluated test sets."""
        return dict(adaptation=int(self.train.labels.size), test=int(self._test_idx.size),
                    test_in_file=int(self.test.labels.size))

    def summary(self, model_name: str = "convmlp_m", evaluate: bool = False) -> dict:
        """Files, layouts, sizes, per-worker shard sizes and classes; with ``evaluate`` also the pre-trained
        model's noisy test accuracy (slow at 224 px on a CPU)."""
        out = dict(
            workload="cruda",
            data_dir=str(self.data_dir),
            train_file=str(self.train_path),
            test_file=str(self.test_path),
            layout=dict(train=self.train.layout, test=self.test.layout),
            clients=dict(train=len(self.train.client_ids), test=len(self.test.client_ids)),
            seed=self.seed,
            split=self.split,
            split_method=self.split_method,
            n_workers=self.n_workers,
            shard_sizes=[int(s.size) for s in self.shards],
            shard_classes=[int(np.unique(self.train.labels[s]).size) for s in self.shards],
            image_size=self.image_size,
            normalize=self.normalize,
            pretrained_path=str(self.pretrained_path),
            pretrained_present=self.pretrained_path.is_file(),
            weights=("random init (seed %d): NOT pre-trained" % self.seed) if self.random_init else str(self.pretrained_path),
            model=model_name,
            **self.sizes(),
        )
        if evaluate:
            out["noisy_accuracy"] = self.evaluate(self.pretrained_model(model_name))
        return out


def _check_batch_size(batch_size) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}")

