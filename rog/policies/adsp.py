"""ADSP: ADaptive Synchronous Parallel (Hu, Wang, Wu, "Distributed Machine Learning through
Heterogeneous Edge Systems", AAAI 2020), with the readings of its ambiguities that docs/adsp.md lists.

Worker: trains without waiting (local SGD: :attr:`local_steps`); after every mini-batch it commits
(pushes its accumulated update, pulls the global model: one blocking round trip, its ``O_i``) once
``max(floor_s, gamma_s / dC_i - O_i)`` seconds have passed since its last commit ended; ``dC_i`` is
the commit rate the scheduler last pushed to it (before the first, ``fixed_rate`` or 1).  The PS pushes
rates to every worker at once (:mod:`rog.runtime.rate_broadcast`); at a search-window boundary each
worker restarts its timer, and a window is judged only once every worker has committed
``MIN_WINDOW_COMMITS`` times at its rate (:meth:`window_ready`).

Parameter server: asynchronous, no gate (``W -= U_i / M``: the runtime's 1/W weight is the paper's
global learning rate 1/M); it counts each worker's commits ``c_i`` (:meth:`observe`).

Scheduler (:meth:`schedule`, on the PS's clock since training started): every check period
``gamma_s`` the catch-up rule sets ``dC_i = clip(max(c) + k - c_i, 1, 2k)`` (``mode="code"``: ``k``
for everyone, as the released code); ``k`` comes from the online search of
:class:`~rog.policies.adsp_search.CommitRateSearch` (one per ``epoch_s``, windows of ``window_s``,
reward from the global model's loss) or is ``fixed_rate``.  ``mode="code"`` also pauses every worker
at its next commit after a window boundary until all have committed (the released ``allStop``), and
re-runs the search when the global loss rises by ``research_rise`` or more between two checkpoints.
Every decision is returned as a record (logged by the PS as a ``schedule`` event).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from rog.errors import ConfigError
from rog.options import check_choices, field_flag, option

from .adsp_search import SEARCH_MODES, CommitRateSearch, catch_up, commit_interval_s
from .base import CommitView, Policy, ServerView, TransferReport, TransmitPlan, WorkerView, all_rows_plan

SCHEDULER_TICK_S = 0.1  # how often the PS calls schedule()
MIN_WINDOW_COMMITS = 2  # a window is judged once every worker committed this often at the window's rate


FLAG_PREFIX = "adsp"  # run.py --adsp-<option>


def _number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


@dataclass(frozen=True)
class Options:
    """ADSP's scheduler options (``run.py --adsp-*``; ``config.yaml``'s ``policy_options``), checked here and
    nowhere else.  The four times are recorded multiplied by ``time_scale`` (``--adsp-time-scale``: a run
    scaled to this machine's compute time scales them all by one factor), as the policy uses them."""

    gamma_s: float = option(60.0, "check period Gamma in seconds (paper 60)", scaled=True)
    epoch_s: float = option(1200.0, "search epoch in seconds (paper 1200)", scaled=True)
    window_s: float = option(60.0, "search window in seconds (paper 60)", scaled=True)
    floor_s: float = option(10.0, "minimum commit interval in seconds (code 10)", scaled=True)
    time_scale: float = option(1.0, "multiplies every ADSP time above (e.g. this machine's compute time / the "
                                    "paper's)", scale=True)
    fixed_rate: Optional[int] = option(None, "fix the commit rate (commits per check period; default: online "
                                             "search)", flag="--adsp-rate")
    mode: str = option("paper", "paper (catch-up rule, no pauses) or code (the released code's variant)",
                       choices=SEARCH_MODES)
    target_loss: Optional[float] = option(None, "the reward's target loss (default: the first search window's "
                                                "last loss minus 10 %%)")
    loss_every_s: Optional[float] = option(None, "also log the global loss this often (seconds)")

    def __post_init__(self) -> None:
        flag = lambda name: field_flag(Options, name, FLAG_PREFIX)  # noqa: E731
        scale = self.time_scale
        if not (_number(scale) and scale > 0):
            raise ConfigError(f"{flag('time_scale')} must be a positive number, got {scale!r}; e.g. 0.1 for a run "
                              f"ten times faster")
        for name, what in (("gamma_s", "the check period Gamma; paper 60"), ("epoch_s", "the search epoch; paper 1200"),
                           ("window_s", "the search window; paper 60")):
            v = getattr(self, name)
            if not (_number(v) and v > 0):
                shown = f"{v / scale:g}" if _number(v) else repr(v)  # the flag's value, before the scale
                raise ConfigError(f"{flag(name)} ({name}) must be a positive number of seconds ({what}), got {shown}")
        if not (_number(self.floor_s) and self.floor_s >= 0):
            raise ConfigError(f"{flag('floor_s')} (floor_s) must be a number of seconds >= 0 (the minimum commit "
                              f"interval), got {self.floor_s!r}")
        check_choices(self, FLAG_PREFIX)
        rate = self.fixed_rate
        if rate is not None and (isinstance(rate, bool) or int(rate) != rate or rate < 1):
            raise ConfigError(f"{flag('fixed_rate')} (fixed_rate) must be an integer >= 1 (commits per check period), "
                              f"got {rate!r}; leave it out for the online search")
        if self.loss_every_s is not None and not (_number(self.loss_every_s) and self.loss_every_s > 0):
            raise ConfigError(f"{flag('loss_every_s')} (loss_every_s) must be a positive number of seconds, got "
                              f"{self.loss_every_s!r}")


DEFAULT_GAMMA_S, DEFAULT_EPOCH_S = Options.gamma_s, Options.epoch_s  # check period, search epoch (paper Sec. 5.1)
DEFAULT_WINDOW_S = Options.window_s  # online evaluation window: "e.g., 1 minute" (paper Sec. 4.2)
DEFAULT_FLOOR_S = Options.floor_s  # minimum commit interval (released code: MIN_TIME_TO_COMMIT)


class ADSP(Policy):
    """No waiting: timer-driven commits of local updates at equal rates, an online search of the rate."""

    name = "ADSP"
    default_threshold = 0
    threshold_in_label = False  # it has none (run ids keep the 0, as FLOWN's keep its 4)
    local_steps = True
    scheduler_period_s = SCHEDULER_TICK_S
    options = Options  # --adsp-*
    run_options = FLAG_PREFIX

    def __init__(self, threshold: int = 0, gamma_s: float = DEFAULT_GAMMA_S, epoch_s: float = DEFAULT_EPOCH_S,
                 window_s: float = DEFAULT_WINDOW_S, floor_s: float = DEFAULT_FLOOR_S, mode: str = Options.mode,
                 fixed_rate: int | None = None, points_per_window: int = 3, target_loss: float | None = None,
                 research_rise: float = 0.3, loss_every_s: float | None = None, time_scale: float = 1.0) -> None:
        if isinstance(threshold, bool) or threshold != 0:
            raise ValueError(f"ADSP has no staleness threshold; got threshold={threshold!r} (leave it at 0)")
        super().__init__(0)
        opts = Options(gamma_s=gamma_s, epoch_s=epoch_s, window_s=window_s, floor_s=floor_s, time_scale=time_scale,
                       fixed_rate=fixed_rate, mode=mode, target_loss=target_loss, loss_every_s=loss_every_s)
        self.gamma_s, self.epoch_s, self.window_s = float(opts.gamma_s), float(opts.epoch_s), float(opts.window_s)
        self.floor_s, self.mode, self.time_scale = float(opts.floor_s), opts.mode, float(opts.time_scale)
        self.fixed_rate = None if fixed_rate is None else int(fixed_rate)
        if not 0 < research_rise:
            raise ValueError(f"research_rise must be > 0, got {research_rise!r}")
        self.research_rise = float(research_rise)
        self.loss_every_s = None if loss_every_s is None else float(loss_every_s)
        self._next_loss_s = 0.0
        self.search = None if self.fixed_rate is not None else CommitRateSearch(
            self.window_s, self.epoch_s, points_per_window, mode, target_loss, min_commits=MIN_WINDOW_COMMITS)
        self.commits: dict[int, int] = {}  # c_i, counted on the PS from push reports
        self.delta_c: dict[int, int] = {}  # dC_i handed out with each pull
        self._next_checkpoint_s = self.gamma_s
        self._checkpoint_loss: float | None = None
        self._pause: dict[int, int] | None = None  # code mode: commit counts when the pause began
        self._window_base: dict[int, int] | None = None  # commit counts when the window's rates went out
        self._active: list[bool] = []  # the last tick's active workers

    def __repr__(self) -> str:
        what = f"fixed_rate={self.fixed_rate}" if self.fixed_rate else f"epoch_s={self.epoch_s}, window_s={self.window_s}"
        return f"ADSP(gamma_s={self.gamma_s}, {what}, floor_s={self.floor_s}, mode={self.mode!r})"

    @property
    def k(self) -> int:
        """The per-period commit rate in force (the searched or fixed one)."""
        return self.fixed_rate if self.search is None else self.search.k

    # ------------------------------------------------------------------ transfers: whole model, no gate
    def push_plan(self, view: WorkerView) -> TransmitPlan:
        """The whole accumulated update, no deadline."""
        return all_rows_plan(view.partition)

    def pull_plan(self, view: ServerView, worker: int, tensor_scale: np.ndarray) -> TransmitPlan:
        """Everything the worker has not received yet, no deadline."""
        return all_rows_plan(view.partition)

    def pull_ready(self, view: ServerView, worker: int) -> bool:
        """Always, except in ``code`` mode during a window-boundary pause for a worker that already committed."""
        if self._pause is None:
            return True
        active = [w for w in range(view.n_workers) if view.active[w]]
        if all(self.commits.get(w, 0) > self._pause.get(w, 0) for w in active):
            self._pause = None
            return True
        return self.commits.get(worker, 0) <= self._pause.get(worker, 0)

    def observe(self, report: TransferReport) -> None:
        """Count commits (on the PS: one push report per commit)."""
        if report.direction == "push":
            self.commits[report.worker] = self.commits.get(report.worker, 0) + 1

    # ------------------------------------------------------------------ worker: the commit timer
    def commit_due(self, view: CommitView) -> bool:
        """``since_commit_s >= max(floor_s, gamma_s / dC_i - O_i)``."""
        rate = view.control if view.control is not None else (self.fixed_rate or 1)
        return view.since_commit_s >= commit_interval_s(self.gamma_s, rate, view.last_commit_s, self.floor_s)

    def rates_pushed(self, busy: set[int]) -> None:
        """The PS pushed a window's rates now; ``busy`` workers are mid-commit, and that commit began
        before the new rate arrived: it does not count towards the window's commits."""
        if self._window_base is not None:
            self._window_base = {w: c + (1 if w in busy else 0) for w, c in self._window_base.items()}

    def window_commits(self, active=None) -> int | None:
        """The fewest commits any active worker (``active``: flags per worker; default: those of the last
        tick) has made since the window's rate reached it (None before the first push)."""
        if self._window_base is None:
            return None
        active = self._active if active is None else list(active)
        done = [self.commits.get(w, 0) - self._window_base.get(w, 0) for w in range(len(active)) if active[w]]
        return min(done) if done else None

    def window_ready(self, active=None) -> bool:
        """Has every active worker committed at least ``MIN_WINDOW_COMMITS`` times at the window's rate?
        Only then is a window judged (its last loss sample taken; the samples between wait in proportion)."""
        n = self.window_commits(active)
        return n is None or n >= MIN_WINDOW_COMMITS

    # ------------------------------------------------------------------ scheduler
    def _checkpoint_due(self, now_s: float) -> bool:
        return now_s >= self._next_checkpoint_s - 1e-9

    def _loss_due(self, now_s: float) -> bool:
        return self.loss_every_s is not None and now_s >= self._next_loss_s - 1e-9

    def wants_loss(self, now_s: float) -> bool:
        """A loss sample for the search's windows and epochs, at checkpoints, and every ``loss_every_s``."""
        if self._checkpoint_due(now_s) or self._loss_due(now_s):
            return True
        if self.search is None:
            return False
        if self.search.searching:
            return self.search.sample_due(now_s, self.window_commits())
        return self.search.epoch_due(now_s)

    def _rates(self, view: ServerView) -> None:
        W = view.n_workers
        counts = [self.commits.get(w, 0) for w in range(W)]
        if self.mode == "code":
            self.delta_c = {w: self.k for w in range(W)}
        else:
            self.delta_c = dict(enumerate(catch_up(counts, self.k, view.active)))

    def schedule(self, now_s: float, view: ServerView, loss: float | None) -> list[dict]:
        """Advance the search and the checkpoints to ``now_s``; returns the records to log."""
        recs: list[dict] = []
        self._active = [bool(a) for a in view.active]
        boundary = not self.delta_c  # the first tick hands out the starting rates
        if loss is not None and self._loss_due(now_s):
            recs.append(dict(event="loss", loss=loss, k=self.k))
            while self._next_loss_s <= now_s + 1e-9:
                self._next_loss_s += self.loss_every_s
        s = self.search
        if s is not None and loss is not None:
            before = (s.k, s.searching)
            if s.searching and s.sample_due(now_s, self.window_commits()):
                recs += s.add_loss(now_s, loss)
            elif not s.searching and s.epoch_due(now_s):
                recs += s.start_epoch(now_s, loss)
            boundary |= (s.k, s.searching) != before or any(r["event"] == "window" for r in recs)
        if self._checkpoint_due(now_s):
            while self._next_checkpoint_s <= now_s + 1e-9:
                self._next_checkpoint_s += self.gamma_s
            if (s is not None and self.mode == "code" and not s.searching and loss is not None
                    and self._checkpoint_loss is not None and loss >= (1 + self.research_rise) * self._checkpoint_loss):
                recs.append(dict(event="research", loss=loss, previous_loss=self._checkpoint_loss))
                recs += s.start_epoch(now_s, loss)
                boundary = True
            if loss is not None:
                self._checkpoint_loss = loss
            self._rates(view)
            counts = [self.commits.get(w, 0) for w in range(view.n_workers)]
            active = [c for c, a in zip(counts, view.active) if a] or counts
            recs.append(dict(event="checkpoint", k=self.k, commits=counts, loss=loss,
                             delta_c=[self.delta_c[w] for w in range(view.n_workers)],
                             spread=int(max(active) - min(active))))
        if boundary:
            self._rates(view)
            self._window_base = {w: self.commits.get(w, 0) for w in range(view.n_workers)}
            if self.mode == "code" and s is not None and any(r["event"] == "window" for r in recs):
                self._pause = {w: self.commits.get(w, 0) for w in range(view.n_workers)}
            recs.append(dict(event="rates", k=self.k, delta_c=[self.delta_c[w] for w in range(view.n_workers)],
                             searching=s is not None and s.searching))
        return recs
