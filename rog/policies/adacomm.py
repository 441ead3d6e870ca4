"""Fixed ADACOMM: ``tau`` local steps, then a synchronous commit (Wang and Joshi, 2018, as ADSP's
baseline "Fixed ADACOMM" with ``tau`` fixed for all workers; the released ADSP code used tau = 40).

Every worker applies its own updates between commits (:attr:`local_steps`) and commits its
accumulated update after every ``tau`` local steps; the pull waits until every active worker has
pushed the same step count (BSP's barrier on ``push_iter``, which all workers reach at multiples
of ``tau``).  The threshold slot carries ``tau``, so the system's label is ``ADACOMM-40``.
"""

from __future__ import annotations

from .staleness import ssp_ready
from .base import CommitView, ServerView
from .ssp import SSP


class ADACOMM(SSP):
    """``tau = threshold`` local steps per commit, a barrier at every commit, whole-model transfers."""

    name = "ADACOMM"
    default_threshold = 40  # tau of the ADSP authors' Fixed ADACOMM baseline
    local_steps = True
    segmented_schedules = False  # local steps between commits

    def __init__(self, threshold: int = 40) -> None:
        if isinstance(threshold, bool) or int(threshold) != threshold or threshold < 1:
            raise ValueError(f"ADACOMM's tau (local steps per commit, the threshold) must be an integer >= 1, got {threshold!r}")
        super().__init__(threshold)

    @property
    def tau(self) -> int:
        """Local steps per commit."""
        return self.threshold

    def commit_due(self, view: CommitView) -> bool:
        """After every ``tau`` local steps."""
        return view.steps_since_commit >= self.tau

    def pull_ready(self, view: ServerView, worker: int) -> bool:
        """The barrier: every active worker has committed the same step count."""
        return ssp_ready(view.push_iter, worker, 0, view.active)
