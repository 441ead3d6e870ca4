"""A training iteration under a transfer schedule: forward (gated), backward (streamed push), the
gate, and a pull that overlaps the next forward pass; profiling and re-planning.

Planning (:mod:`rog.schedules.profiler`): ``lbl``'s segments need no profile; the planned schedules
run their first, cold iteration as Sequential (one segment each way, not profiled), then profile
warm iterations with one segment per layer; ``ibatch`` and ``dynacomm`` plan after the profiling
iterations and at each epoch start from the per-layer medians of the warm iterations since their
last plan; ``dynacomm-iter`` plans every iteration from the last iteration's profile and the moving
average of the measured goodput.  A per-epoch plan's link estimate (goodput and per-transfer
overhead) also comes from its own epoch: the measured transfers are cleared at each plan, so a change
of the link is followed at the next epoch start.  Every plan's predicted times follow the latest
profile.  Both plans are made after the push's last acknowledgement and before the gate (the forward
plan shapes the pull that follows): planning is *not* hidden behind the push as the paper's
idle-event trigger does, it lengthens the iteration by its cost, which the ``overlap`` record logs as
``plan_s``.

Under per-layer pacing (``pacer``, :mod:`rog.schedules.pacing`) each pass paces to the engine's
``compute_target_s``: the hooks sleep each layer's share right after it computes, so the profile and
the plans see the paced (slower device's) compute, and the push's segments leave as the paced
backward pass completes them.

Each iteration logs an ``overlap`` record: forward and backward seconds, the compute-only,
overlapped and communication-only seconds and the barrier stall inside the iteration's window
(forward start to pull start), and the plan's predictions and segment counts.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from . import REPLAN, SCHEDULES
from .composition import compose
from .estimate import LinkEstimate
from .exchange import SegmentedExchange
from .grouping import group_layers
from .hooks import LayerHooks
from .plan import Plan, make_plan, per_layer
from .planner import Profile
from .profiler import ComputeProfile, first_plan_iteration, phase
from .sequential import plan as sequential_plan


class ScheduledTrainer:
    """Runs iterations of ``model`` with the optimizer ``opt`` (a :class:`~rog.optim.ROGOptimizer`) under ``schedule``."""

    def __init__(self, model, opt, schedule: str, sample_input, *, epoch_iterations: int = 100, pacer=None) -> None:
        if schedule not in SCHEDULES or schedule == "sequential":
            raise ValueError(f"schedule must be one of {', '.join(s for s in SCHEDULES if s != 'sequential')}, "
                             f"got {schedule!r} (sequential runs the plain engine)")
        if epoch_iterations < 1:
            raise ValueError(f"epoch_iterations must be >= 1, got {epoch_iterations!r}")
        self.model, self.opt, self.schedule = model, opt, schedule
        self.layers = group_layers(model, sample_input)
        self.pacer = pacer  # a rog.schedules.pacing.LayerPacer over these layers (None: unpaced)
        if pacer is not None and pacer.n_layers != len(self.layers):
            raise ValueError(f"the pacer paces {pacer.n_layers} layers, the model has {len(self.layers)}")
        self.hooks = LayerHooks(model, self.layers, pacer=pacer)
        self.exchange = SegmentedExchange(opt, self.hooks)
        self.link = LinkEstimate()
        self.epoch_iterations = int(epoch_iterations)
        L = len(self.layers)
        self.profile = Profile(np.zeros(L), np.zeros(L), np.zeros(L), np.zeros(L), 0.0)
        self.plan: Plan = SCHEDULES[schedule](self.profile) if REPLAN[schedule] is None else sequential_plan(self.profile)
        self.n = opt.engine.iteration
        self.k = 0  # iterations run by this trainer
        self.samples = ComputeProfile()
        self.segment_log: deque = deque(maxlen=2000)  # (iteration, direction, [(bytes, seconds), ...]): push segments in send order, pull arrival_points
        self.plan_log: deque = deque(maxlen=100)  # (iteration, the profile a plan was made from, the plan)
        self._fwd_plan: Plan | None = None
        self.last: dict = {}  # the last iteration's overlap record

    @property
    def n_layers(self) -> int:
        """L, the number of DynaComm layers of the model."""
        return len(self.layers)

    def settle(self) -> None:
        """Wait until the last pull is applied (before evaluating or saving the model, and before closing)."""
        self.exchange.wait_pull()

    def iteration(self, x, y, loss_fn) -> float:
        """One training iteration on batch ``(x, y)``; returns the loss."""
        n = self.n + 1
        self.k += 1
        warm = phase(self.k) != "cold"
        fwd_plan = self._fwd_plan  # the plan whose pull segments gate this forward pass (None: no pull before it)
        self.opt.zero_grad(set_to_none=False)  # autograd writes into the flat gradient buffer
        t_c0 = time.monotonic()
        if self.pacer is not None:
            self.pacer.begin_pass(self.opt.engine.compute_target_s or 0.0)
            self.pacer.begin_forward()
        self.hooks.begin_forward()
        loss = loss_fn(self.model(x), y)
        self.hooks.end_forward()
        t_fwd_end = time.monotonic()
        self.exchange.wait_pull()
        # the pull read here left at the end of iteration k - 1: the one after the cold iteration is the
        # parameter server's first serve (measured here: 84 ms for a 1.8 KB first segment, 3-4 ms later)
        pull_span = self._learn_pull(self.k > 1 and phase(self.k - 1) != "cold")
        fwd_spans, fwd_wait_s, fc = list(self.hooks.fwd_spans), self.hooks.fwd_wait_s, self.hooks.fc.copy()
        bwd_plan = self.plan
        self.exchange.start_push(n, bwd_plan.bwd_segments)
        t_bwd0 = time.monotonic()
        if self.pacer is not None:
            self.pacer.begin_backward()
        loss.backward()
        t_bwd_end = self.hooks.end_backward()
        self.exchange.wait_push()  # its segment times feed the next plan
        self.segment_log.append((n, "push", list(self.exchange.push_segment_times)))
        if warm:
            for nbytes, sec in self.exchange.push_segment_times:
                self.link.add("push", nbytes, sec)
            self.link.observe_iteration("push", *_totals(self.exchange.push_segment_times))
        t_plan0 = time.monotonic()
        replanned = self._replan(n, fc, self.hooks.bc.copy())
        plan_s = time.monotonic() - t_plan0
        slept_s = 0.0 if self.pacer is None else self.pacer.take_slept()
        times = self.exchange.finish(n, t_c0, t_bwd_end, self.plan.fwd_segments, slept_s)
        self._fwd_plan = self.plan
        compute = fwd_spans + [(t_bwd0, t_bwd_end)]
        comm = [(times["t_adm"], times["t_push_end"])] + ([pull_span] if pull_span else [])
        parts = compose(compute, comm, [(times["t_gate"], times["t_pull"])], (t_c0, times["t_pull"]))
        fwd_measured = None if pull_span is None else t_fwd_end - pull_span[0]
        self.last = dict(
            iteration=n, duration_s=times["t_pull"] - t_c0, fwd_s=t_fwd_end - t_c0, fwd_from_pull_s=fwd_measured,
            bwd_s=max(t_bwd_end, times["t_push_end"]) - t_bwd0, fwd_compute_s=float(fc.sum()),
            bwd_compute_s=t_bwd_end - t_bwd0, fwd_wait_s=fwd_wait_s,
            predicted_fwd_s=None if fwd_plan is None else float(fwd_plan.predicted_fwd_s),
            predicted_bwd_s=float(bwd_plan.predicted_bwd_s),
            fwd_segments=0 if fwd_plan is None else len(fwd_plan.fwd_segments), bwd_segments=len(bwd_plan.bwd_segments),
            replanned=replanned, plan_s=plan_s, dt_s=float(self.profile.dt_s), n_layers=self.n_layers, **parts)
        self.opt.engine._log("overlap", t_c0, schedule=self.schedule, **self.last)
        self.n = n
        return float(loss.detach())

    def _learn_pull(self, warm: bool = True):
        """The last pull's segment times into the link estimate (``warm``); returns its span (None: no pull yet)."""
        pts = self.exchange.pull_points
        if pts is None:
            return None
        self.segment_log.append((self.n + 1, "pull", list(pts)))
        if warm:
            for nbytes, sec in pts:
                self.link.add("pull", nbytes, sec)
            self.link.observe_iteration("pull", *_totals(pts))
            if self.exchange.pull_start_s is not None:
                self.link.add_pull_start(self.exchange.pull_start_s)
        self.exchange.pull_points = None
        return self.exchange.pull_span

    def _replan(self, n: int, fc: np.ndarray, bc: np.ndarray) -> bool:
        """Refresh the profile from this iteration's measurements; plan when the schedule's period says so
        (otherwise the plan keeps its segments and only its predictions follow the profile).  Returns
        whether it planned."""
        mode, b = REPLAN[self.schedule], self.exchange.layer_bytes
        if phase(self.k) == "cold":  # predictions only: the cold push's goodput, no overhead
            nbytes, sec = _totals(self.exchange.push_segment_times)
            per_s = b * (sec / nbytes) if nbytes > 0 and sec > 0 else np.zeros_like(b)
            self.profile = Profile(pt=per_s, fc=fc, bc=bc, gt=per_s, dt_s=0.0)
            segs = (per_layer(self.n_layers), per_layer(self.n_layers, top_down=True)) if mode else \
                (self.plan.fwd_segments, self.plan.bwd_segments)
            self.plan = make_plan(*segs, self.profile)
            return False
        self.samples.add(fc, bc)
        moving = mode == "iteration"
        self.profile = self._basis(moving, fc, bc)
        first = self.k == first_plan_iteration()
        due = mode is not None and (first or (phase(self.k) == "planned" and (
            mode == "iteration" or n % self.epoch_iterations == 0)))
        if mode is None:
            self.plan = SCHEDULES[self.schedule](self.profile)
        elif due:  # per epoch: from the warm iterations' medians
            basis = self._basis(moving, *(self.samples.median() if mode == "epoch" else (fc, bc)))
            self.plan = SCHEDULES[self.schedule](basis)
            self.plan_log.append((n, basis, self.plan))
            self.samples.clear()
            if mode == "epoch":  # the next plan profiles the link over its own epoch, as the compute
                self.link.clear_points()
        else:  # the segments in force, predicted on the fresh profile
            self.plan = make_plan(self.plan.fwd_segments, self.plan.bwd_segments, self.profile)
        return due

    def _basis(self, moving: bool, fc, bc) -> Profile:
        """A planning profile from per-layer compute ``fc``/``bc`` and the link estimate: goodput by
        regression, or its moving average (``moving``), the per-transfer overhead and the pull's start."""
        b = self.exchange.layer_bytes
        up = self.link.rate("push", moving)
        down = self.link.rate("pull", moving) if self.link.points["pull"] else up
        return Profile(pt=b / down, fc=fc, bc=bc, gt=b / up, dt_s=self.link.overhead_s(),
                       start_s=self.link.pull_start_s())

    def close(self) -> None:
        """Wait for the last pull and remove the hooks (the optimizer is closed by its owner)."""
        try:
            self.settle()
        finally:
            self.hooks.remove()


def _totals(points) -> tuple[float, float]:
    return float(sum(b for b, _ in points)), float(sum(s for _, s in points))
