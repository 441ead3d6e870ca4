"""Time composition of one iteration: compute and communication intervals -> overlapped and
non-overlapped seconds (the split of DynaComm's Figs. 6 and 7), plus the barrier stall."""

from __future__ import annotations


def union(intervals) -> list[tuple[float, float]]:
    """Sorted, disjoint union of ``(start, end)`` intervals (empty ones dropped)."""
    out: list[list[float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def length(intervals) -> float:
    """Total length of the union of ``intervals``."""
    return sum(b - a for a, b in union(intervals))


def intersect(xs, ys) -> list[tuple[float, float]]:
    """The intersection of two interval sets."""
    out = []
    for a, b in union(xs):
        for c, d in union(ys):
            lo, hi = max(a, c), min(b, d)
            if hi > lo:
                out.append((lo, hi))
    return out


def clip(intervals, lo: float, hi: float) -> list[tuple[float, float]]:
    """``intervals`` cut to ``[lo, hi]``."""
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]


def compose(compute, comm, stall, window: tuple[float, float]) -> dict:
    """Seconds of compute only, overlap, communication only and barrier stall inside ``window``
    (the caller keeps the stall intervals out of ``comm``)."""
    lo, hi = window
    c, m, s = clip(compute, lo, hi), clip(comm, lo, hi), clip(stall, lo, hi)
    both = length(intersect(c, m))
    return dict(compute_only_s=length(c) - both, overlap_s=both, comm_only_s=length(m) - both, stall_s=length(s))
