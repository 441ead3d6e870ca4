"""DynaComm: both segmentations from the dynamic programs of :mod:`rog.schedules.planner`."""

from __future__ import annotations

from .plan import Plan
from .planner import Profile, backward_dp, forward_dp


def plan(profile: Profile) -> Plan:
    """The optimal pull and push segments under the cost model (their DP values are the predictions)."""
    t_fwd, fwd = forward_dp(profile)
    t_bwd, bwd = backward_dp(profile)
    return Plan(tuple(fwd), tuple(bwd), t_fwd, t_bwd)
