"""Which iterations profile a planned schedule, and the per-layer compute profile its plans use.

A run's first iteration is cold (allocations, first touches, connection start-up): it runs one
segment each way and its times feed neither the profile nor the link estimate, and neither does the
pull that follows it (the parameter server's first serve of the run: its first segment took 84 ms for
1.8 KB against 3-4 ms later, which as one point of the per-transfer overhead regression made the
overhead estimate 3.4 ms instead of about 0).  The next
:data:`PROFILE_ITERATIONS` iterations run one segment per layer, so the link estimate gets one
point per layer and direction (a spread of segment sizes for the overhead regression) before the
first plan.  A per-epoch plan uses the per-layer median of the warm iterations since the previous
plan (one loaded iteration does not set the epoch's plan); a per-iteration plan uses the last one.
"""

from __future__ import annotations

from collections import deque

import numpy as np

COLD_ITERATIONS = 1
PROFILE_ITERATIONS = 2


def phase(k: int) -> str:
    """The phase of a trainer's ``k``-th iteration (1-based): ``cold``, ``profile`` or ``planned``."""
    if k < 1:
        raise ValueError(f"iterations count from 1, got {k!r}")
    if k <= COLD_ITERATIONS:
        return "cold"
    return "profile" if k <= COLD_ITERATIONS + PROFILE_ITERATIONS else "planned"


def first_plan_iteration() -> int:
    """The iteration after which a planned schedule makes its first plan (the last profiling iteration)."""
    return COLD_ITERATIONS + PROFILE_ITERATIONS


class ComputeProfile:
    """Per-layer forward and backward compute seconds of warm iterations since the last plan."""

    def __init__(self, window: int = 50) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        self._fc: deque = deque(maxlen=int(window))
        self._bc: deque = deque(maxlen=int(window))

    def __len__(self) -> int:
        return len(self._fc)

    def add(self, fc, bc) -> None:
        """One warm iteration's per-layer compute times."""
        fc, bc = np.asarray(fc, dtype=np.float64).copy(), np.asarray(bc, dtype=np.float64).copy()
        if fc.shape != bc.shape or fc.ndim != 1:
            raise ValueError(f"fc and bc must be per-layer vectors of one length, got {fc.shape} and {bc.shape}")
        self._fc.append(fc)
        self._bc.append(bc)

    def median(self) -> tuple[np.ndarray, np.ndarray]:
        """The per-layer medians ``(fc, bc)`` of the samples (ValueError when there are none)."""
        if not self._fc:
            raise ValueError("no warm iteration profiled yet")
        return np.median(np.stack(self._fc), axis=0), np.median(np.stack(self._bc), axis=0)

    def last(self) -> tuple[np.ndarray, np.ndarray]:
        """The last sample ``(fc, bc)``."""
        if not self._fc:
            raise ValueError("no warm iteration profiled yet")
        return self._fc[-1], self._bc[-1]

    def clear(self) -> None:
        """Start a new epoch's samples."""
        self._fc.clear()
        self._bc.clear()
