"""ROG(s): Row Synchronous Parallel (RSP) + the Adaptive Transmission Protocol (ATP).

Push (worker side): rows ranked by worker-side importance (staleness first, magnitude breaks
ties, :mod:`rog.policies.importance`).  The mandatory prefix holds, first, every row the PS asked for
(``view.required_rows``) and every *overdue* row (``iteration - row_push_iter_i > s``: not sending
it now would break this worker's own gate), then rows up to the mandatory count
(:func:`rog.policies.mta.mandatory_rows`: the MTA share plus the artifact's extra share).  Which rows fill
that count is ``prefix_order``:

* ``artifact`` (default, docs/design.md#artifact-choices): the MTA share by importance, then every remaining row by
  tensor magnitude, the first ``extra share`` of those still mandatory;
* ``importance``: the whole mandatory count by importance, then the rest by magnitude.

At thresholds up to 4 the extra share is 0 and both orders are the same.  Deadline: the budget the
PS handed out (``view.budget_s``), or ``initial_budget_s`` when none is known yet.

Pull (server side): rows ranked by server-side importance (updates since this worker last
pulled them), the same prefix rule; deadline = :meth:`ROG.push_budget_s` for that worker.

Gate: RSP (:func:`rog.policies.staleness.rsp_ready`); while blocked the PS asks lagging workers for
:func:`rog.policies.staleness.lagging_rows` with ``lag_lookahead`` (default 0: only the rows that block a
gate now, as the original artifact's must-update rows).  Asking also for rows that would block at
the next iteration (``lag_lookahead=1``) made a straggler on a slow link send every row on every
other push, with a zero budget (simulator, quick profile, outdoors trace, 100 iterations): stall
per iteration 0.93 s instead of 0.74 s with ``lag_lookahead=0``.

Budget ("MTA time"), decided by the PS per worker: ``budget_rule`` (:mod:`rog.policies.budget`):
``artifact`` (default: whole transmission durations, 0 for a worker less than ``straggler_steps``
transmission steps ahead of the slowest) or ``mandatory`` (mandatory-part durations, 0 for a
worker less than ``straggler_lead`` iterations ahead).

Degenerate case: on links that always deliver every row, every row's version equals its worker's
push count, so the RSP gate equals SSP's and ROG(s) behaves like SSP(s) (with a different send
order, which then does not matter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rog.options import check_choices, option

from .importance import send_order, server_importance, worker_importance
from .mta import mandatory_rows
from .staleness import lagging_rows, rsp_ready
from .base import Policy, ServerView, TransferReport, TransmitPlan, WorkerView
from .budget import BUDGET_RULES, make_budget

PREFIX_ORDERS = ("artifact", "importance")  # --prefix-order choices; the first is the default
FLAG_PREFIX = "atp"  # the Adaptive Transmission Protocol's choices; their flags keep the names users type


@dataclass(frozen=True)
class Options:
    """ROG's ATP choices (``run.py --budget-rule``, ``--prefix-order``; ``config.yaml``'s ``policy_options``),
    checked here and nowhere else (docs/atp.md)."""

    budget_rule: str = option(BUDGET_RULES[0], "the speculative budget: artifact (as the original ran it, whole "
                              "transmission times, 0 within two transmission steps of the slowest) or mandatory "
                              "(mandatory-part times, 0 when tied with the slowest push count); see docs/atp.md",
                              flag="--budget-rule", choices=BUDGET_RULES)
    prefix_order: str = option(PREFIX_ORDERS[0], "the mandatory prefix: artifact (the MTA share by importance, then "
                               "the extra share as the first rows by tensor magnitude) or importance (all of it by "
                               "importance)", flag="--prefix-order", choices=PREFIX_ORDERS)

    def __post_init__(self) -> None:
        check_choices(self, FLAG_PREFIX)


class ROG(Policy):
    """ROG(s): RSP two-level staleness gate, importance order, MTA prefix, speculative deadline."""

    name = "ROG"
    default_threshold = 4  # the paper's ROG-4
    options = Options  # --budget-rule, --prefix-order: run.py's ATP group
    run_options = FLAG_PREFIX
    options_group = "atp"

    def __init__(
        self,
        threshold: int = 4,
        extra_share: str | float = "artifact",
        initial_budget_s: float = 5.0,
        history: int = 30,
        lag_lookahead: int = 0,
        straggler_lead: int = 1,
        budget_rule: str = Options.budget_rule,
        prefix_order: str = Options.prefix_order,
        straggler_steps: int = 2,
    ) -> None:
        super().__init__(threshold)
        mandatory_rows(1, self.threshold, extra_share)  # validates extra_share
        if not (np.isfinite(initial_budget_s) and initial_budget_s >= 0):
            raise ValueError(f"initial_budget_s must be a finite number of seconds >= 0, got {initial_budget_s!r}")
        if isinstance(history, bool) or int(history) != history or history < 1:
            raise ValueError(f"history must be an integer >= 1 (observations kept for the max), got {history!r}")
        for name, v in (("lag_lookahead", lag_lookahead), ("straggler_lead", straggler_lead),
                        ("straggler_steps", straggler_steps)):
            if isinstance(v, bool) or int(v) != v or v < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
        Options(budget_rule, prefix_order)  # the checks (ConfigError, a ValueError, naming the flag)
        self.lag_lookahead = int(lag_lookahead)
        self.straggler_lead = int(straggler_lead)
        self.straggler_steps = int(straggler_steps)
        self.extra_share = extra_share
        self.initial_budget_s = float(initial_budget_s)
        self.history = int(history)
        self.budget_rule = budget_rule
        self.prefix_order = prefix_order
        self.budget = make_budget(budget_rule, self.initial_budget_s, self.history, self.straggler_steps,
                                  self.straggler_lead)

    def __repr__(self) -> str:
        return (
            f"ROG(threshold={self.threshold}, extra_share={self.extra_share!r}, "
            f"initial_budget_s={self.initial_budget_s}, history={self.history}, "
            f"lag_lookahead={self.lag_lookahead}, straggler_lead={self.straggler_lead}, "
            f"budget_rule={self.budget_rule!r}, prefix_order={self.prefix_order!r}, "
            f"straggler_steps={self.straggler_steps})"
        )

    def _prefix(self, n_rows: int, forced: int = 0) -> tuple[int, int]:
        """``(rows ranked by importance, mandatory rows)`` for a transmission with ``forced`` rows that lead it."""
        total = mandatory_rows(n_rows, self.threshold, self.extra_share)
        if self.prefix_order == "importance":
            head = max(total, forced)
            return head, head
        mta = mandatory_rows(n_rows, self.threshold, "none")
        head = max(mta, forced)
        return head, min(n_rows, head + (total - mta))

    # --------------------------------------------------------------- worker side
    def push_plan(self, view: WorkerView) -> TransmitPlan:
        """Required and overdue rows, then the prefix (``prefix_order``), then the rest; deadline = budget."""
        part = view.partition
        row_push_iter = np.asarray(view.row_push_iter, dtype=np.int64)
        importance = worker_importance(row_push_iter, view.tensor_scale, part)
        required = np.asarray(view.required_rows, dtype=np.int64).reshape(-1)
        if required.size and (required.min() < 0 or required.max() >= part.n_rows):
            raise ValueError(f"required_rows must be row ids in [0, {part.n_rows})")
        forced = row_push_iter < view.iteration - self.threshold  # overdue: would break the gate
        forced[required] = True
        first = np.flatnonzero(forced)
        head, mandatory = self._prefix(part.n_rows, int(first.size))
        order = send_order(importance, head, view.tensor_scale, part, first_rows=first)
        deadline = self.initial_budget_s if view.budget_s is None else float(view.budget_s)
        return TransmitPlan(order, mandatory, deadline)

    # --------------------------------------------------------------- parameter-server side
    def pull_plan(self, view: ServerView, worker: int, tensor_scale: np.ndarray) -> TransmitPlan:
        """Most-updated rows first (``prefix_order``), the mandatory count; deadline = this worker's budget."""
        part = view.partition
        importance = server_importance(view.updates_since_pull[worker], tensor_scale, part)
        head, mandatory = self._prefix(part.n_rows)
        order = send_order(importance, head, tensor_scale, part)
        return TransmitPlan(order, mandatory, self.push_budget_s(view, worker))

    def pull_ready(self, view: ServerView, worker: int) -> bool:
        """RSP gate: ``push_iter[worker] - min(versions[active]) <= s``."""
        return rsp_ready(view.versions, view.push_iter, worker, self.threshold, view.active)

    def lagging_rows(self, view: ServerView, worker: int) -> np.ndarray:
        """Rows of ``worker`` trailing the fastest active worker by more than ``s - lag_lookahead`` iterations."""
        return lagging_rows(view.versions, view.push_iter, worker, self.threshold, view.active, self.lag_lookahead)

    def push_budget_s(self, view: ServerView, worker: int) -> float:
        """The MTA time for ``worker``'s next push (and the PS's pull to it): ``budget_rule``'s decision."""
        return self.budget.budget_s(view, worker)

    @property
    def budget_basis(self) -> dict:
        """What decided the latest budget: ``rule``, ``reason`` (initial / straggler / history), ``lead``."""
        return dict(rule=self.budget_rule, **self.budget.last_basis)

    def observe(self, report: TransferReport) -> None:
        """Feed a finished transmission to the budget rule."""
        self.budget.observe(report)
