"""iBatch: greedy batching of the forward pulls (its backward is LBL), DynaComm's Algs. 1 and 2 as written.

A decision ``D`` lists the decomposition positions ``0 = D[0] < D[1] < ... < D[N] = L`` (1-based
layers; a segment is ``D[i-1]+1 .. D[i]``).  ``PT(a..b)`` and ``FC(a..b)`` sum the pull and forward
times of layers ``a..b``; ``dt`` is the per-transfer overhead.

* Alg. 1 (forward greedy): among the pairs ``D[1] < D[2] <= L`` with
  ``dt + PT(D[1]+1..D[2]) >= FC(1..D[1])``, the one with the largest ``FC(1..D[1])``, ties broken by
  the smallest ``dt + PT(1..D[1])``; then, with ``n, m`` the last two positions, the next is the
  ``x in [m+1, L]`` with ``dt + PT(m+1..x) >= FC(n+1..m)`` and the smallest slack
  ``dt + PT(m+1..x) - FC(n+1..m)``, until ``m = L``.
* Alg. 2 (backward greedy), from the top: among the pairs ``D[N-2] < D[N-1] < L`` with
  ``dt + PT(D[N-1]+1..L) >= FC(D[N-2]+1..D[N-1])``, the one with the largest
  ``FC(D[N-2]+1..D[N-1])``, ties broken by the smallest ``PT(D[N-1]+1..L)``; then, with ``n < m`` the
  first two positions, the one in front is the ``x in [0, n-1]`` with ``dt + PT(n+1..m) >= FC(x+1..n)``
  and the smallest slack ``dt + PT(n+1..m) - FC(x+1..n)``, until ``n = 0``.  In both the condition is
  the paper's: a segment's pull lasts at least the previous segment's compute.

The plan with the lower predicted forward time (:func:`rog.schedules.planner.forward_time`) is kept
(Alg. 1's on a tie).  Where the paper leaves a case open: no qualifying pair gives one segment
(``[0, L]``); no qualifying ``x`` ends the pass (Alg. 1: ``L``; Alg. 2: ``0``); a pair already
reaching the end (``D[2] = L``, ``D[N-2] = 0``) ends it (the ``repeat .. until`` is read as a
``while``); pairs still tied after the paper's two keys go to the smallest slack, then the shortest
new segment (the same rule as lines 13 of both).
"""

from __future__ import annotations

import numpy as np

from .plan import Plan, make_plan, per_layer
from .planner import Profile, Segment, _prefix, forward_time


def forward_greedy(pt, fc, dt: float) -> list[int]:
    """Alg. 1: the decision ``[0, D1, ..., L]`` (1-based positions)."""
    L = len(pt)
    PT, FC = _prefix(np.asarray(pt, float)), _prefix(np.asarray(fc, float))
    best = None  # (key, d1, d2)
    for d1 in range(1, L):
        for d2 in range(d1 + 1, L + 1):
            slack = dt + PT[d2] - PT[d1] - FC[d1]
            if slack >= 0:
                key = (-FC[d1], dt + PT[d1], slack, d2)
                if best is None or key < best[0]:
                    best = (key, d1, d2)
    if best is None:
        return [0, L]
    D = [0, best[1], best[2]]
    n, m = best[1], best[2]
    while m < L:
        need = FC[m] - FC[n]
        options = [(dt + PT[x] - PT[m] - need, x) for x in range(m + 1, L + 1) if dt + PT[x] - PT[m] >= need]
        j = min(options)[1] if options else L
        n, m = m, j
        D.append(m)
    return D


def backward_greedy(pt, fc, dt: float) -> list[int]:
    """Alg. 2: the decision ``[0, ..., D[N-1], L]`` (1-based positions), built from the top."""
    L = len(pt)
    PT, FC = _prefix(np.asarray(pt, float)), _prefix(np.asarray(fc, float))
    best = None  # (key, b, a): b = D[N-2] < a = D[N-1] < L
    for a in range(1, L):
        for b in range(0, a):
            slack = dt + PT[L] - PT[a] - (FC[a] - FC[b])
            if slack >= 0:
                key = (-(FC[a] - FC[b]), PT[L] - PT[a], slack, -b)
                if best is None or key < best[0]:
                    best = (key, b, a)
    if best is None:
        return [0, L]
    n, m = best[1], best[2]
    D = [n, m, L]
    while n > 0:
        pull = dt + PT[m] - PT[n]
        options = [(pull - (FC[n] - FC[x]), -x) for x in range(0, n) if pull >= FC[n] - FC[x]]
        j = -min(options)[1] if options else 0
        m, n = n, j
        D.insert(0, n)
    return D


def segments_of(decision: list[int]) -> list[Segment]:
    """0-based inclusive segments ``(first, last)`` of a decision ``[0, ..., L]``."""
    return [(a, b - 1) for a, b in zip(decision[:-1], decision[1:])]


def forward_segments(profile: Profile) -> list[Segment]:
    """The lower-cost of Alg. 1's and Alg. 2's candidates (Alg. 1's on a tie)."""
    cands = [segments_of(g(profile.pt, profile.fc, profile.dt_s)) for g in (forward_greedy, backward_greedy)]
    return min(cands, key=lambda s: forward_time(s, profile))


def plan(profile: Profile) -> Plan:
    """iBatch's forward segments, LBL's backward ones."""
    return make_plan(forward_segments(profile), per_layer(profile.n_layers, top_down=True), profile)
