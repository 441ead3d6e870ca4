"""Non-IID partitions of a labelled data set across workers.

Robots see different things, so each worker's data covers only part of the label space.  Two ways
to say how, both giving every sample to exactly one worker:

* ``label_sorted``: the original artifact's split.  Classes are sorted and dealt out in contiguous
  blocks (CIFAR-100 on 4 workers: classes 0-24, 25-49, ...); a worker holds every sample of its
  classes and none of the others.
* ``dirichlet``: per class, worker shares drawn from Dirichlet(alpha); small alpha means few classes
  per worker, large alpha approaches IID (the flat form of Pachinko allocation, for data sets without
  a coarse label level).

``iid`` (a random equal cut) is there as the control.  ``labels`` (ScaDLES's label shards) gives
worker ``t`` exactly ``k`` labels, ``(t k + j) mod L`` for ``j < k``: contiguous blocks as in the
released code; a label two workers share is cut evenly between them, a label no worker holds is
left out (choose ``k N >= L`` to use every sample).

:func:`parse_partition` reads the ``--partition`` spec: ``iid``, ``labels:K``, ``dirichlet:ALPHA`` or
``label_sorted``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["label_sorted_split", "dirichlet_split", "iid_split", "labels_split", "partition", "parse_partition",
           "PartitionSpecError", "SPLITS"]

SPLITS = ("label_sorted", "dirichlet", "iid", "labels")


class PartitionSpecError(ValueError):
    """A ``--partition`` spec that cannot be read; the message says the accepted forms."""


def parse_partition(spec: str) -> tuple[str, dict]:
    """``"labels:2"`` -> ``("labels", {"k": 2})``, ``"dirichlet:0.5"`` -> ``("dirichlet", {"alpha": 0.5})``,
    ``"iid"`` / ``"label_sorted"`` -> ``(name, {})``."""
    forms = "iid, labels:K (K >= 1 labels per worker), dirichlet:ALPHA (ALPHA > 0) or label_sorted"
    name, _, arg = str(spec).strip().partition(":")
    if name in ("iid", "label_sorted") and not arg:
        return name, {}
    if name == "labels":
        try:
            k = int(arg)
        except ValueError:
            raise PartitionSpecError(f"{spec!r}: labels needs a whole number of labels per worker, e.g. labels:2") from None
        if k < 1:
            raise PartitionSpecError(f"{spec!r}: labels per worker must be >= 1, e.g. labels:2")
        return "labels", {"k": k}
    if name == "dirichlet":
        try:
            alpha = float(arg)
        except ValueError:
            raise PartitionSpecError(f"{spec!r}: dirichlet needs a concentration, e.g. dirichlet:0.5") from None
        if not (np.isfinite(alpha) and alpha > 0):
            raise PartitionSpecError(f"{spec!r}: the Dirichlet alpha must be > 0 (small = skewed, large = near IID), "
                                     "e.g. dirichlet:0.5")
        return "dirichlet", {"alpha": alpha}
    raise PartitionSpecError(f"{spec!r} is not a partition; use {forms}")


def _labels(labels) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array of class ids; got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integer class ids; got dtype {y.dtype}")
    return y


def _n_workers(n_workers, limit: int, what: str) -> int:
    if isinstance(n_workers, bool) or not isinstance(n_workers, (int, np.integer)) or n_workers < 1:
        raise ValueError(f"n_workers must be a positive integer; got {n_workers!r}")
    if n_workers > limit:
        raise ValueError(f"n_workers={n_workers} exceeds the number of {what} ({limit}); use fewer workers")
    return int(n_workers)


def label_sorted_split(labels, n_workers: int) -> list[np.ndarray]:
    """Sorted classes dealt in contiguous blocks (sizes differ by at most one class); each worker gets
    all samples of its block, as sorted sample indices."""
    y = _labels(labels)
    classes = np.unique(y)
    n = _n_workers(n_workers, classes.size, "classes (label_sorted gives each worker whole classes)")
    blocks = np.array_split(classes, n)
    return [np.flatnonzero(np.isin(y, block)) for block in blocks]


def dirichlet_split(labels, n_workers: int, alpha: float, seed: int = 0, min_size: int = 1,
                    max_tries: int = 100) -> list[np.ndarray]:
    """Per class, split its (shuffled) samples across workers in Dirichlet(alpha) proportions.

    Redraws (up to ``max_tries``) until every worker holds at least ``min_size`` samples.
    """
    y = _labels(labels)
    n = _n_workers(n_workers, y.size, "samples")
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a positive number (small = skewed, large = near IID); got {alpha!r}")
    if min_size * n > y.size:
        raise ValueError(f"min_size={min_size} x n_workers={n} exceeds the {y.size} samples; lower min_size")
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(n)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            share = rng.dirichlet(np.full(n, float(alpha)))
            cuts = np.round(np.cumsum(share)[:-1] * idx.size).astype(int)
            for w, piece in enumerate(np.split(idx, cuts)):
                parts[w].append(piece)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(o.size for o in out) >= min_size:
            return out
    raise ValueError(
        f"dirichlet_split: no draw in {max_tries} tries gave every worker >= {min_size} samples "
        f"(alpha={alpha}, n_workers={n}); raise alpha or lower min_size"
    )


def iid_split(labels, n_workers: int, seed: int = 0) -> list[np.ndarray]:
    """A random cut into near-equal parts (the IID control)."""
    y = _labels(labels)
    n = _n_workers(n_workers, y.size, "samples")
    perm = np.random.default_rng(seed).permutation(y.size)
    return [np.sort(p) for p in np.array_split(perm, n)]


def labels_split(labels, n_workers: int, k: int, seed: int = 0) -> list[np.ndarray]:
    """Worker ``t`` holds labels ``(t k + j) mod L``, ``j < k`` (``L`` classes in sorted order); a label held
    by ``m`` workers is cut into ``m`` near-equal shuffled parts."""
    y = _labels(labels)
    classes = np.unique(y)
    n = _n_workers(n_workers, y.size, "samples")
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= classes.size:
        raise ValueError(f"k must be a whole number of labels in [1, {classes.size}]; got {k!r}")
    held: dict[int, list[int]] = {}
    for t in range(n):
        for j in range(int(k)):
            held.setdefault((t * int(k) + j) % classes.size, []).append(t)
    rng = np.random.default_rng([int(seed), 0x1AB])
    parts: list[list[np.ndarray]] = [[] for _ in range(n)]
    for ci, owners in sorted(held.items()):
        idx = rng.permutation(np.flatnonzero(y == classes[ci]))
        for t, piece in zip(owners, np.array_split(idx, len(owners))):
            parts[t].append(piece)
    return [np.sort(np.concatenate(p)) for p in parts]


def partition(labels, n_workers: int, split: str = "label_sorted", alpha: float = 0.5,
              seed: int = 0) -> list[np.ndarray]:
    """Dispatch on ``split`` (one of :data:`SPLITS`, or a :func:`parse_partition` spec such as ``labels:2``
    or ``dirichlet:0.1``); returns one sorted index array per worker."""
    if ":" in str(split):
        split, args = parse_partition(split)
        if split == "labels":
            return labels_split(labels, n_workers, args["k"], seed=seed)
        alpha = args.get("alpha", alpha)
    if split == "labels":
        raise ValueError("split 'labels' needs a count: use 'labels:K'")
    if split == "label_sorted":
        return label_sorted_split(labels, n_workers)
    if split == "dirichlet":
        return dirichlet_split(labels, n_workers, alpha, seed=seed)
    if split == "iid":
        return iid_split(labels, n_workers, seed=seed)
    raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
