"""Sequential: one pull before the forward pass, one push after the backward pass."""

from __future__ import annotations

from .plan import Plan, make_plan, one_segment
from .planner import Profile


def plan(profile: Profile) -> Plan:
    """One segment each way."""
    L = profile.n_layers
    return make_plan(one_segment(L), one_segment(L), profile)
