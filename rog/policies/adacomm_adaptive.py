"""Adaptive ADACOMM (AdaComm: Wang and Joshi, SysML 2019), ADSP's baseline "ADACOMM": Fixed ADACOMM whose
period tau is re-chosen from the global model's loss as training goes.

Every ``period_s`` seconds of training (the interval T0 of AdaComm) the parameter server's scheduler reads
the global model's loss F_l and sets, for every worker,

    tau_l = max(1, ceil(sqrt(F_l / F_0) * tau_0))          when F_l < F_{l-1}  (AdaComm's rule at a fixed lr)
    tau_l = max(1, ceil(shrink * tau_{l-1}))                otherwise

``tau_0`` is the threshold (default 40, the ADSP authors' tau) and F_0 the loss at the scheduler's first
tick.  The second line is how ADSP's paper describes the ADACOMM it ran ("if the loss does not decrease, it
simply multiplies tau with a constant"); the paper gives no constant, so ``shrink`` (default 0.5) is this
toolkit's choice, stated as such (``docs/adsp.md``).

The new tau reaches every worker at once as a pushed control value (:mod:`rog.runtime.rate_broadcast`,
no timer restart) and with every later pull; a worker uses the tau in force at each local step.  Workers
may switch at different commits by one delivery latency; the barrier counts commits, so it holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rog.errors import ConfigError
from rog.options import flag_of, option

from .adacomm import ADACOMM
from .base import CommitView, ServerView

DEFAULT_PERIOD_S = 10.0  # T0, in seconds of training: an assumption scaled to this toolkit's runs of minutes
DEFAULT_SHRINK = 0.5  # tau's factor when the loss did not decrease (the paper says "a constant")
TICK_S = 0.5  # the scheduler's tick: the first reads F_0 (close to the start), then one read per period
FLAG_PREFIX = "adacomm"  # run.py --adacomm-<option>; config.yaml's ``adacomm`` entry (rog.options)


@dataclass(frozen=True)
class Options:
    """Adaptive ADACOMM's options (``run.py --adacomm-period-s``, ``--adacomm-shrink``; ``config.yaml``'s
    ``adacomm``), checked here and nowhere else."""

    period_s: float = option(DEFAULT_PERIOD_S, "re-choose tau from the global loss every this many seconds (AdaComm's "
                                               "T0, scaled: the papers give none for this setting)")
    shrink: float = option(DEFAULT_SHRINK, "tau's factor when the loss did not fall (ADSP's paper says only 'a constant')")

    def __post_init__(self) -> None:
        if not (isinstance(self.period_s, (int, float)) and self.period_s > 0 and math.isfinite(self.period_s)):
            raise ConfigError(f"{flag_of(FLAG_PREFIX, 'period_s')} (period_s, AdaComm's interval T0) must be a positive "
                              f"number of seconds, got {self.period_s!r}; e.g. {DEFAULT_PERIOD_S:g}")
        if not (isinstance(self.shrink, (int, float)) and 0 < self.shrink < 1):
            raise ConfigError(f"{flag_of(FLAG_PREFIX, 'shrink')} (shrink, tau's factor when the loss did not fall) must "
                              f"lie strictly between 0 and 1, got {self.shrink!r}; e.g. {DEFAULT_SHRINK:g}")


class AdaptiveADACOMM(ADACOMM):
    """Fixed ADACOMM with tau re-chosen every ``period_s`` from the global loss (AdaComm's square-root rule)."""

    name = "ADAPTIVE_ADACOMM"
    default_threshold = 40  # tau_0
    run_options = FLAG_PREFIX  # config.yaml's entry of its Options (flags: rog.experiment.sync_options)
    options = Options

    def __init__(self, threshold: int = 40, period_s: float = DEFAULT_PERIOD_S, shrink: float = DEFAULT_SHRINK) -> None:
        super().__init__(threshold)
        opts = Options(period_s, shrink)  # the checks (ConfigError, a ValueError, naming the flag)
        self.period_s, self.shrink = float(opts.period_s), float(opts.shrink)
        self.scheduler_period_s = min(TICK_S, self.period_s)
        self.tau_now = self.tau  # tau in force (tau_0 until the first re-choice)
        self.f0: float | None = None
        self.f_prev: float | None = None
        self._next_s = 0.0  # when the next loss is read (the first tick reads F_0)

    def next_tau(self, loss: float) -> int:
        """tau after a loss reading ``loss`` (the rule in the module docstring); updates the state."""
        if self.f0 is None:
            self.f0 = self.f_prev = float(loss)
            return self.tau_now
        if loss < self.f_prev:
            tau = math.ceil(math.sqrt(max(loss, 0.0) / self.f0) * self.tau) if self.f0 > 0 else 1
        else:
            tau = math.ceil(self.shrink * self.tau_now)
        self.f_prev = float(loss)
        self.tau_now = max(1, int(tau))
        return self.tau_now

    # ------------------------------------------------------------------ worker side
    def commit_due(self, view: CommitView) -> bool:
        """After every tau local steps, tau the latest the scheduler pushed (tau_0 before any)."""
        tau = self.tau if view.control is None else max(1, int(round(view.control)))
        return view.steps_since_commit >= tau

    # ------------------------------------------------------------------ parameter-server side
    def wants_loss(self, now_s: float) -> bool:
        """The first tick (F_0), then once per ``period_s``."""
        return now_s >= self._next_s - 1e-9

    def schedule(self, now_s: float, view: ServerView, loss: float | None) -> list[dict]:
        """A ``period`` record with the new tau for every worker (``delta_c``) at each loss reading."""
        if loss is None or now_s < self._next_s - 1e-9:
            return []
        self._next_s = now_s + self.period_s
        first = self.f0 is None
        previous = self.f_prev
        tau = self.next_tau(float(loss))
        return [dict(event="period", loss=float(loss), previous_loss=previous, k=tau,
                     reason="start" if first else ("fell" if loss < previous else "did not fall"),
                     delta_c=[float(tau)] * view.n_workers)]

    def commit_control(self, worker: int) -> float | None:
        """tau in force, also handed with every pull (a worker that missed a push gets it there)."""
        return float(self.tau_now) if self.f0 is not None else None
