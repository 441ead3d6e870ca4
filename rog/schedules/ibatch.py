"""iBatch: greedy batching of the forward pulls (its backward is LBL).

Forward-greedy pass: the first two segments ``1..D1`` and ``D1+1..D2`` are the pair with
``dt + PT(D1+1..D2) >= FC(1..D1)`` and the largest ``FC(1..D1)`` (ties: the smallest
``dt + PT(1..D1)``); then, with the last segment ``n+1..m``, the next boundary is the ``j > m``
with ``dt + PT(m+1..j) >= FC(n+1..m)`` and the smallest slack, until ``j = L`` (no such ``j``: ``L``;
no such pair at the start: one segment).  The mirror pass runs the same greedy on the reversed
layers; the plan with the lower predicted forward time is kept.
"""

from __future__ import annotations

import numpy as np

from .plan import Plan, make_plan, per_layer
from .planner import Profile, Segment, forward_time


def _greedy(pt: np.ndarray, fc: np.ndarray, dt: float) -> list[int]:
    """Segment ends (1-based, increasing, last = L) of the forward-greedy pass."""
    L = len(pt)
    PT = np.concatenate([[0.0], np.cumsum(pt)])
    FC = np.concatenate([[0.0], np.cumsum(fc)])
    best = None  # (key, d1, d2)
    for d1 in range(1, L):
        for d2 in range(d1 + 1, L + 1):
            if dt + PT[d2] - PT[d1] >= FC[d1]:
                key = (-FC[d1], dt + PT[d1])
                if best is None or key < best[0]:
                    best = (key, d1, d2)
    if best is None:
        return [L]
    ends = [best[1], best[2]]
    while ends[-1] < L:
        n, m = (ends[-2] if len(ends) > 1 else 0), ends[-1]
        need = FC[m] - FC[n]
        choice, slack = L, None
        for j in range(m + 1, L + 1):
            s = dt + PT[j] - PT[m] - need
            if s >= 0 and (slack is None or s < slack):
                choice, slack = j, s
        ends.append(choice)
    return ends


def _segments(ends: list[int]) -> list[Segment]:
    starts = [0] + ends[:-1]
    return [(a, b - 1) for a, b in zip(starts, ends)]


def forward_segments(profile: Profile) -> list[Segment]:
    """The lower-cost of the forward-greedy and the mirrored pass."""
    L = profile.n_layers
    fwd = _segments(_greedy(profile.pt, profile.fc, profile.dt_s))
    rev_ends = _greedy(profile.pt[::-1], profile.fc[::-1], profile.dt_s)
    mirrored = sorted((L - b - 1, L - a - 1) for a, b in _segments(rev_ends))
    return min((fwd, mirrored), key=lambda s: forward_time(s, profile))


def plan(profile: Profile) -> Plan:
    """iBatch's forward segments, LBL's backward ones."""
    return make_plan(forward_segments(profile), per_layer(profile.n_layers, top_down=True), profile)
