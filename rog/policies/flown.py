"""FLOWN(s): model-granular transfer scheduling with bounded staleness.

After Chen et al., "A Joint Learning and Communications Framework for Federated Learning over
Wireless Networks" (IEEE TWC 2021), as the ROG artifact adapted it (its version crashed at start;
this one runs):

- every push and pull is the whole model, no deadline;
- admission control: at most ``max_concurrent`` transfers in flight; a free slot goes first to a
  waiting worker ``s`` or more iterations behind the fastest active worker (most behind first,
  ties by worker id), otherwise to the waiting worker with the best *measured* bandwidth;
- the bandwidth estimate is an EWMA (weight ``alpha`` on the newest sample) of
  ``bytes_delivered * 8 / duration_s`` in Mbit/s from :meth:`FLOWN.observe`, over both directions.
  A worker not yet measured ranks first (so everyone gets measured).  Nothing else is read: never
  a configured ``tc`` rate;
- gate: SSP's bounded staleness ``push_iter[worker] - min(push_iter[active]) <= s``.  FLOWN is
  SSP(s) plus the scheduling; with ``max_concurrent`` >= the number of workers and everyone
  caught up it admits everyone, like SSP.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import ServerView, TransferReport
from .ssp import SSP


class FLOWN(SSP):
    """Bounded staleness ``s`` plus admission of at most ``max_concurrent`` whole-model transfers."""

    name = "FLOWN"
    default_threshold = 4
    threshold_in_label = False  # the paper's name for it (its threshold is the artifact's fixed 4)
    segmented_schedules = False  # its admission gate is not split into layer segments

    def __init__(self, threshold: int = 4, max_concurrent: int = 2, alpha: float = 0.5) -> None:
        super().__init__(threshold)
        if isinstance(max_concurrent, bool) or int(max_concurrent) != max_concurrent or max_concurrent < 1:
            raise ValueError(f"max_concurrent must be an integer >= 1, got {max_concurrent!r}")
        if not 0.0 < float(alpha) <= 1.0:
            raise ValueError(f"alpha (EWMA weight of the newest sample) must be in (0, 1], got {alpha!r}")
        self.max_concurrent = int(max_concurrent)
        self.alpha = float(alpha)
        self._rate_mbit: dict[int, float] = {}

    def __repr__(self) -> str:
        return f"FLOWN(threshold={self.threshold}, max_concurrent={self.max_concurrent}, alpha={self.alpha})"

    def bandwidth_mbit(self, worker: int) -> float | None:
        """The measured bandwidth estimate of ``worker`` in Mbit/s; None before its first transfer."""
        return self._rate_mbit.get(int(worker))

    def observe(self, report: TransferReport) -> None:
        """Fold one finished transfer's goodput into its worker's EWMA (transfers of 0 s are ignored)."""
        if report.direction not in ("push", "pull"):
            raise ValueError(f"report.direction must be 'push' or 'pull', got {report.direction!r}")
        if report.bytes_delivered < 0:
            raise ValueError(f"report.bytes_delivered must be >= 0, got {report.bytes_delivered}")
        if not report.duration_s > 0:
            return  # no time elapsed: nothing measurable
        sample = report.bytes_delivered * 8 / report.duration_s / 1e6
        w = int(report.worker)
        old = self._rate_mbit.get(w)
        self._rate_mbit[w] = sample if old is None else self.alpha * sample + (1 - self.alpha) * old

    def admit(self, view: ServerView, waiting: Sequence[int], in_flight: int) -> list[int]:
        """Fill the free slots: far-behind workers first (most behind), then best measured bandwidth."""
        if isinstance(in_flight, bool) or int(in_flight) != in_flight or in_flight < 0:
            raise ValueError(f"in_flight must be a non-negative integer, got {in_flight!r}")
        free = self.max_concurrent - int(in_flight)
        candidates = list(dict.fromkeys(int(w) for w in waiting))  # dedupe, keep order
        if free <= 0 or not candidates:
            return []
        n_workers = view.n_workers
        bad = [w for w in candidates if not 0 <= w < n_workers]
        if bad:
            raise ValueError(f"waiting holds worker ids outside [0, {n_workers}): {bad}")
        push_iter = np.asarray(view.push_iter, dtype=np.int64)
        active = np.asarray(view.active, dtype=bool)
        fastest = int(push_iter[active].max()) if active.any() else int(push_iter.max())

        def rank(w: int) -> tuple:
            behind = fastest - int(push_iter[w])
            if behind >= self.threshold:
                return (0, -behind, w)
            rate = self._rate_mbit.get(w)
            if rate is None:
                return (1, 0, 0.0, w)  # unmeasured: first among the rest
            return (1, 1, -rate, w)

        return sorted(candidates, key=rank)[:free]
