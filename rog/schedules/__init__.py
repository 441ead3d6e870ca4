"""Intra-iteration transfer schedules (DynaComm and its baselines): which layer segments are pulled
before which forward layers, and pushed after which backward layers.

:data:`SCHEDULES` (a :class:`rog.registry.Registry`) maps a ``--schedule`` name to its :class:`Schedule`:
the planner (``Profile -> Plan``; an entry is called as its planner) and when it re-plans (``None``:
never, ``"epoch"`` or ``"iteration"``; :data:`REPLAN` is that column).  ``dynacomm`` and
``dynacomm-iter`` share the DP and differ in when they re-plan.  A new schedule = its module here +
one line in :data:`SCHEDULES`; ``--schedule`` takes its choices from it.  A schedule with options names
their frozen dataclass (:mod:`.options`) as its entry's ``options``: run.py's ``--schedule-<field>`` flags
and ``config.yaml``'s ``schedule`` entry are made from it (:mod:`rog.experiment.schedule_options`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

from rog.registry import Registry

from . import dynacomm, ibatch, lbl, sequential
from .options import EpochReplan
from .plan import Plan
from .planner import Profile

REPLAN_PERIODS = (None, "epoch", "iteration")


@dataclass(frozen=True)
class Schedule:
    """A transfer schedule: ``plan(profile) -> Plan``, its re-plan period (one of :data:`REPLAN_PERIODS`) and
    its options' dataclass (None: it has none)."""

    plan: Callable[[Profile], Plan]
    replan: Optional[str] = None
    options: Optional[type] = None
    run_options: ClassVar[str] = "schedule"  # the flags' prefix: --schedule-<field>
    options_group: ClassVar[str] = "schedule"  # run.py --help's group

    def __post_init__(self) -> None:
        if self.replan not in REPLAN_PERIODS:
            raise ValueError(f"a schedule re-plans never (None), per 'epoch' or per 'iteration'; got {self.replan!r}")

    def __call__(self, profile: Profile) -> Plan:
        return self.plan(profile)


SCHEDULES: Registry = Registry("schedule", [
    ("sequential", Schedule(sequential.plan)),
    ("lbl", Schedule(lbl.plan)),
    ("ibatch", Schedule(ibatch.plan, "epoch", EpochReplan)),
    ("dynacomm", Schedule(dynacomm.plan, "epoch", EpochReplan)),
    ("dynacomm-iter", Schedule(dynacomm.plan, "iteration")),
])
REPLAN = SCHEDULES.view("replan")  # name -> None | "epoch" | "iteration"

__all__ = ["SCHEDULES", "REPLAN", "Schedule", "Plan", "Profile"]
