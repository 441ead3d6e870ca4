"""SSP(s): Stale Synchronous Parallel with whole-model transfers.

A worker may run at most ``s`` iterations ahead of the slowest active worker: its pull after push
``n`` proceeds iff ``n - min(push_iter[active]) <= s``.  Every push and pull carries every row,
all mandatory, with no deadline.  SSP(0) is BSP (see :mod:`rog.policies.bsp`).
"""

from __future__ import annotations

import numpy as np

from .staleness import ssp_ready
from .base import Policy, ServerView, TransmitPlan, WorkerView, all_rows_plan


class SSP(Policy):
    """Stale Synchronous Parallel: bounded staleness ``s``, whole-model pushes and pulls."""

    name = "SSP"
    default_threshold = 4  # the paper's SSP-4
    segmented_schedules = True  # whole-model transfers: the layer-segment schedules can split them

    def __init__(self, threshold: int = 4) -> None:
        super().__init__(threshold)

    def push_plan(self, view: WorkerView) -> TransmitPlan:
        """The whole model, in row-id order, no deadline."""
        return all_rows_plan(view.partition)

    def pull_plan(self, view: ServerView, worker: int, tensor_scale: np.ndarray) -> TransmitPlan:
        """The whole pending update, in row-id order, no deadline."""
        return all_rows_plan(view.partition)

    def pull_ready(self, view: ServerView, worker: int) -> bool:
        """SSP gate on push counts: ``push_iter[worker] - min(push_iter[active]) <= s``."""
        return ssp_ready(view.push_iter, worker, self.threshold, view.active)
