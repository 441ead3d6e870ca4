"""Several transfer schedules in turn inside one run: a paired measurement.

Separate runs of each schedule differ by more than the schedules do when per-iteration compute
itself varies by 10-20 % (a loaded or virtualised machine).  :class:`PairedTrainer` runs the
schedules ``names`` in turn, ``block`` iterations each, in the same worker processes, from the same
profile and link estimate: the cold and profiling iterations are DynaComm's (one segment, then one
segment per layer), every epoch-planned schedule is planned from the same per-layer medians at the
same iterations, and ``dynacomm-iter`` re-plans from the last iteration whenever its turn comes.

The plan chosen at the end of iteration ``k`` shapes the pull that follows, iteration ``k+1``'s
forward gating and its push, so iteration ``k+1``'s window belongs to one schedule alone.  Only the
last iteration of each block is *measured* (:meth:`PairedTrainer.measured`): with ``block >= 2``
nothing of the previous schedule (a pull in flight, a slow peer at the barrier) reaches into it.
Every worker rotates at the same iteration numbers, so under BSP all of them run the same schedule.
"""

from __future__ import annotations

from . import REPLAN, SCHEDULES
from .plan import make_plan
from .profiler import first_plan_iteration
from .trainer import ScheduledTrainer

__all__ = ["PairedTrainer", "rotation_schedule", "is_measured"]


def rotation_schedule(k: int, names, block: int) -> str | None:
    """The schedule governing trainer iteration ``k`` (1-based) of a rotation over ``names`` in blocks of
    ``block`` iterations; None for the cold and profiling iterations."""
    f = first_plan_iteration()
    if k <= f:
        return None
    return tuple(names)[((k - f - 1) // block) % len(names)]


def is_measured(k: int, block: int) -> bool:
    """Whether trainer iteration ``k`` is the last of its block (the one a paired comparison reads)."""
    f = first_plan_iteration()
    return k > f and (k - f - 1) % block == block - 1


class PairedTrainer(ScheduledTrainer):
    """Runs the schedules ``names`` in turn, ``block`` iterations each, in one run (see the module)."""

    def __init__(self, model, opt, names, sample_input, *, block: int = 2, epoch_iterations: int = 100) -> None:
        names = tuple(names)
        bad = [s for s in names if s not in SCHEDULES]
        if bad or len(names) < 2 or len(set(names)) != len(names):
            raise ValueError(f"names must be two or more different schedules of {', '.join(SCHEDULES)}, got {names!r}")
        if int(block) != block or block < 1:
            raise ValueError(f"block must be an integer >= 1, got {block!r}")
        super().__init__(model, opt, "dynacomm", sample_input, epoch_iterations=epoch_iterations)
        self.names, self.block = names, int(block)
        self.plans: dict = {}

    def schedule_of(self, k: int) -> str | None:
        """The schedule governing this trainer's iteration ``k`` (None: cold or profiling)."""
        return rotation_schedule(k, self.names, self.block)

    def measured(self, k: int) -> bool:
        """Whether this trainer's iteration ``k`` is read by the paired comparison."""
        return is_measured(k, self.block)

    def iteration(self, x, y, loss_fn) -> float:
        """One iteration under the schedule whose turn it is; ``last`` gains ``schedule`` and ``measured``."""
        k = self.k + 1
        self.schedule = self.schedule_of(k) or "dynacomm"  # the profiling iterations are DynaComm's
        loss = super().iteration(x, y, loss_fn)
        self.last = dict(self.last, schedule=self.schedule_of(k), measured=self.measured(k))
        return loss

    def _replan(self, n: int, fc, bc) -> bool:
        f = first_plan_iteration()
        if self.k < f:  # cold and profiling: exactly as a DynaComm run
            self.schedule = "dynacomm"
            return super()._replan(n, fc, bc)
        self.samples.add(fc, bc)
        due = self.k == f or n % self.epoch_iterations == 0
        if due:  # every per-epoch (and fixed) schedule from the same per-layer medians
            epoch = self._basis(False, *self.samples.median())
            for s in self.names:
                if REPLAN[s] != "iteration":
                    self.plans[s] = SCHEDULES[s](epoch)
            self.plan_log.append((n, epoch, self.plans.get("dynacomm") or next(iter(self.plans.values()))))
            self.samples.clear()
        nxt = self.schedule_of(self.k + 1)
        moving = REPLAN[nxt] == "iteration"
        self.profile = self._basis(moving, fc, bc)
        if moving:
            self.plans[nxt] = SCHEDULES[nxt](self.profile)
        chosen = self.plans[nxt]
        self.plan = make_plan(chosen.fwd_segments, chosen.bwd_segments, self.profile)
        return due or moving
