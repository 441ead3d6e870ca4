"""A transfer schedule's plan: pull segments (bottom-up), push segments (top-down) and its predicted times."""

from __future__ import annotations

from dataclasses import dataclass

from .planner import Profile, Segment, backward_time, forward_time


@dataclass(frozen=True)
class Plan:
    """Pull segments (bottom-up), push segments (top-down), predicted forward and backward seconds."""

    fwd_segments: tuple[Segment, ...]
    bwd_segments: tuple[Segment, ...]
    predicted_fwd_s: float
    predicted_bwd_s: float


def make_plan(fwd, bwd, profile: Profile) -> Plan:
    """A :class:`Plan` with its times predicted by the cost model."""
    return Plan(tuple(fwd), tuple(bwd), forward_time(fwd, profile), backward_time(bwd, profile))


def one_segment(n_layers: int) -> list[Segment]:
    """Everything in one transfer."""
    return [(0, n_layers - 1)]


def per_layer(n_layers: int, top_down: bool = False) -> list[Segment]:
    """One transfer per layer."""
    segs = [(i, i) for i in range(n_layers)]
    return segs[::-1] if top_down else segs
