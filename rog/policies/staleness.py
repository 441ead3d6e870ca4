"""Staleness gates: SSP's per-worker gate and ROG's two-level RSP gate (vectorised over rows).

State (as in :class:`rog.policies.base.ServerView`):
``push_iter`` (W,): latest iteration each worker pushed; ``versions`` (W, n_rows): iteration of
worker r's latest delivered gradient of row i (0 = never); ``active`` (W,): workers that count.
Inactive (evicted) workers never enter a min or a max.

RSP (Row Synchronous Parallel): worker r, having pushed ``n = push_iter[r]``, may pull iff
``n - min(versions[active]) <= s``.  Taking the min over every active worker and every row
enforces both levels at once: across workers, one row's versions stay within ``s``; within one
worker (the asker's own rows are in the min), its rows stay within ``s`` of its push count.
At ``s = 0`` this is BSP: wait until every active worker delivered iteration n for every row.
If every row is always delivered, ``versions[r, i] == push_iter[r]`` and RSP equals SSP.
"""

from __future__ import annotations

import numpy as np


def _check_threshold(threshold) -> int:
    if isinstance(threshold, bool) or int(threshold) != threshold or threshold < 0:
        raise ValueError(f"threshold must be a non-negative integer, got {threshold!r}")
    return int(threshold)


def _progress(push_iter, worker, active) -> tuple[np.ndarray, int, np.ndarray]:
    pi = np.asarray(push_iter, dtype=np.int64)
    if pi.ndim != 1 or pi.size == 0:
        raise ValueError(f"push_iter must be a non-empty 1-D array (one entry per worker), got shape {pi.shape}")
    act = np.asarray(active, dtype=bool)
    if act.shape != pi.shape:
        raise ValueError(f"active must have shape {pi.shape} like push_iter, got {act.shape}")
    if isinstance(worker, bool) or int(worker) != worker or not 0 <= worker < pi.size:
        raise ValueError(f"worker must be an id in [0, {pi.size}), got {worker!r}")
    return pi, int(worker), act


def _versions(versions, n_workers: int) -> np.ndarray:
    v = np.asarray(versions, dtype=np.int64)
    if v.ndim != 2 or v.shape[0] != n_workers or v.shape[1] == 0:
        raise ValueError(f"versions must have shape ({n_workers}, n_rows) with n_rows >= 1, got {v.shape}")
    return v


def ssp_ready(push_iter, worker: int, threshold: int, active) -> bool:
    """SSP gate: ``push_iter[worker] - min(push_iter[active]) <= threshold`` (True if none active)."""
    s = _check_threshold(threshold)
    pi, w, act = _progress(push_iter, worker, active)
    if not act.any():
        return True
    return bool(pi[w] - pi[act].min() <= s)


def rsp_ready(versions, push_iter, worker: int, threshold: int, active) -> bool:
    """RSP gate: ``push_iter[worker] - min(versions[active]) <= threshold`` (True if none active)."""
    s = _check_threshold(threshold)
    pi, w, act = _progress(push_iter, worker, active)
    v = _versions(versions, pi.size)
    if not act.any():
        return True
    return bool(pi[w] - v[act].min() <= s)


def lagging_rows(versions, push_iter, worker: int, threshold: int, active, lookahead: int = 1) -> np.ndarray:
    """Rows of ``worker`` that block the fastest worker's gate now or within ``lookahead`` more of its iterations.

    Rows ``i`` with ``max(push_iter[active]) - versions[worker, i] > threshold - lookahead``,
    ascending int64 ids: the PS asks the lagging worker for exactly these.  ``lookahead=0`` asks
    only for rows that block now (the original artifact's must-update rows); the default 1 also
    asks for rows that would block at the fastest worker's next iteration.  Empty for an
    inactive worker.
    """
    s = _check_threshold(threshold)
    if isinstance(lookahead, bool) or int(lookahead) != lookahead or lookahead < 0:
        raise ValueError(f"lookahead must be a non-negative integer (iterations), got {lookahead!r}")
    pi, w, act = _progress(push_iter, worker, active)
    v = _versions(versions, pi.size)
    if not act[w]:
        return np.zeros(0, dtype=np.int64)
    fastest = pi[act].max()
    return np.flatnonzero(fastest - v[w] > s - int(lookahead)).astype(np.int64)


def blocking_workers(versions, push_iter, worker: int, threshold: int, active) -> np.ndarray:
    """Active workers holding a row that blocks ``worker``'s RSP gate (``push_iter[worker] - v > s``)."""
    s = _check_threshold(threshold)
    pi, w, act = _progress(push_iter, worker, active)
    v = _versions(versions, pi.size)
    return np.flatnonzero(act & (pi[w] - v.min(axis=1) > s)).astype(np.int64)


def worker_staleness(push_iter, worker: int, active) -> int:
    """Iterations ``worker`` is behind the fastest active worker (Fig. 8's "staleness"); 0 if none active."""
    pi, w, act = _progress(push_iter, worker, active)
    if not act.any():
        return 0
    return int(pi[act].max() - pi[w])


def row_staleness(versions, push_iter, worker: int, active) -> np.ndarray:
    """Per row of ``worker``: iterations its delivered version is behind the fastest active worker."""
    pi, w, act = _progress(push_iter, worker, active)
    v = _versions(versions, pi.size)
    fastest = pi[act].max() if act.any() else pi[w]
    return (fastest - v[w]).astype(np.int64)


def max_row_staleness(versions, push_iter, worker: int, active) -> int:
    """Largest :func:`row_staleness` of ``worker``: how far its oldest row trails the fastest worker."""
    return int(row_staleness(versions, push_iter, worker, active).max())
