"""DynaComm's cost model and its two dynamic programs (forward/pull and backward/push), with traceback.

Layers are numbered ``0 .. L-1`` in execution order.  A *segment* is an inclusive layer range
``(first, last)``.  A forward plan lists its pull segments bottom-up (the order they are pulled); a
backward plan lists its push segments top-down (the order they are pushed).

Per-layer inputs (:class:`Profile`, seconds): ``pt`` pull time, ``fc`` forward compute, ``bc``
backward compute, ``gt`` push time, ``dt_s`` the overhead of one transfer, and ``start_s`` the pull's
start (once per pull, not per segment: the server's first chunk and the link's latency; 0 in the paper).

Cost model (the one the paper's recurrences, Eqs. 13 and 14, imply):

* forward: pulls go back to back from t = ``start_s``; segment ``j`` (1-based) has arrived at
  ``start_s + j * dt + PT(its last layer)``; its compute starts at ``max(previous compute end, arrival)``;
* backward: compute runs without a break from the top layer down; a segment's push starts at
  ``max(previous push end, backward done down to its lowest layer)`` and lasts ``dt + GT(segment)``.

The forward DP keeps the segment count (the ``n * dt`` term needs it): O(L^3) time, the inner loop
vectorised.  In the backward DP the count only indexes, and ``max(., c)`` is monotone, so the
one-dimensional recurrence ``B[m] = min_k max(B[k], BCt[m]) + dt + GTt[m] - GTt[k]`` is exact: O(L^2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np

Segment = Tuple[int, int]  # (first layer, last layer), inclusive


@dataclass(frozen=True)
class Profile:
    """Per-layer costs in seconds (``pt``, ``fc``, ``bc``, ``gt``: one value per layer), ``dt_s`` and ``start_s``."""

    pt: np.ndarray
    fc: np.ndarray
    bc: np.ndarray
    gt: np.ndarray
    dt_s: float
    start_s: float = 0.0

    def __post_init__(self) -> None:
        arrays = [np.asarray(getattr(self, k), dtype=np.float64) for k in ("pt", "fc", "bc", "gt")]
        n = len(arrays[0])
        if n < 1:
            raise ValueError("a profile needs at least one layer")
        for name, a in zip(("pt", "fc", "bc", "gt"), arrays):
            if a.shape != (n,):
                raise ValueError(f"profile field {name} has shape {a.shape}, expected ({n},)")
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ValueError(f"profile field {name} must hold finite times >= 0")
            object.__setattr__(self, name, a)
        for name in ("dt_s", "start_s"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite time >= 0, got {v!r}")

    @property
    def n_layers(self) -> int:
        """L, the number of layers."""
        return len(self.pt)


def _prefix(a: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(a)])


def check_segments(segments, n_layers: int, top_down: bool = False) -> list[Segment]:
    """``segments`` as a list of (first, last) tuples that tile ``0 .. n_layers-1`` in order (ValueError otherwise)."""
    segs = [(int(a), int(b)) for a, b in segments]
    ordered = sorted(segs) if top_down else segs
    if top_down and segs != sorted(segs, reverse=True):
        raise ValueError(f"backward segments must run top-down, got {segs}")
    nxt = 0
    for a, b in ordered:
        if a != nxt or b < a:
            raise ValueError(f"segments {segs} do not tile layers 0..{n_layers - 1}")
        nxt = b + 1
    if nxt != n_layers:
        raise ValueError(f"segments {segs} do not tile layers 0..{n_layers - 1}")
    return segs


def forward_time(segments, p: Profile) -> float:
    """Forward-pass time of the pull segments ``segments`` (bottom-up) under the cost model."""
    PT, FC = _prefix(p.pt), _prefix(p.fc)
    t = 0.0
    for j, (a, b) in enumerate(check_segments(segments, p.n_layers), start=1):
        t = max(t, p.start_s + j * p.dt_s + PT[b + 1]) + FC[b + 1] - FC[a]
    return float(t)


def backward_time(segments, p: Profile) -> float:
    """Backward-pass time (until the last push ends) of the push segments ``segments`` (top-down)."""
    BC, GT = _prefix(p.bc), _prefix(p.gt)
    L = p.n_layers
    t = 0.0
    for a, b in check_segments(segments, L, top_down=True):
        ready = BC[L] - BC[a]  # backward done from the top down to layer a
        t = max(t, ready) + p.dt_s + GT[b + 1] - GT[a]
    return float(t)


def forward_dp(p: Profile) -> tuple[float, list[Segment]]:
    """The optimal pull segmentation (Eq. 13, Alg. 3): ``(T_fwd, segments bottom-up)``."""
    L, dt = p.n_layers, p.dt_s
    PT, FC = _prefix(p.pt), _prefix(p.fc)
    F = np.full((L + 1, L + 1), np.inf)  # F[m, n]: first m layers in n segments
    F[0, 0] = 0.0
    path = np.full((L + 1, L + 1), -1, dtype=np.int64)
    ns = np.arange(1, L + 1)
    for m in range(1, L + 1):
        k = np.arange(m)  # the last segment is layers k+1..m (1-based)
        prev = F[:m, 0:m]  # prev[k, n-1] for n = 1..m
        arrive = p.start_s + ns[:m] * dt + PT[m]  # (n,)
        cand = np.maximum(prev, arrive[None, :]) + (FC[m] - FC[k])[:, None]  # (k, n)
        best_k = np.argmin(cand, axis=0)
        F[m, 1 : m + 1] = cand[best_k, np.arange(m)]
        path[m, 1 : m + 1] = best_k
    n = int(np.argmin(F[L, 1:])) + 1
    total = float(F[L, n])
    segs: list[Segment] = []
    m = L
    while m > 0:
        k = int(path[m, n])
        segs.append((k, m - 1))
        m, n = k, n - 1
    return total, segs[::-1]


def backward_dp(p: Profile) -> tuple[float, list[Segment]]:
    """The optimal push segmentation (Eq. 14, Alg. 4, in its exact O(L^2) form): ``(T_bwd, segments top-down)``."""
    L, dt = p.n_layers, p.dt_s
    BCt = _prefix(p.bc[::-1])  # BCt[m]: backward of the top m layers
    GTt = _prefix(p.gt[::-1])
    B = np.full(L + 1, np.inf)
    B[0] = 0.0
    path = np.full(L + 1, -1, dtype=np.int64)
    for m in range(1, L + 1):
        k = np.arange(m)  # the new segment is the top layers k+1..m counted from the top
        cand = np.maximum(B[:m], BCt[m]) + dt + (GTt[m] - GTt[k])
        j = int(np.argmin(cand))
        B[m], path[m] = cand[j], j
    segs: list[Segment] = []
    m = L
    while m > 0:
        k = int(path[m])
        segs.append((L - m, L - k - 1))  # layers counted from the top -> layer indices
        m = k
    return float(B[L]), segs[::-1]
