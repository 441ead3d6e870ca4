"""ATP's speculative budget ("MTA time"): how long a non-straggler keeps sending rows past its mandatory prefix.

The parameter server decides one budget per worker, as its pull's deadline and the deadline of that
worker's next push.  Two rules (``--budget-rule``):

``artifact`` (:class:`WholeTransmissionBudget`, the default): the rule the original artifact ran, which
produced the paper's numbers (docs/design.md#artifact-choices).  Every transmission the parameter server sees counts as one
*transmission step* of its worker (a push when the worker reports it, a pull when it ends), and its
*whole* duration (start to end: deadline or last chunk) is recorded.  Then, for worker ``w``:

* ``initial_budget_s`` (5 s) until every active worker has at least one step;
* 0 (send only the mandatory rows) if ``steps[w] - min(steps[active]) < straggler_steps`` (2: about one
  iteration, a push and a pull);
* otherwise ``max(longest of the last `history` (30) whole durations, mean of all whole durations)``, over
  every worker's pushes and the parameter server's pulls.

``mandatory`` (:class:`MandatoryTimeBudget`): the toolkit's earlier rule.  ``initial_budget_s`` until
every active worker has transmitted; 0 for a worker less than ``straggler_lead`` iterations (1) ahead of
the slowest push count; otherwise ``max(longest of the last `history` mandatory_s, mean of all
mandatory_s)``, where ``mandatory_s`` is the time to the delivery of the last mandatory chunk.

Why they differ in effect: a whole duration includes the optional rows a transmission carried, so on a
link with spare capacity the budget keeps covering a full transmission (every row goes, every time); the
mandatory part alone lasts about the MTA share of a full transmission, so under ``mandatory`` a budget
lets through little more than the MTA share whenever links are alike.  The rules do not read a clock:
durations come in :class:`~rog.policies.base.TransferReport` objects.

Each rule keeps ``last_basis`` (what decided its latest budget: ``reason`` = ``initial`` / ``straggler``
/ ``history``, and ``lead``: the worker's lead over the slowest in the rule's unit) for the event log.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .base import ServerView, TransferReport

BUDGET_RULES = ("artifact", "mandatory")  # --budget-rule choices; the first is the default


def _check_count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class _History:
    """Durations: the longest of the last ``history`` and the mean of all."""

    def __init__(self, history: int) -> None:
        self.recent: deque[float] = deque(maxlen=history)
        self.total_s = 0.0
        self.count = 0

    def add(self, t: float, what: str) -> None:
        t = float(t)
        if not (np.isfinite(t) and t >= 0):
            raise ValueError(f"report.{what} must be a finite number of seconds >= 0, got {t!r}")
        self.recent.append(t)
        self.total_s += t
        self.count += 1

    def budget_s(self) -> float:
        return max(max(self.recent), self.total_s / self.count)


class WholeTransmissionBudget:
    """The ``artifact`` rule: transmission steps and whole durations (see the module docstring)."""

    rule = "artifact"

    def __init__(self, initial_budget_s: float = 5.0, history: int = 30, straggler_steps: int = 2) -> None:
        self.initial_budget_s = float(initial_budget_s)
        self.straggler_steps = _check_count("straggler_steps", straggler_steps, 0)
        self._durations = _History(_check_count("history", history, 1))
        self.steps: dict[int, int] = {}  # worker -> transmissions observed
        self.last_basis: dict = {}

    def observe(self, report: TransferReport) -> None:
        """One more step for the report's worker; its whole duration joins the history."""
        self._durations.add(report.duration_s, "duration_s")
        w = int(report.worker)
        self.steps[w] = self.steps.get(w, 0) + 1

    def budget_s(self, view: ServerView, worker: int) -> float:
        """The budget of ``worker``'s next push and of the pull to it."""
        active_ids = np.flatnonzero(np.asarray(view.active, dtype=bool)).tolist()
        if not active_ids or any(self.steps.get(w, 0) == 0 for w in active_ids):
            self.last_basis = dict(reason="initial", lead=None)
            return self.initial_budget_s
        lead = self.steps.get(int(worker), 0) - min(self.steps[w] for w in active_ids)
        if lead < self.straggler_steps:
            self.last_basis = dict(reason="straggler", lead=int(lead))
            return 0.0
        self.last_basis = dict(reason="history", lead=int(lead))
        return self._durations.budget_s()


class MandatoryTimeBudget:
    """The ``mandatory`` rule: push counts and mandatory-part durations (see the module docstring)."""

    rule = "mandatory"

    def __init__(self, initial_budget_s: float = 5.0, history: int = 30, straggler_lead: int = 1) -> None:
        self.initial_budget_s = float(initial_budget_s)
        self.straggler_lead = _check_count("straggler_lead", straggler_lead, 0)
        self._durations = _History(_check_count("history", history, 1))
        self._transmitted: set[int] = set()
        self.last_basis: dict = {}

    def observe(self, report: TransferReport) -> None:
        """The worker has transmitted; its ``mandatory_s`` (when measured) joins the history."""
        self._transmitted.add(int(report.worker))
        if report.mandatory_s is not None:
            self._durations.add(report.mandatory_s, "mandatory_s")

    def budget_s(self, view: ServerView, worker: int) -> float:
        """The budget of ``worker``'s next push and of the pull to it."""
        active = np.asarray(view.active, dtype=bool)
        active_ids = np.flatnonzero(active).tolist()
        if not active_ids or not all(w in self._transmitted for w in active_ids):
            self.last_basis = dict(reason="initial", lead=None)
            return self.initial_budget_s
        push_iter = np.asarray(view.push_iter, dtype=np.int64)
        lead = int(push_iter[worker] - push_iter[active].min())
        if lead < self.straggler_lead:
            self.last_basis = dict(reason="straggler", lead=lead)
            return 0.0
        if self._durations.count == 0:  # transmissions seen, but none timed a mandatory part yet
            self.last_basis = dict(reason="initial", lead=lead)
            return self.initial_budget_s
        self.last_basis = dict(reason="history", lead=lead)
        return self._durations.budget_s()


def make_budget(rule: str, initial_budget_s: float, history: int, straggler_steps: int = 2,
                straggler_lead: int = 1) -> WholeTransmissionBudget | MandatoryTimeBudget:
    """The budget rule named ``rule`` (one of :data:`BUDGET_RULES`; ROG's :class:`~rog.policies.rog.Options`
    checks the name, the one place ``--budget-rule`` is checked)."""
    if rule == "artifact":
        return WholeTransmissionBudget(initial_budget_s, history, straggler_steps)
    assert rule == "mandatory", rule  # ROG's Options refused any other name
    return MandatoryTimeBudget(initial_budget_s, history, straggler_lead)
