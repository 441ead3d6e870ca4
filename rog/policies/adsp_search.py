"""ADSP's scheduler pieces (Hu, Wang, Wu, AAAI 2020): commit interval, catch-up rule, reward, rate search.

All pure functions and one state machine driven by the caller's clock; :mod:`rog.policies.adsp`
wires them into the policy interface.

* :func:`commit_interval_s`: a worker commits when ``max(floor, Gamma / dC_i - O_i)`` seconds have
  passed since its last commit ended (Alg. 2, checked at mini-batch boundaries as the released code
  does; ``O_i`` is the last commit's blocking round trip).
* :func:`catch_up`: at every checkpoint ``C_target = max_i c_i + k`` and
  ``dC_i = clip(C_target - c_i, 1, 2k)``, the per-period reading of the paper's cumulative target
  (see docs/adsp.md); the released code sends ``k`` to everyone (``code`` mode).
* :func:`fit_reward`: fit ``loss(t) = 1 / (a1^2 t + a2) + a3`` to a window's (t, loss) points with
  ``scipy.optimize.curve_fit`` and return ``r = a1^2 / (1 / (l* - a3) - a2)``, the reciprocal of the
  time at which the fitted curve reaches the target loss ``l*``.
* :class:`CommitRateSearch`: Alg. 1's one-directional online search over the per-period rate ``k``:
  each epoch starts at ``k = 1`` (paper) or the previous ``k`` (code), evaluates ``k`` and ``k + 1`` in
  consecutive windows and moves up while the larger rate earns the larger reward; the chosen ``k`` runs
  for the rest of the epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

SEARCH_MODES = ("paper", "code")


def commit_interval_s(gamma_s: float, delta_c: float, last_commit_s: float | None, floor_s: float) -> float:
    """Seconds between the end of one commit and the next: ``max(floor_s, gamma_s / delta_c - O_i)``."""
    if not (gamma_s > 0 and math.isfinite(gamma_s)):
        raise ValueError(f"gamma_s must be a positive number of seconds, got {gamma_s!r}")
    if not delta_c > 0:
        raise ValueError(f"delta_c (commits per check period) must be > 0, got {delta_c!r}")
    o = 0.0 if last_commit_s is None else max(0.0, float(last_commit_s))
    return max(float(floor_s), float(gamma_s) / float(delta_c) - o)


def catch_up(commits: Sequence[int], k: int, active: Sequence[bool] | None = None, k_max: int | None = None) -> list[int]:
    """Per-worker commit rates for the next check period: ``clip(max(c) + k - c_i, 1, k_max)`` (default
    ``k_max = 2k``); the maximum is over ``active`` workers (all when None)."""
    if int(k) != k or k < 1:
        raise ValueError(f"k (commits per check period) must be an integer >= 1, got {k!r}")
    c = np.asarray(commits, dtype=np.int64)
    mask = np.ones(c.shape, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    top = int(c[mask].max()) if mask.any() else int(c.max(initial=0))
    hi = 2 * int(k) if k_max is None else int(k_max)
    return [int(min(max(top + int(k) - int(ci), 1), hi)) for ci in c]


def loss_curve(t, a1: float, a2: float, a3: float):
    """The paper's SGD loss model ``1 / (a1^2 t + a2) + a3``."""
    return 1.0 / (a1 * a1 * np.asarray(t, dtype=float) + a2) + a3


@dataclass(frozen=True)
class RewardFit:
    """One window's fit: parameters, the reward and whether the fit is usable."""

    reward: float  # 1 / (time at which the fitted curve reaches the target); nan when unusable
    a1: float
    a2: float
    a3: float
    ok: bool
    reason: str = ""


def fit_reward(t_s: Sequence[float], loss: Sequence[float], target_loss: float) -> RewardFit:
    """Fit the paper's curve to ``(t_s, loss)`` (three or more points) and score it against ``target_loss``."""
    t = np.asarray(t_s, dtype=float)
    y = np.asarray(loss, dtype=float)
    nan = float("nan")
    if t.shape != y.shape or t.size < 3:
        return RewardFit(nan, nan, nan, nan, False, f"need >= 3 (t, loss) points, got {t.size}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        return RewardFit(nan, nan, nan, nan, False, "non-finite points")
    import warnings

    from scipy.optimize import OptimizeWarning, curve_fit

    span = float(y.max() - y.min())
    a3_0 = float(y.min()) - max(0.5 * span, 1e-3)
    first, last = 1.0 / (y[0] - a3_0), 1.0 / (y[-1] - a3_0)  # 1/(l - a3) is linear in t: a1^2 t + a2
    dt = max(float(t[-1] - t[0]), 1e-9)
    slope = max((last - first) / dt, 1e-9)
    p0 = (math.sqrt(slope), first - slope * float(t[0]), a3_0)
    try:
        with warnings.catch_warnings():  # three points, three parameters: no covariance, by design
            warnings.simplefilter("ignore", OptimizeWarning)
            (a1, a2, a3), _ = curve_fit(loss_curve, t, y, p0=p0, maxfev=20000)
    except (RuntimeError, ValueError, FloatingPointError) as e:
        return RewardFit(nan, nan, nan, nan, False, f"curve_fit failed: {e}"[:200])
    a1, a2, a3 = float(a1), float(a2), float(a3)
    return _scored(a1, a2, a3, target_loss)


def _scored(a1: float, a2: float, a3: float, target_loss: float) -> RewardFit:
    reward, ok, reason = reward_of(a1, a2, a3, target_loss)
    return RewardFit(reward, a1, a2, a3, ok, reason)


def reward_of(a1: float, a2: float, a3: float, target_loss: float) -> tuple[float, bool, str]:
    """``(r, ok, reason)`` with ``r = a1^2 / (1 / (l* - a3) - a2)``; unusable (nan) when the fitted
    curve never reaches ``l*`` (``l* <= a3``, or not decreasing) or reached it before t = 0."""
    nan = float("nan")
    if not all(math.isfinite(v) for v in (a1, a2, a3, target_loss)):
        return nan, False, "non-finite parameters"
    if a1 * a1 <= 0:
        return nan, False, "flat fit (a1 = 0)"
    if target_loss <= a3:
        return nan, False, f"target loss {target_loss:.4g} at or below the fitted floor a3 = {a3:.4g}"
    denom = 1.0 / (target_loss - a3) - a2
    if denom <= 0:
        return nan, False, "the fitted curve is below the target already at t = 0"
    return a1 * a1 / denom, True, ""


@dataclass
class Window:
    """One online evaluation of rate ``k``: loss samples from ``start_s`` for ``length_s``."""

    k: int
    start_s: float
    points: list[tuple[float, float]] = field(default_factory=list)
    fit: RewardFit | None = None


class CommitRateSearch:
    """Alg. 1 as a state machine on the caller's clock (seconds since training started).

    Call :meth:`sample_due` to learn whether a loss sample is wanted now, :meth:`add_loss` with it,
    and read :attr:`k`.  Windows of ``window_s`` take ``points_per_window`` evenly spaced samples
    (the first at the window's start; a boundary sample ends one window and starts the next).
    ``mode="paper"``: each comparison runs two fresh windows (Alg. 1's recursion evaluates ``k + 1``
    again as the next pair's first), every epoch starts at ``k = 1`` (Alg. 1: ``C <- max_i c_i + 1``);
    ``mode="code"`` (the released code): a winning ``k + 1``'s reward is reused, later epochs start
    from ``k_prev``.  In both, a window whose fit is unusable is measured again (same ``k``, a fresh
    window): it never hands the comparison to the other rate.  :meth:`add_loss` returns the records to log.
    """

    def __init__(self, window_s: float, epoch_s: float, points_per_window: int = 3, mode: str = "paper",
                 target_loss: float | None = None, target_drop: float = 0.1, k_start: int = 1,
                 min_commits: int = 2) -> None:
        if mode not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {SEARCH_MODES}, got {mode!r}")
        if not (window_s > 0 and math.isfinite(window_s)):
            raise ValueError(f"window_s must be a positive number of seconds, got {window_s!r}")
        if not (epoch_s > 0 and math.isfinite(epoch_s)):
            raise ValueError(f"epoch_s must be a positive number of seconds, got {epoch_s!r}")
        if int(points_per_window) != points_per_window or points_per_window < 3:
            raise ValueError(f"points_per_window must be an integer >= 3 (three parameters), got {points_per_window!r}")
        if not 0 <= target_drop < 1:
            raise ValueError(f"target_drop must lie in [0, 1), got {target_drop!r}")
        self.window_s, self.epoch_s = float(window_s), float(epoch_s)
        self.min_commits = int(min_commits)  # commits per worker at the window's rate before it is judged
        self.points = int(points_per_window)
        self.mode = mode
        self.target_loss = None if target_loss is None else float(target_loss)
        self.target_drop = float(target_drop)
        self.k = int(k_start)
        self.epoch = 0
        self.searching = True
        self.window: Window | None = None
        self._pair: list[Window] = []  # windows of the comparison under way (one or two)
        self._carry: Window | None = None  # code mode: the previous pair's winner, reused
        self.history: list[Window] = []
        self.decisions: list[tuple[int, float, int]] = []  # (epoch, time chosen, k)
        self.remeasured = 0  # windows measured again because their fit was unusable
        self._start_window(self.k, 0.0)

    # ---------------------------------------------------------------- clock
    def next_sample_s(self) -> float | None:
        """When the next loss sample is wanted (None: not searching)."""
        if not self.searching or self.window is None:
            return None
        step = self.window_s / (self.points - 1)
        return self.window.start_s + step * len(self.window.points)

    def sample_due(self, now_s: float, commits: int | None = None) -> bool:
        """Is a loss sample wanted at ``now_s``?  With ``commits`` (the fewest commits any worker has made at
        the window's rate) sample ``i`` of ``points - 1`` also waits until ``commits >= ceil(i x
        min_commits / (points - 1))``: the last one (which judges the window) until every worker committed
        ``min_commits`` times, the ones between in proportion (a sample between two commits of a worker
        would repeat the previous loss: the global model changes only at commits)."""
        nxt = self.next_sample_s()
        if nxt is None or now_s < nxt - 1e-9:
            return False
        i = len(self.window.points)
        return commits is None or i == 0 or commits >= math.ceil(i * self.min_commits / (self.points - 1))

    def epoch_due(self, now_s: float) -> bool:
        """Has the next epoch begun (time for a new search)?"""
        return now_s >= (self.epoch + 1) * self.epoch_s - 1e-9

    # ---------------------------------------------------------------- transitions
    def _start_window(self, k: int, now_s: float) -> None:
        self.k = int(k)
        self.window = Window(self.k, float(now_s))

    def start_epoch(self, now_s: float, loss: float | None = None) -> list[dict]:
        """Begin a new search at ``now_s`` (epoch boundary, or a forced re-search)."""
        self.epoch = max(self.epoch + 1, int(now_s // self.epoch_s))
        k0 = 1 if self.mode == "paper" else self.k  # Alg. 1: C <- max_i c_i + 1 (a rate of 1); code: warm start
        self.searching = True
        self._pair, self._carry = [], None
        self._start_window(k0, now_s)
        recs = [dict(event="search_start", epoch=self.epoch, k=self.k)]
        if loss is not None:
            recs += self.add_loss(now_s, loss)
        return recs

    def add_loss(self, now_s: float, loss: float) -> list[dict]:
        """One loss sample of the global model at ``now_s``; returns records (window results, decisions)."""
        if not self.searching or self.window is None:
            return []
        self.window.points.append((float(now_s), float(loss)))
        if len(self.window.points) < self.points:
            return []
        w = self.window
        if self.target_loss is None:  # the first window's last loss minus target_drop, fixed for the run
            self.target_loss = (1.0 - self.target_drop) * w.points[-1][1]
        w.fit = fit_reward([p[0] for p in w.points], [p[1] for p in w.points], self.target_loss)
        self.history.append(w)
        recs = [dict(event="window", epoch=self.epoch, k=w.k, reward=_num(w.fit.reward), fit_ok=w.fit.ok,
                     a1=_num(w.fit.a1), a2=_num(w.fit.a2), a3=_num(w.fit.a3), target_loss=self.target_loss,
                     times_s=[p[0] for p in w.points], losses=[p[1] for p in w.points], reason=w.fit.reason,
                     held_s=max(0.0, float(now_s) - (w.start_s + self.window_s)))]
        if not w.fit.ok:  # an unusable fit decides nothing: measure the same rate again in a fresh window
            self.remeasured += 1
            recs[-1]["remeasure"] = True
            self._start_window(w.k, now_s)
            self.window.points.append((float(now_s), float(loss)))
            return recs
        self._pair.append(w)
        if len(self._pair) == 1:  # now evaluate k + 1
            self._start_window(w.k + 1, now_s)
            self.window.points.append((float(now_s), float(loss)))  # the boundary sample starts it
            return recs
        lo, hi = self._pair
        better = hi.fit.reward > lo.fit.reward  # both fits usable (an unusable one was measured again)
        recs[-1]["compared_with"] = lo.k
        if better:
            if self.mode == "code":
                self._pair = [hi]
                self._start_window(hi.k + 1, now_s)
            else:
                self._pair = []
                self._start_window(hi.k, now_s)
            self.window.points.append((float(now_s), float(loss)))
            return recs
        self.k = lo.k
        self.searching = False
        self.window = None
        self._pair = []
        self.decisions.append((self.epoch, float(now_s), self.k))
        recs.append(dict(event="decision", epoch=self.epoch, k=self.k))
        return recs


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None
