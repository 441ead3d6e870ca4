"""Link cost per direction from measured segment transfers: ``seconds = dt_s + bytes / bytes_per_s``.

The per-transfer overhead ``dt_s`` is the intercept of a least-squares line of segment time on
segment bytes (clamped at 0), the slope gives the goodput; ``ewma`` keeps a moving average of the
goodput for per-iteration re-planning.  A pull is one transmission whose segments complete as its
frames arrive: :func:`arrival_points` turns its frame arrivals into points, and the time to its first
frame (the pull's start, once per pull) is kept apart (:meth:`LinkEstimate.pull_start_s`).
"""

from __future__ import annotations

from collections import deque

import numpy as np

DIRECTIONS = ("pull", "push")
START_WINDOW = 20  # pulls whose start times make the median


def arrival_points(arrivals) -> list[tuple[float, float]]:
    """Link points ``(bytes, seconds)`` of one pull from its frames ``(t_s, bytes, completes)`` in
    arrival order, ``completes`` telling whether the frame completed a segment.

    A point spans one completion to the next and holds the bytes of every frame that arrived in
    between, whichever segment their rows belong to: a frame often completes several small
    segments at once, and crediting its bytes to one of them (the others at 0 s) understates the
    goodput.  The clock starts at the first frame's arrival, so the transmission's start (the
    server's first chunk and the link's latency, once per pull, not per segment) and the first
    frame's bytes are left out.
    """
    arrivals = list(arrivals)
    if not arrivals:
        return []
    points, t_prev, nbytes = [], float(arrivals[0][0]), 0.0
    for t, b, completes in arrivals[1:]:
        nbytes += float(b)
        if completes:
            points.append((nbytes, float(t) - t_prev))
            t_prev, nbytes = float(t), 0.0
    return points


class LinkEstimate:
    """Measured (bytes, seconds) points per direction, their regression and a goodput moving average."""

    def __init__(self, window: int = 400, alpha: float = 0.3) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha!r}")
        self.alpha = float(alpha)
        self.points = {d: deque(maxlen=int(window)) for d in DIRECTIONS}
        self.ewma_bytes_per_s: dict[str, float | None] = {d: None for d in DIRECTIONS}
        self.pull_starts: deque = deque(maxlen=START_WINDOW)

    def add_pull_start(self, seconds: float) -> None:
        """One pull's time from its start to its first frame."""
        if np.isfinite(seconds) and seconds >= 0:
            self.pull_starts.append(float(seconds))

    def pull_start_s(self) -> float:
        """The pull's start: the median of the last :data:`START_WINDOW` measured (0 before any)."""
        return float(np.median(self.pull_starts)) if self.pull_starts else 0.0

    def clear_points(self) -> None:
        """Forget the measured transfers and pull starts (a per-epoch plan profiles its own epoch; the
        moving average is kept)."""
        for d in DIRECTIONS:
            self.points[d].clear()
        self.pull_starts.clear()

    def add(self, direction: str, nbytes: float, seconds: float) -> None:
        """One measured segment transfer."""
        if seconds > 0 and nbytes > 0:
            self.points[direction].append((float(nbytes), float(seconds)))

    def observe_iteration(self, direction: str, nbytes: float, seconds: float) -> None:
        """One iteration's goodput (all its segments' bytes over their busy time) into the moving average."""
        if seconds > 0 and nbytes > 0:
            r = nbytes / seconds
            old = self.ewma_bytes_per_s[direction]
            self.ewma_bytes_per_s[direction] = r if old is None else self.alpha * r + (1 - self.alpha) * old

    def fit(self, direction: str) -> tuple[float, float]:
        """``(dt_s, bytes_per_s)`` from the points (no spread in bytes: dt 0 and the mean goodput)."""
        pts = np.array(self.points[direction], dtype=np.float64).reshape(-1, 2)
        if len(pts) == 0:
            raise ValueError(f"no measured {direction} transfers yet")
        x, y = pts[:, 0], pts[:, 1]
        if len(pts) >= 3 and np.ptp(x) > 0.1 * x.mean():
            slope, intercept = np.polyfit(x, y, 1)
            if slope > 0:
                return max(0.0, float(intercept)), 1.0 / float(slope)
        return 0.0, float(x.sum() / y.sum())

    def overhead_s(self) -> float:
        """The per-transfer overhead: the mean of both directions' intercepts."""
        vals = [self.fit(d)[0] for d in DIRECTIONS if self.points[d]]
        return float(np.mean(vals)) if vals else 0.0

    def rate(self, direction: str, moving: bool) -> float:
        """Goodput in bytes/s: the moving average (``moving``) or the regression's slope."""
        if moving and self.ewma_bytes_per_s[direction] is not None:
            return float(self.ewma_bytes_per_s[direction])
        return self.fit(direction)[1]
