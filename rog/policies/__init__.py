"""Synchronisation policies: BSP, SSP, FLOWN, ROG behind one interface (see base.py)."""

from .base import Policy, ServerView, TransferReport, TransmitPlan, WorkerView
from .registry import POLICIES, make_policy

__all__ = ["Policy", "ServerView", "TransferReport", "TransmitPlan", "WorkerView", "POLICIES", "make_policy"]
