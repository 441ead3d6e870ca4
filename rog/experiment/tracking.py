"""Does communication time track the replayed bandwidth?  The emulated testbed's acceptance check.

For every transfer (a worker's push on its uplink, or its pull on its downlink) the *ideal* time is
what its bytes take on the rate the replay log says was in force from the transfer's start on:
the rate is piecewise constant (each logged rate holds until the next entry, the last one until
the end), so the ideal time solves ``integral_{t}^{t + x} rate = bits`` exactly
(:func:`transfer_time_s`).  It uses the transfer's start and size, never its measured duration,
so the comparison is not circular (dividing the bytes by the mean rate *over the measured
interval* would be).

Statistic (:func:`bandwidth_tracking`): Pearson and Spearman correlation between measured and
ideal durations over every complete, uncut transfer of every worker (BSP never cuts; a cut
transfer's duration is its deadline, not the link), plus the median of measured / ideal (1 =
the link delivered exactly the replayed rate; > 1 = protocol and TCP overheads, queueing).
Bytes are the event record's frame bytes times :data:`WIRE_FACTOR` (Ethernet + IP + TCP headers
of full segments on a 1500-byte MTU veth, what ``tbf`` counts).  Rates below the shapers' floor
``MIN_RATE_MBIT`` count at the floor, as ``tc`` applies them.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from rog.testbed.tc import FRAME_BYTES, MIN_RATE_MBIT

__all__ = ["WIRE_FACTOR", "REPLAY_LOG_HEADER", "read_replay_log", "transfer_time_s", "correlations",
           "TrackingResult", "tracking_from_arrays", "bandwidth_tracking", "replay_log_name"]

WIRE_FACTOR = FRAME_BYTES / 1448  # wire bytes per payload byte: 1514-byte frames carrying 1448-byte TCP segments
REPLAY_LOG_HEADER = ("t_s", "wall_time", "rate_mbit")
_KIND_OF = {"up": "push", "down": "pull"}


def replay_log_name(worker: int, direction: str) -> str:
    """``replay-w<k>-up.csv`` / ``replay-w<k>-down.csv`` (``k`` = the worker's event rank, from 0)."""
    if direction not in _KIND_OF:
        raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
    return f"replay-w{int(worker)}-{direction}.csv"


def read_replay_log(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``(t_s, rate_mbit)`` of a replay log (CSV ``t_s,wall_time,rate_mbit``); errors name the file and line."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows or tuple(c.strip() for c in rows[0][:3]) != REPLAY_LOG_HEADER:
        raise ValueError(f"{path}:1: expected the header 't_s,wall_time,rate_mbit'")
    t, r = [], []
    for i, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            t.append(float(row[0]))
            r.append(float(row[2]))
        except (ValueError, IndexError):
            raise ValueError(f"{path}:{i}: expected three numbers 't_s,wall_time,rate_mbit', got {row!r}") from None
    t_arr, r_arr = np.asarray(t), np.asarray(r)
    if t_arr.size and np.any(np.diff(t_arr) < 0):
        i = int(np.flatnonzero(np.diff(t_arr) < 0)[0]) + 3
        raise ValueError(f"{path}:{i}: t_s goes backwards; a replay log is in time order")
    return t_arr, r_arr


def transfer_time_s(change_t_s: Sequence[float], rate_mbit: Sequence[float], start_s, megabits,
                    floor_mbit: float = MIN_RATE_MBIT) -> np.ndarray:
    """Seconds to carry ``megabits`` starting at ``start_s`` on a piecewise-constant rate.

    Rate ``rate_mbit[k]`` holds on ``[change_t_s[k], change_t_s[k + 1])``, the last one for ever;
    rates are raised to ``floor_mbit``.  A start before the first change gives NaN (the rate is
    unknown there).  Example: 8 Mbit/s from 0, 1 Mbit/s from 1 s: 1 Mbit from 0.9 s takes
    0.1 s (0.8 Mbit) + 0.2 s = 0.3 s.
    """
    t = np.asarray(change_t_s, dtype=np.float64)
    if t.ndim != 1 or t.size == 0:
        raise ValueError("change_t_s must be a non-empty 1-D sequence of times")
    r = np.maximum(np.asarray(rate_mbit, dtype=np.float64), float(floor_mbit))
    if r.shape != t.shape:
        raise ValueError(f"rate_mbit has {r.size} entries for {t.size} change times; give one rate per change")
    if not floor_mbit > 0:
        raise ValueError(f"floor_mbit must be > 0, got {floor_mbit!r}")
    if np.any(np.diff(t) < 0):
        raise ValueError("change_t_s must be sorted")
    cum = np.concatenate(([0.0], np.cumsum(r[:-1] * np.diff(t))))  # Mbit carried up to each change
    s = np.atleast_1d(np.asarray(start_s, dtype=np.float64))
    bits = np.broadcast_to(np.asarray(megabits, dtype=np.float64), s.shape)
    if np.any(bits < 0):
        raise ValueError("megabits must be >= 0")
    k = np.searchsorted(t, s, side="right") - 1
    out = np.full(s.shape, np.nan)
    ok = k >= 0
    kk = k[ok]
    target = cum[kk] + r[kk] * (s[ok] - t[kk]) + bits[ok]
    j = np.searchsorted(cum, target, side="right") - 1
    j = np.maximum(j, kk)
    out[ok] = t[j] + (target - cum[j]) / r[j] - s[ok]
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), 1-based."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size)
    xs = x[order]
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i : j + 1]] = 0.5 * (i + j) + 1.0
        i = j + 1
    return ranks


def correlations(measured_s: Sequence[float], ideal_s: Sequence[float]) -> dict:
    """``n``, ``pearson``, ``spearman`` (average ranks for ties) and ``median_ratio`` (measured / ideal)."""
    m = np.asarray(measured_s, dtype=np.float64)
    i = np.asarray(ideal_s, dtype=np.float64)
    if m.shape != i.shape:
        raise ValueError(f"measured_s ({m.size}) and ideal_s ({i.size}) need the same length")
    keep = np.isfinite(m) & np.isfinite(i)
    m, i = m[keep], i[keep]
    out = {"n": int(m.size), "pearson": None, "spearman": None, "median_ratio": None}
    if m.size:
        out["median_ratio"] = float(np.median(m / np.where(i > 0, i, np.nan))) if np.any(i > 0) else None
    if m.size >= 3 and np.std(m) > 0 and np.std(i) > 0:
        out["pearson"] = float(np.corrcoef(m, i)[0, 1])
        rm, ri = _ranks(m), _ranks(i)
        if np.std(rm) > 0 and np.std(ri) > 0:
            out["spearman"] = float(np.corrcoef(rm, ri)[0, 1])
    return out


@dataclass
class TrackingResult:
    """Measured vs ideal transfer times of one direction over a run (see the module doc)."""

    direction: str  # 'up' (pushes) or 'down' (pulls)
    n: int  # transfers compared
    pearson: float | None
    spearman: float | None
    median_ratio: float | None  # median of measured / ideal
    mean_measured_s: float | None
    mean_ideal_s: float | None
    excluded: dict = field(default_factory=dict)  # why transfers were left out, with counts
    per_worker: dict = field(default_factory=dict)  # rank -> correlations()

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


def tracking_from_arrays(direction: str, workers: Sequence[int], start_s, duration_s, nbytes,
                         logs: dict[int, tuple[np.ndarray, np.ndarray]], wire_factor: float = WIRE_FACTOR,
                         excluded: dict | None = None) -> TrackingResult:
    """:class:`TrackingResult` from transfers (worker, start, measured duration, bytes) and each
    worker's replay log ``(t_s, rate_mbit)`` on the same clock."""
    w = np.asarray(workers, dtype=np.int64)
    s = np.asarray(start_s, dtype=np.float64)
    d = np.asarray(duration_s, dtype=np.float64)
    b = np.asarray(nbytes, dtype=np.float64)
    if not (w.shape == s.shape == d.shape == b.shape):
        raise ValueError("workers, start_s, duration_s and nbytes need the same length")
    ideal = np.full(s.shape, np.nan)
    excluded = dict(excluded or {})
    for k in np.unique(w):
        sel = w == k
        if int(k) not in logs or logs[int(k)][0].size == 0:
            excluded["no replay log"] = excluded.get("no replay log", 0) + int(sel.sum())
            continue
        t, r = logs[int(k)]
        ideal[sel] = transfer_time_s(t, r, s[sel], b[sel] * wire_factor * 8 / 1e6)
    before = int(np.sum(np.isnan(ideal) & np.isin(w, list(logs))))
    if before:
        excluded["started before the first replayed rate"] = before
    c = correlations(d, ideal)
    per = {f"w{int(k)}": correlations(d[w == k], ideal[w == k]) for k in np.unique(w)}
    keep = np.isfinite(ideal)
    return TrackingResult(direction, c["n"], c["pearson"], c["spearman"], c["median_ratio"],
                          float(d[keep].mean()) if keep.any() else None,
                          float(ideal[keep].mean()) if keep.any() else None, excluded, per)


def bandwidth_tracking(run_dir: str | Path, direction: str = "up", wire_factor: float = WIRE_FACTOR) -> TrackingResult:
    """Measured vs ideal push (``up``) or pull (``down``) times of every worker of a run folder.

    Reads ``events-w<k>.jsonl`` and ``replay-w<k>-<direction>.csv``; leaves out cut transfers,
    transfers that delivered nothing, and transfers that started before the replay's first rate.
    """
    from rog.runtime.events import read_events

    if direction not in _KIND_OF:
        raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
    kind = _KIND_OF[direction]
    run_dir = Path(run_dir)
    workers, starts, durs, nbytes, logs = [], [], [], [], {}
    excluded = {"cut by a deadline": 0, "nothing delivered": 0}
    for p in sorted(run_dir.glob("events-w*.jsonl")):
        k = int(p.stem.split("-w", 1)[1])
        log = run_dir / replay_log_name(k, direction)
        if log.exists():
            logs[k] = read_replay_log(log)
        _, recs = read_events(p, allow_partial_last_line=True)
        for rec in recs:
            if rec["kind"] != kind:
                continue
            if rec.get("cut"):
                excluded["cut by a deadline"] += 1
                continue
            if rec["bytes"] <= 0:
                excluded["nothing delivered"] += 1
                continue
            workers.append(k)
            starts.append(rec["t_s"])
            durs.append(rec["duration_s"])
            nbytes.append(rec["bytes"])
    if not workers:
        return TrackingResult(direction, 0, None, None, None, None, None, excluded, {})
    return tracking_from_arrays(direction, workers, starts, durs, nbytes, logs, wire_factor, excluded)
