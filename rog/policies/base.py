"""The one interface every synchronisation system implements.

A policy only *decides*: what a transmission carries and in what order, how much of it is
mandatory, under what deadline, whether a worker's pull may proceed (the staleness gate), which
workers may start a transfer now (admission), and which rows the parameter server should ask a
lagging worker for.  It does no I/O and reads no clock: the loop that owns the sockets (or the
simulator's fake clock) passes it views of the state and reports of what happened.

Iterations are numbered from 1; iteration 0 means "nothing pushed yet".

Systems that train locally between commits (ADSP, ADACOMM) use three more hooks: a worker asks
:meth:`Policy.commit_due` after every local step whether to synchronise now (a step that does not
commit is compute only); :attr:`Policy.local_steps` makes the worker apply its own updates to its
parameters between commits; a server-side scheduler (:attr:`Policy.scheduler_period_s`,
:meth:`Policy.schedule`, fed the global model's loss when :meth:`Policy.wants_loss` asks) hands each
worker a number with its pull (:meth:`Policy.commit_control`), which the worker's next
:class:`CommitView` carries.

To add a system: one new module with a subclass of :class:`Policy`, plus one line in
:mod:`rog.policies.registry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..rows import RowPartition


@dataclass(frozen=True)
class TransmitPlan:
    """One transmission as a policy wants it.

    ``order`` lists row ids in send order.  The first ``mandatory_rows`` of them are sent
    whatever the deadline (ROG's MTA rows; every row for BSP/SSP/FLOWN).  After that, rows keep
    going in order until ``deadline_s`` seconds from the start of the transmission are spent;
    ``None`` means no deadline: everything in ``order`` is sent.
    """

    order: np.ndarray
    mandatory_rows: int
    deadline_s: float | None

    def __post_init__(self) -> None:
        if not 0 <= self.mandatory_rows <= len(self.order):
            raise ValueError(f"mandatory_rows={self.mandatory_rows} outside [0, {len(self.order)}]")
        if self.deadline_s is not None and self.deadline_s < 0:
            raise ValueError(f"deadline_s must be >= 0 or None, got {self.deadline_s}")


@dataclass(frozen=True)
class WorkerView:
    """What a worker knows when it plans a push of iteration ``iteration``."""

    partition: RowPartition
    worker: int
    iteration: int  # n: the iteration whose gradients are being pushed (>= 1)
    row_push_iter: np.ndarray  # (n_rows,) int64: last iteration whose rows were delivered to the PS (0 = never)
    tensor_scale: np.ndarray  # (n_tensors,) float32: per-tensor mean |accumulated update|
    budget_s: float | None = None  # speculative budget the PS handed out for this push (ROG); None = unknown
    required_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # rows the PS asked for


@dataclass(frozen=True)
class CommitView:
    """What a worker knows after local step ``iteration`` when it decides whether to commit now."""

    worker: int
    iteration: int  # local steps done, this one included (>= 1)
    steps_since_commit: int  # local steps since the end of the last commit, this one included (>= 1)
    since_commit_s: float  # seconds since the end of the last commit (since the join before the first)
    last_commit_s: float | None  # O_i: the last commit's blocking round trip in seconds (None: no commit yet)
    control: float | None  # the latest number the PS's scheduler handed this worker (None: none yet)


@dataclass(frozen=True)
class ServerView:
    """What the parameter server knows: per-worker progress and per-row versions."""

    partition: RowPartition
    push_iter: np.ndarray  # (W,) int64: latest iteration each worker pushed (0 = none)
    versions: np.ndarray  # (W, n_rows) int64: v_i^r, iteration of worker r's latest delivered gradient of row i
    updates_since_pull: np.ndarray  # (W, n_rows) int64: deliveries row i received since worker r last pulled it
    active: np.ndarray  # (W,) bool: workers that count in the staleness gate (not evicted)

    @property
    def n_workers(self) -> int:
        """Number of worker slots."""
        return int(self.push_iter.shape[0])


@dataclass(frozen=True)
class TransferReport:
    """What one finished transmission measured (durations from the real or fake clock)."""

    worker: int
    direction: str  # "push" (worker -> PS) or "pull" (PS -> worker)
    iteration: int
    rows_planned: int
    rows_delivered: int
    bytes_delivered: int
    duration_s: float  # start of the transmission to its end (deadline or last chunk acknowledged)
    mandatory_s: float | None  # start to the delivery of the last mandatory chunk (None: nothing mandatory)
    deadline_s: float | None


class Policy(ABC):
    """A synchronisation system: BSP, SSP(s), FLOWN(s) or ROG(s)."""

    name: str = "?"
    default_threshold: int = 0  # the threshold a bare name on the command line means
    fixed_threshold: bool = False  # the threshold is part of the system (BSP): run ids and labels omit it
    threshold_in_label: bool = True  # figures and summaries name the threshold (SSP-4, ROG-20)
    options: type | None = None  # its options' frozen dataclass (rog.options): run.py's flags, config.yaml's policy_options
    run_options: str | None = None  # the prefix of those flags, --<run_options>-<field> (ADSP "adsp")
    options_group: str = "synchronisation"  # the run.py --help group of those flags (rog.experiment.cli.CONCERNS)

    def __init__(self, threshold: int = 0) -> None:
        if int(threshold) != threshold or threshold < 0:
            raise ValueError(f"threshold must be a non-negative integer, got {threshold!r}")
        self.threshold = int(threshold)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold})"

    # --------------------------------------------------------------- worker side
    @abstractmethod
    def push_plan(self, view: WorkerView) -> TransmitPlan:
        """Plan the push of iteration ``view.iteration``."""

    # --------------------------------------------------------------- parameter-server side
    @abstractmethod
    def pull_plan(self, view: ServerView, worker: int, tensor_scale: np.ndarray) -> TransmitPlan:
        """Plan the pull that sends ``worker`` its pending averaged update.

        ``tensor_scale`` is the per-tensor mean |pending update| of that worker.
        """

    @abstractmethod
    def pull_ready(self, view: ServerView, worker: int) -> bool:
        """The staleness gate: may ``worker``'s pull (after its push ``view.push_iter[worker]``) proceed?"""

    def lagging_rows(self, view: ServerView, worker: int) -> np.ndarray:
        """Rows of ``worker`` that hold back another worker's gate; the PS asks for exactly these."""
        return np.zeros(0, dtype=np.int64)

    def push_budget_s(self, view: ServerView, worker: int) -> float | None:
        """Time budget for ``worker``'s next push (handed to it with its pull); None = no deadline."""
        return None

    @property
    def budget_basis(self) -> dict:
        """What decided the latest :meth:`push_budget_s` (logged with the pull as ``budget_<key>``); {}: nothing to say."""
        return {}

    def admit(self, view: ServerView, waiting: Sequence[int], in_flight: int) -> list[int]:
        """Of the workers ``waiting`` to start a push, which may start now (``in_flight`` already running)."""
        return list(waiting)

    def observe(self, report: TransferReport) -> None:
        """Learn from a finished transmission (measured durations, bytes)."""

    # --------------------------------------------------------------- local steps and commit timing
    local_steps: bool = False  # True: the worker applies its own updates between commits (local SGD)
    # True: every push and pull is the whole model, gated by staleness only, one commit per step, so the
    # layer-segment transfer schedules (rog.schedules, --schedule) can split it (BSP, SSP)
    segmented_schedules: bool = False

    def commit_due(self, view: CommitView) -> bool:
        """Worker side, after every local step: push and pull now?  (Default: every step.)"""
        return True

    # --------------------------------------------------------------- server-side scheduler
    scheduler_period_s: float | None = None  # the PS calls :meth:`schedule` this often; None: no scheduler

    def wants_loss(self, now_s: float) -> bool:
        """Does :meth:`schedule` at ``now_s`` (seconds since training started) need the global model's loss?"""
        return False

    def schedule(self, now_s: float, view: ServerView, loss: float | None) -> list[dict]:
        """The scheduler's tick at ``now_s`` (``loss``: the global model's loss if asked for and available);
        returns records to log (each a dict with an ``event`` key)."""
        return []

    def commit_control(self, worker: int) -> float | None:
        """The number the PS hands ``worker`` with its pull (e.g. ADSP's commit rate); None: nothing."""
        return None


def all_rows_plan(partition: RowPartition) -> TransmitPlan:
    """Every row, in id order, all mandatory, no deadline: a whole-model transmission."""
    return TransmitPlan(np.arange(partition.n_rows, dtype=np.int64), partition.n_rows, None)
