"""Row importance and send order (the paper's Algorithm 3, as the original artifact resolved it).

Worker side (push): ``importance_i = (max(row_push_iter) - row_push_iter_i) * 1
+ tensor_scale[t(i)] / (max(tensor_scale) + 0.1)``.  Staleness counts in whole iterations and
dominates; the magnitude term is below 1 and only breaks ties among rows equally stale.

Server side (pull to worker ``r``): ``importance_i = updates_since_pull[r, i]
+ tensor_scale[t(i)] / (max(tensor_scale) + 1)``: rows that received more updates since ``r``
last pulled them go first.

All functions are vectorised over rows (no per-row Python loops).
"""

from __future__ import annotations

import numpy as np

from ..rows import RowPartition

WORKER_SCALE_OFFSET = 0.1  # denominator offset of the worker-side magnitude term (keeps it < 1)
SERVER_SCALE_OFFSET = 1.0  # denominator offset of the server-side magnitude term (keeps it < 1)


def _row_vector(values, partition: RowPartition, name: str, dtype) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (partition.n_rows,):
        raise ValueError(f"{name} must have shape ({partition.n_rows},) (one entry per row), got {arr.shape}")
    return arr.astype(dtype, copy=False)


def _tensor_scale(tensor_scale, partition: RowPartition) -> np.ndarray:
    scale = np.asarray(tensor_scale, dtype=np.float64)
    if scale.shape != (partition.n_tensors,):
        raise ValueError(
            f"tensor_scale must have shape ({partition.n_tensors},) (one entry per tensor), got {scale.shape}"
        )
    if not np.all(np.isfinite(scale)) or np.any(scale < 0):
        raise ValueError("tensor_scale must be finite and >= 0 (a mean |update| per tensor)")
    return scale


def _magnitude_term(tensor_scale, partition: RowPartition, offset: float) -> np.ndarray:
    """Per-row ``scale[t(i)] / (max(scale) + offset)``, in [0, 1)."""
    scale = _tensor_scale(tensor_scale, partition)
    return (scale / (scale.max() + offset))[partition.row_tensor]


def worker_importance(row_push_iter, tensor_scale, partition: RowPartition) -> np.ndarray:
    """Worker-side importance of every row, ``(n_rows,)`` float64: staleness first, magnitude breaks ties."""
    it = _row_vector(row_push_iter, partition, "row_push_iter", np.int64)
    staleness = (it.max() - it).astype(np.float64)
    return staleness + _magnitude_term(tensor_scale, partition, WORKER_SCALE_OFFSET)


def server_importance(updates_since_pull, tensor_scale, partition: RowPartition) -> np.ndarray:
    """Server-side importance for one worker, ``(n_rows,)`` float64.

    ``updates_since_pull`` is that worker's row of ``ServerView.updates_since_pull``.
    """
    upd = _row_vector(updates_since_pull, partition, "updates_since_pull", np.int64)
    if np.any(upd < 0):
        raise ValueError("updates_since_pull must be >= 0")
    return upd.astype(np.float64) + _magnitude_term(tensor_scale, partition, SERVER_SCALE_OFFSET)


def send_order(
    importance,
    prefix_rows: int,
    tensor_scale,
    partition: RowPartition,
    first_rows=None,
) -> np.ndarray:
    """The artifact's send order: an ``(n_rows,)`` int64 permutation of all rows.

    1. The head: the top ``prefix_rows`` rows by importance (descending; ties by row id ascending).
       Rows in ``first_rows`` (if given) lead the head, in importance order among themselves,
       and the head grows to hold all of them if they outnumber ``prefix_rows``.
    2. Then ALL remaining rows by their tensor's scale (descending; ties by row id ascending).

    Both sorts are stable on row id, so rows of one tensor with equal keys come out as one run
    of consecutive ids: few segments, a small row index on the wire.
    """
    n = partition.n_rows
    imp = _row_vector(importance, partition, "importance", np.float64)
    if not np.all(np.isfinite(imp)):
        raise ValueError("importance must be finite")
    if isinstance(prefix_rows, bool) or int(prefix_rows) != prefix_rows or not 0 <= prefix_rows <= n:
        raise ValueError(f"prefix_rows must be an integer in [0, {n}], got {prefix_rows!r}")
    scale = _tensor_scale(tensor_scale, partition)

    if first_rows is None:
        ranked = np.argsort(-imp, kind="stable")
        head_len = int(prefix_rows)
    else:
        first = np.asarray(first_rows, dtype=np.int64).reshape(-1)
        if first.size and (first.min() < 0 or first.max() >= n):
            raise ValueError(f"first_rows must be row ids in [0, {n}), got {first.min()}..{first.max()}")
        forced = np.zeros(n, dtype=bool)
        forced[first] = True
        # lexsort: last key is primary -> forced rows first, then importance descending, stable on id
        ranked = np.lexsort((-imp, ~forced))
        head_len = max(int(prefix_rows), int(forced.sum()))

    head = ranked[:head_len]
    rest = np.ones(n, dtype=bool)
    rest[head] = False
    rest_ids = np.flatnonzero(rest)  # ascending id
    tail = rest_ids[np.argsort(-scale[partition.row_tensor[rest_ids]], kind="stable")]
    return np.concatenate([head, tail]).astype(np.int64, copy=False)
