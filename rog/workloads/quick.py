"""The quick workload: CRUDA's pipeline shape on a laptop CPU, with no download.

CRUDA pre-trains a classifier on clean images, then adapts it online, on workers holding non-IID
shards, to images corrupted DeepTest-style (accuracy falls from 89 % clean to 53 % noisy and
training wins it back).  Here the images are scikit-learn's bundled handwritten digits (1,797 8x8
images, 10 classes, shipped inside the package), made 16x16x3 by bilinear upsampling and a random
foreground/background colour per image.  A stratified, seeded split gives disjoint parts:

* pre-training (clean, 35 %): trains the quick model once; the weights are cached on disk;
* adaptation (noisy, 45 %): partitioned across workers (:mod:`rog.workloads.split`);
* test (20 %): held out, evaluated noisy (and clean, to show the gap).

Noise is fixed per image (drawn once from the seed), as in CRUDA's pre-corrupted data set.  The
noisy test set holds every test image under :data:`TEST_NOISE_DRAWS` independent noise draws
(359 images x 4 = 1,436): one draw leaves a binomial standard error of about 2.4 accuracy
points, which is as large as the gaps between the systems; four draws halve it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from .noise import apply_noise, parse_noise
from .split import SPLITS, partition

__all__ = ["DATA_VERSION", "PRETRAIN", "digits_arrays", "load_digit_images", "stratified_parts", "QuickWorkload"]

# Bump when the image generation, the split or the pre-training recipe changes (invalidates caches).
DATA_VERSION = "quick-digits-v1"
IMAGE_SIZE = 16
FRACTIONS = (0.35, 0.45, 0.20)  # pre-training (clean), adaptation (noisy), test (noisy)
TEST_NOISE_DRAWS = 4  # noisy copies of each test image (independent draws; the first is the original one)

# Pre-training recipe for the quick model on the clean part (part of the cache key).
# Models that start from a seeded random initialisation instead of the pre-trained weights
# (ScaDLES trains from scratch): :meth:`QuickWorkload.pretrained_state` returns that start.
SCRATCH_MODELS = frozenset({"cnn_bn_quick", "cnn_gn_quick", "vgg_bn_quick", "cnn_bn_wide_quick"})
PRETRAIN: dict = dict(epochs=20, batch_size=64, lr=1e-3, weight_decay=1e-4, optimizer="adam")


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits as ``(images, target)``: ``images`` float64 ``(1797, 8, 8)`` in 0..16,
    ``target`` int ``(1797,)``, the same arrays as ``sklearn.datasets.load_digits()``.

    Read straight from the package's ``datasets/data/digits.csv.gz`` (64 pixel columns and the label),
    located without importing scikit-learn: its import costs about 2 s of CPU on a small machine, paid
    by every worker process at every run's start.  Falls back to ``load_digits`` if the file moved.
    """
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None:  # pragma: no cover
        raise ImportError("the quick workload needs scikit-learn, which ships the digits (pip install scikit-learn)")
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            table = np.loadtxt(path, delimiter=",", dtype=np.float64)
            if table.ndim != 2 or table.shape[1] != 65:
                raise ValueError(f"{path}: expected 65 columns (8x8 pixels and the label), got shape {table.shape}")
            return table[:, :64].reshape(-1, 8, 8), table[:, 64].astype(int)
    from sklearn.datasets import load_digits  # pragma: no cover - a scikit-learn that moved its data file

    digits = load_digits()  # pragma: no cover
    return digits.images, digits.target  # pragma: no cover


def load_digit_images(seed: int = 0, size: int = IMAGE_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``(x, y)``: ``x`` float32 ``(1797, 3, size, size)`` in [0, 1], ``y`` int64.

    Each 8x8 image (values 0..16) is scaled to [0, 1], upsampled bilinearly, and coloured: pixel =
    background + ink * (foreground - background), with a random light foreground and dark background
    colour per image (from ``seed``), so the three channels differ and colour carries no label.
    """
    images, target = digits_arrays()
    ink = torch.from_numpy(images.astype(np.float32) / 16.0)[:, None]
    ink = torch.nn.functional.interpolate(ink, size=(size, size), mode="bilinear", align_corners=False)
    ink = ink.clamp_(0.0, 1.0).numpy()
    rng = np.random.default_rng([int(seed), 0xC0107])
    n = ink.shape[0]
    fg = rng.uniform(0.6, 1.0, (n, 3, 1, 1)).astype(np.float32)
    bg = rng.uniform(0.0, 0.3, (n, 3, 1, 1)).astype(np.float32)
    x = bg + ink * (fg - bg)
    return np.ascontiguousarray(x, dtype=np.float32), target.astype(np.int64)


def stratified_parts(labels: np.ndarray, fractions=FRACTIONS, seed: int = 0) -> list[np.ndarray]:
    """Disjoint sorted index arrays, one per fraction, each holding about that share of every class."""
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.ndim != 1 or fr.size < 1 or np.any(fr <= 0) or not np.isclose(fr.sum(), 1.0):
        raise ValueError(f"fractions must be positive and sum to 1; got {list(fractions)}")
    rng = np.random.default_rng([int(seed), 0x5917])
    parts: list[list[np.ndarray]] = [[] for _ in fr]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.round(np.cumsum(fr)[:-1] * idx.size).astype(int)
        for p, piece in enumerate(np.split(idx, cuts)):
            parts[p].append(piece)
    return [np.sort(np.concatenate(p)) for p in parts]


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> float:
    """Top-1 accuracy of ``model`` in eval mode; restores the model's training flag."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    was_training = model.training
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch_size):
            correct += int((model(x[i : i + batch_size]).argmax(dim=1) == y[i : i + batch_size]).sum())
    model.train(was_training)
    return correct / x.shape[0]


class QuickWorkload:
    """The quick CRUDA-shaped workload: clean pre-training, noisy non-IID adaptation shards, noisy test.

    ``noise`` is a :func:`rog.workloads.noise.parse_noise` spec; ``split`` one of
    :data:`rog.workloads.split.SPLITS` (``alpha`` for ``dirichlet``).  Everything is a function of
    ``seed``.  Pre-trained weights are cached under ``cache_dir`` (default ``result/.cache``, relative
    to the working directory).  Torch's thread count is the caller's: on a shared 2-core machine one
    thread pre-trains in about 8 s, two threads can take several times longer.

    Adaptation that works from the pre-trained weights: SGD, lr 1e-3, momentum 0.9, batch 16 (lr 3e-4
    to 3e-3 recover too; 5e-3 and above with momentum 0.9 wreck the model).
    """

    num_classes = 10
    input_shape = (3, IMAGE_SIZE, IMAGE_SIZE)

    def __init__(self, seed: int = 0, n_workers: int = 4, noise: str = "fog+brightness+contrast+blur",
                 split: str = "label_sorted", cache_dir: str | os.PathLike | None = None, alpha: float = 0.5):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
        if split not in SPLITS and ":" not in str(split):
            raise ValueError(f"split must be one of {SPLITS} or a spec such as labels:2; got {split!r}")
        parse_noise(noise)  # validates
        self.seed = int(seed)
        self.n_workers = n_workers
        self.noise = noise
        self.split = split
        self.alpha = alpha
        self.cache_dir = Path(cache_dir) if cache_dir is not None else Path("result") / ".cache"

        x, y = load_digit_images(self.seed)
        pre, ada, test = stratified_parts(y, FRACTIONS, self.seed)
        self._x_pre, self._y_pre = x[pre], y[pre]
        self._x_ada = apply_noise(x[ada], noise, seed=self.seed * 2 + 1)
        self._y_ada = y[ada]
        self._x_test_clean, self._y_test_clean = x[test], y[test]
        self.test_noise_draws = TEST_NOISE_DRAWS
        self._x_test = np.concatenate([apply_noise(x[test], noise, seed=self.seed * 2 + 2 + 1_000_003 * k)
                                       for k in range(TEST_NOISE_DRAWS)])
        self._y_test = np.tile(y[test], TEST_NOISE_DRAWS)
        self.shards = partition(self._y_ada, n_workers, split, alpha=alpha, seed=self.seed)
        self._t_test = (torch.from_numpy(self._x_test), torch.from_numpy(self._y_test))
        self._t_test_clean = torch.from_numpy(self._x_test_clean)
        self.pretrain_time_s: float | None = None  # set when pretrained_state actually trains

    # ------------------------------------------------------------------ pre-training
    def cache_key(self, model_name: str = "convmlp_quick") -> str:
        """Hash of everything pre-training depends on (data version, seed, model, recipe)."""
        cfg = dict(data=DATA_VERSION, seed=self.seed, model=model_name, fractions=FRACTIONS, pretrain=PRETRAIN)
        return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]

    def cache_path(self, model_name: str = "convmlp_quick") -> Path:
        """Where :meth:`pretrained_state` keeps the weights for ``model_name``."""
        return self.cache_dir / f"pretrained-{model_name}-{self.cache_key(model_name)}.pt"

    def make_model(self, model_name: str = "convmlp_quick") -> nn.Module:
        """A freshly initialised ``model_name`` with a 10-class head (init from the global torch RNG)."""
        from ..models import make_model

        return make_model(model_name, self.num_classes)

    def pretrained_state(self, model_name: str = "convmlp_quick") -> dict[str, torch.Tensor]:
        """The model's ``state_dict`` after pre-training on the clean part (a model in
        :data:`SCRATCH_MODELS`: its seeded random start, not trained); loaded from the cache when
        present, else trained (deterministically from the seed, global RNG state left untouched)
        and written to the cache atomically."""
        if model_name in SCRATCH_MODELS:  # no pre-training: the seeded random start every process rebuilds
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                return {k: v.detach().clone() for k, v in self.make_model(model_name).state_dict().items()}
        path = self.cache_path(model_name)
        if path.exists():
            return torch.load(path, map_location="cpu", weights_only=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "a") as lock:  # processes started at once pre-train once, not each
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():  # another process wrote it while this one waited
                return torch.load(path, map_location="cpu", weights_only=True)
            return self._pretrain_into(model_name, path)

    def _pretrain_into(self, model_name: str, path: Path) -> dict[str, torch.Tensor]:
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = self.make_model(model_name)
            self._pretrain(model)
        self.pretrain_time_s = time.perf_counter() - t0
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(state, tmp)
        os.replace(tmp, path)
        meta = dict(model=model_name, seed=self.seed, data=DATA_VERSION, pretrain=PRETRAIN,
                    pretrain_time_s=self.pretrain_time_s, torch_threads=torch.get_num_threads())
        path.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
        return state

    def pretrain_info(self, model_name: str = "convmlp_quick") -> dict | None:
        """What the cache recorded when ``model_name`` was pre-trained (time taken, recipe), if cached."""
        meta = self.cache_path(model_name).with_suffix(".json")
        return json.loads(meta.read_text()) if meta.exists() else None

    def pretrained_model(self, model_name: str = "convmlp_quick") -> nn.Module:
        """A model with the pre-trained weights loaded (in train mode)."""
        with torch.random.fork_rng(devices=[]):
            model = self.make_model(model_name)
        model.load_state_dict(self.pretrained_state(model_name))
        return model

    def _pretrain(self, model: nn.Module) -> None:
        """Adam on the clean part, reshuffled per epoch (recipe: :data:`PRETRAIN`)."""
        x = torch.from_numpy(self._x_pre)
        y = torch.from_numpy(self._y_pre)
        if PRETRAIN["optimizer"] == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=PRETRAIN["lr"], momentum=PRETRAIN["momentum"],
                                  weight_decay=PRETRAIN["weight_decay"])
        else:
            opt = torch.optim.Adam(model.parameters(), lr=PRETRAIN["lr"], weight_decay=PRETRAIN["weight_decay"])
        loss_fn = nn.CrossEntropyLoss()
        rng = np.random.default_rng([self.seed, 0x9E7])
        bs = PRETRAIN["batch_size"]
        model.train()
        for _ in range(PRETRAIN["epochs"]):
            perm = torch.from_numpy(rng.permutation(x.shape[0]))
            for i in range(0, x.shape[0], bs):
                b = perm[i : i + bs]
                opt.zero_grad(set_to_none=True)
                loss_fn(model(x[b]), y[b]).backward()
                opt.step()

    # ------------------------------------------------------------------ adaptation data
    def worker_batches(self, worker: int, batch_size: int, seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Endless ``(x, y)`` batches from ``worker``'s noisy adaptation shard.

        The shard is reshuffled each epoch (from ``seed`` and ``worker``); batches are always full and
        may straddle an epoch boundary, so every sample is seen once per epoch.
        """
        if isinstance(worker, bool) or not isinstance(worker, (int, np.integer)) or not 0 <= worker < len(self.shards):
            raise ValueError(f"worker must be an integer in [0, {len(self.shards)}); got {worker!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}")
        return self._batches(self.shards[worker], int(batch_size), np.random.default_rng([int(seed), int(worker)]))

    def union_batches(self, batch_size: int, seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Endless batches from the union of all adaptation shards (the single-process baseline)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}")
        return self._batches(np.arange(self._y_ada.size), int(batch_size), np.random.default_rng([int(seed), 0xA11]))

    def _batches(self, shard: np.ndarray, batch_size: int, rng: np.random.Generator):
        x = torch.from_numpy(self._x_ada)
        y = torch.from_numpy(self._y_ada)
        queue = np.empty(0, dtype=np.int64)
        while True:
            while queue.size < batch_size:
                queue = np.concatenate([queue, rng.permutation(shard)])
            b = torch.from_numpy(queue[:batch_size])
            queue = queue[batch_size:]
            yield x[b], y[b]

    def adaptation_images(self) -> np.ndarray:
        """Every worker's (noisy) adaptation images together, float32 NCHW (the union of the shards' data)."""
        return self._x_ada

    # ------------------------------------------------------------------ evaluation
    def test_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The noisy held-out test set ``(x, y)`` as tensors (float32 NCHW in [0, 1], int64): every
        held-out image under :data:`TEST_NOISE_DRAWS` noise draws."""
        return self._t_test

    def clean_test_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The held-out images without noise (each once)."""
        return self._t_test_clean, torch.from_numpy(self._y_test_clean)

    def evaluate(self, model: nn.Module, batch_size: int = 256) -> float:
        """Top-1 accuracy in [0, 1] on the noisy test set (eval mode; training flag restored)."""
        return _accuracy(model, *self._t_test, batch_size)

    def test_metrics(self, model: nn.Module, batch_size: int = 256) -> dict:
        """``{"accuracy": [0, 1], "loss": mean cross-entropy, "n": images}`` on the noisy test set, in eval
        mode (training flag restored); the same interface as :meth:`CrudaWorkload.test_metrics`."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        x, y = self._t_test
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        correct, loss_sum = 0, 0.0
        try:
            with torch.no_grad():
                for i in range(0, x.shape[0], batch_size):
                    xb, yb = x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)
                    logits = model(xb)
                    loss_sum += float(nn.functional.cross_entropy(logits, yb, reduction="sum"))
                    correct += int((logits.argmax(dim=1) == yb).sum())
        finally:
            model.train(was_training)
        return dict(accuracy=correct / x.shape[0], loss=loss_sum / x.shape[0], n=int(x.shape[0]))

    def clean_test_accuracy(self, model: nn.Module, batch_size: int = 256) -> float:
        """Top-1 accuracy in [0, 1] on the clean version of the test images."""
        return _accuracy(model, *self.clean_test_set(), batch_size)

    def sizes(self) -> dict[str, int]:
        """Sample counts of the pre-training, adaptation and test parts (distinct images; the noisy
        test set holds each test image ``test_noise_draws`` times)."""
        return dict(pretrain=int(self._y_pre.size), adaptation=int(self._y_ada.size), test=int(self._y_test_clean.size))

    def summary(self, model_name: str = "convmlp_quick") -> dict:
        """Sizes, per-worker shard sizes and classes, and the pre-trained model's clean vs noisy accuracy."""
        model = self.pretrained_model(model_name)
        return dict(
            data=DATA_VERSION,
            seed=self.seed,
            noise=self.noise,
            split=self.split,
            n_workers=len(self.shards),
            sizes=self.sizes(),
            worker_sizes=[int(s.size) for s in self.shards],
            worker_classes=[sorted(int(c) for c in np.unique(self._y_ada[s])) for s in self.shards],
            clean_accuracy=self.clean_test_accuracy(model),
            noisy_accuracy=self.evaluate(model),
            pretrain_time_s=(self.pretrain_info(model_name) or {}).get("pretrain_time_s"),
        )
