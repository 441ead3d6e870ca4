"""LBL (Poseidon's layer-by-layer transfer): every layer is its own pull and push segment."""

from __future__ import annotations

from .plan import Plan, make_plan, per_layer
from .planner import Profile


def plan(profile: Profile) -> Plan:
    """One segment per layer each way."""
    L = profile.n_layers
    return make_plan(per_layer(L), per_layer(L, top_down=True), profile)
