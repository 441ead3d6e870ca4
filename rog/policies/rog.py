"""ROG(s): Row Synchronous Parallel (RSP) + the Adaptive Transmission Protocol (ATP).

Push (worker side): rows ranked by worker-side importance (staleness first, magnitude breaks
ties, :mod:`rog.importance`).  The mandatory prefix holds, first, every row the PS asked for
(``view.required_rows``) and every *overdue* row (``iteration - row_push_iter_i > s``: not sending
it now would break this worker's own gate), then the best rows by importance up to the MTA count
(:func:`rog.mta.mandatory_rows`, with the artifact's extra share by default).  After the prefix,
all remaining rows by tensor magnitude.  Deadline: the budget the PS handed out
(``view.budget_s``), or ``initial_budget_s`` when none is known yet.

Pull (server side): rows ranked by server-side importance (updates since this worker last
pulled them); mandatory = the MTA count; deadline = :meth:`ROG.push_budget_s` for that worker.

Gate: RSP (:func:`rog.staleness.rsp_ready`); while blocked the PS asks lagging workers for
:func:`rog.staleness.lagging_rows` with ``lag_lookahead`` (default 0: only the rows that block a
gate now, as the original artifact's must-update rows).  Asking also for rows that would block at
the next iteration (``lag_lookahead=1``) made a straggler on a slow link send every row on every
other push, with a zero budget (simulator, quick profile, outdoors trace, 100 iterations): stall
per iteration 0.93 s instead of 0.74 s with ``lag_lookahead=0``.

Budget ("MTA time", DESIGN 2.2.1), decided by the PS per worker:
``initial_budget_s`` until every active worker has had a transmission observed; 0 (send only the
mandatory rows) for a worker less than ``straggler_lead`` iterations (default 1) ahead of the
slowest active worker (a straggler); otherwise ``max(max of the last `history` observed
mandatory_s, mean of all observed mandatory_s)``.

Degenerate case: on links that always deliver every row, every row's version equals its worker's
push count, so the RSP gate equals SSP's and ROG(s) behaves like SSP(s) (with a different send
order, which then does not matter).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..importance import send_order, server_importance, worker_importance
from ..mta import mandatory_rows
from ..staleness import lagging_rows, rsp_ready
from .base import Policy, ServerView, TransferReport, TransmitPlan, WorkerView


class ROG(Policy):
    """ROG(s): RSP two-level staleness gate, importance order, MTA prefix, speculative deadline."""

    name = "ROG"
    default_threshold = 4  # the paper's ROG-4

    def __init__(
        self,
        threshold: int = 4,
        extra_share: str | float = "artifact",
        initial_budget_s: float = 5.0,
        history: int = 30,
        lag_lookahead: int = 0,
        straggler_lead: int = 1,
    ) -> None:
        super().__init__(threshold)
        mandatory_rows(1, self.threshold, extra_share)  # validates extra_share
        if not (np.isfinite(initial_budget_s) and initial_budget_s >= 0):
            raise ValueError(f"initial_budget_s must be a finite number of seconds >= 0, got {initial_budget_s!r}")
        if isinstance(history, bool) or int(history) != history or history < 1:
            raise ValueError(f"history must be an integer >= 1 (observations kept for the max), got {history!r}")
        for name, v in (("lag_lookahead", lag_lookahead), ("straggler_lead", straggler_lead)):
            if isinstance(v, bool) or int(v) != v or v < 0:
                raise ValueError(f"{name} must be a non-negative integer (iterations), got {v!r}")
        self.lag_lookahead = int(lag_lookahead)
        self.straggler_lead = int(straggler_lead)
        self.extra_share = extra_share
        self.initial_budget_s = float(initial_budget_s)
        self.history = int(history)
        self._recent_mandatory_s: deque[float] = deque(maxlen=self.history)
        self._sum_mandatory_s = 0.0
        self._n_mandatory_s = 0
        self._transmitted: set[int] = set()

    def __repr__(self) -> str:
        return (
            f"ROG(threshold={self.threshold}, extra_share={self.extra_share!r}, "
            f"initial_budget_s={self.initial_budget_s}, history={self.history}, "
            f"lag_lookahead={self.lag_lookahead}, straggler_lead={self.straggler_lead})"
        )

    # --------------------------------------------------------------- worker side
    def push_plan(self, view: WorkerView) -> TransmitPlan:
        """Required and overdue rows, then the MTA count by importance, then the rest; deadline = budget."""
        part = view.partition
        row_push_iter = np.asarray(view.row_push_iter, dtype=np.int64)
        importance = worker_importance(row_push_iter, view.tensor_scale, part)
        required = np.asarray(view.required_rows, dtype=np.int64).reshape(-1)
        if required.size and (required.min() < 0 or required.max() >= part.n_rows):
            raise ValueError(f"required_rows must be row ids in [0, {part.n_rows})")
        forced = row_push_iter < view.iteration - self.threshold  # overdue: would break the gate
        forced[required] = True
        first = np.flatnonzero(forced)
        mta = mandatory_rows(part.n_rows, self.threshold, self.extra_share)
        order = send_order(importance, mta, view.tensor_scale, part, first_rows=first)
        deadline = self.initial_budget_s if view.budget_s is None else float(view.budget_s)
        return TransmitPlan(order, max(mta, int(first.size)), deadline)

    # --------------------------------------------------------------- parameter-server side
    def pull_plan(self, view: ServerView, worker: int, tensor_scale: np.ndarray) -> TransmitPlan:
        """Most-updated rows first, the MTA count mandatory; deadline = this worker's budget."""
        part = view.partition
        importance = server_importance(view.updates_since_pull[worker], tensor_scale, part)
        mta = mandatory_rows(part.n_rows, self.threshold, self.extra_share)
        order = send_order(importance, mta, tensor_scale, part)
        return TransmitPlan(order, mta, self.push_budget_s(view, worker))

    def pull_ready(self, view: ServerView, worker: int) -> bool:
        """RSP gate: ``push_iter[worker] - min(versions[active]) <= s``."""
        return rsp_ready(view.versions, view.push_iter, worker, self.threshold, view.active)

    def lagging_rows(self, view: ServerView, worker: int) -> np.ndarray:
        """Rows of ``worker`` trailing the fastest active worker by more than ``s - lag_lookahead`` iterations."""
        return lagging_rows(view.versions, view.push_iter, worker, self.threshold, view.active, self.lag_lookahead)

    def push_budget_s(self, view: ServerView, worker: int) -> float:
        """The MTA time for ``worker``'s next push (and the PS's pull to it), see the module docstring."""
        active = np.asarray(view.active, dtype=bool)
        active_ids = np.flatnonzero(active)
        if active_ids.size == 0 or not all(int(w) in self._transmitted for w in active_ids):
            return self.initial_budget_s
        push_iter = np.asarray(view.push_iter, dtype=np.int64)
        if push_iter[worker] - push_iter[active].min() < self.straggler_lead:
            return 0.0  # a straggler: only its mandatory rows
        if self._n_mandatory_s == 0:
            return self.initial_budget_s  # transmissions seen, but none timed a mandatory part yet
        return max(max(self._recent_mandatory_s), self._sum_mandatory_s / self._n_mandatory_s)

    def observe(self, report: TransferReport) -> None:
        """Record that the worker transmitted, and its MTA time (``mandatory_s``) when measured."""
        self._transmitted.add(int(report.worker))
        if report.mandatory_s is not None:
            t = float(report.mandatory_s)
            if not (np.isfinite(t) and t >= 0):
                raise ValueError(f"report.mandatory_s must be a finite number of seconds >= 0, got {t!r}")
            self._recent_mandatory_s.append(t)
            self._sum_mandatory_s += t
            self._n_mandatory_s += 1
