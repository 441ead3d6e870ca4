"""Intra-iteration transfer schedules (DynaComm and its baselines): which layer segments are pulled
before which forward layers, and pushed after which backward layers.

:data:`SCHEDULES` maps a ``--schedule`` name to its planner (``Profile -> Plan``); ``dynacomm`` and
``dynacomm-iter`` share the DP and differ in when they re-plan (:data:`REPLAN`).
"""

from __future__ import annotations

from . import dynacomm, ibatch, lbl, sequential
from .plan import Plan
from .planner import Profile

SCHEDULES = {
    "sequential": sequential.plan,
    "lbl": lbl.plan,
    "ibatch": ibatch.plan,
    "dynacomm": dynacomm.plan,
    "dynacomm-iter": dynacomm.plan,
}
REPLAN = {"sequential": None, "lbl": None, "ibatch": "epoch", "dynacomm": "epoch", "dynacomm-iter": "iteration"}

__all__ = ["SCHEDULES", "REPLAN", "Plan", "Profile"]
