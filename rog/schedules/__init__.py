"""Intra-iteration transfer schedules (DynaComm and its baselines): which layer segments are pulled
before which forward layers, and pushed after which backward layers.

:data:`SCHEDULES` (a :class:`rog.registry.Registry`) maps a ``--schedule`` name to its :class:`Schedule`:
the planner (``Profile -> Plan``; an entry is called as its planner) and when it re-plans (``None``:
never, ``"epoch"`` or ``"iteration"``; :data:`REPLAN` is that column).  ``dynacomm`` and
``dynacomm-iter`` share the DP and differ in when they re-plan.  A new schedule = its module here +
one line in :data:`SCHEDULES`; ``--schedule`` takes its choices from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rog.registry import Registry

from . import dynacomm, ibatch, lbl, sequential
from .plan import Plan
from .planner import Profile

REPLAN_PERIODS = (None, "epoch", "iteration")


@dataclass(frozen=True)
class Schedule:
    """A transfer schedule: ``plan(profile) -> Plan`` and its re-plan period (one of :data:`REPLAN_PERIODS`)."""

    plan: Callable[[Profile], Plan]
    replan: str | None = None

    def __post_init__(self) -> None:
        if self.replan not in REPLAN_PERIODS:
            raise ValueError(f"a schedule re-plans never (None), per 'epoch' or per 'iteration'; got {self.replan!r}")

    def __call__(self, profile: Profile) -> Plan:
        return self.plan(profile)


SCHEDULES: Registry = Registry("schedule", [
    ("sequential", Schedule(sequential.plan)),
    ("lbl", Schedule(lbl.plan)),
    ("ibatch", Schedule(ibatch.plan, "epoch")),
    ("dynacomm", Schedule(dynacomm.plan, "epoch")),
    ("dynacomm-iter", Schedule(dynacomm.plan, "iteration")),
])
REPLAN = SCHEDULES.view("replan")  # name -> None | "epoch" | "iteration"

__all__ = ["SCHEDULES", "REPLAN", "Schedule", "Plan", "Profile"]
