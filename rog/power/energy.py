"""Energy over a real training interval: from power samples, or from the state timeline (the model).

Two ways to get joules for one device over ``[t0_s, t1_s]``:

* :func:`integrate_energy_j` integrates measured power samples (jtop, RAPL, NVML) with the
  trapezoid rule over the interval itself: the samples are joined linearly, the joined curve is
  cut at ``t0_s`` and ``t1_s`` (interpolated there), so the result is exact for piecewise-linear
  power with breakpoints at the sample times.  A gap longer than ``max_gap_s`` between samples
  (or between an interval end and the nearest sample) is an error rather than a silent guess;
  shorter edge gaps hold the nearest sample.
* :func:`model_energy_j` integrates the state-based model (docs/design.md#energy-model): the device's timeline of
  ``(start_s, end_s, state)`` intervals, each state at its profile's watts, clipped to the
  interval.  Time no interval covers (bookkeeping between logged events, before the first or after
  the last) is counted as ``idle``, at the profile's idle watts, which default to the stall watts:
  a device between logged events is waiting, and Table III's stall state is the measured "awake,
  not computing, not sending" power.

The original artifact multiplied checkpoint time by one device's average power; both functions
here integrate what each device actually did.  Every :class:`EnergyReport` names its source:
``jtop``, ``rapl``, ``nvml``, or ``model:<profile name>`` for the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence, Tuple

import numpy as np

from .sources import POWER_SOURCES, is_sensor

__all__ = [
    "SENSOR_SOURCES", "STATES", "EVENT_STATES", "STATE_PRIORITY",
    "PowerSamples", "EnergyReport",
    "check_intervals", "integrate_energy_j", "model_energy_j", "state_durations_s", "model_power_w",
    "timeline_from_events", "merge_by_priority", "resolve_watts",
    "report_from_samples", "report_from_timeline", "report_from_events",
]

SENSOR_SOURCES = tuple(n for n in POWER_SOURCES if is_sensor(n))  # measured sources (at import; checks use
# rog.power.sources.is_sensor, so a sensor registered later counts too); the model is "model:<profile name>"
STATES = ("compute", "communication", "stall", "idle")
# event kind (rog.runtime.events) -> state; eval tests a model on this device's CPU, so it computes
EVENT_STATES = {"compute": "compute", "eval": "compute", "push": "communication", "pull": "communication",
                "flush": "communication", "stall": "stall"}
STATE_PRIORITY = ("compute", "communication", "stall")  # merge_by_priority: first wins where states overlap

Interval = Tuple[float, float, str]  # typing.Tuple: evaluated at import, Python 3.8


# ---------------------------------------------------------------------------------------------
# samples


@dataclass(frozen=True)
class PowerSamples:
    """Power readings of one device: times (s), watts and the source label that produced them."""

    t_s: np.ndarray  # strictly increasing sample times (seconds on the run's clock)
    power_w: np.ndarray  # watts at those times
    source: str  # 'jtop', 'rapl', 'nvml' or 'model:<profile name>'

    def __post_init__(self) -> None:
        t, p = _check_samples(self.t_s, self.power_w)
        object.__setattr__(self, "t_s", t)
        object.__setattr__(self, "power_w", p)
        _check_source(self.source)

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[float]], source: str) -> "PowerSamples":
        """From ``(t_s, power_w)`` pairs."""
        arr = np.asarray(list(rows), dtype=np.float64).reshape(-1, 2)
        return cls(arr[:, 0], arr[:, 1], source)


def _check_samples(t_s, power_w) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(t_s, dtype=np.float64).ravel()
    p = np.asarray(power_w, dtype=np.float64).ravel()
    if t.shape != p.shape:
        raise ValueError(f"samples: {t.size} times but {p.size} power values; give one power per time")
    if t.size == 0:
        raise ValueError("samples: no power samples; the sampler wrote none (did it run over the interval?)")
    if not (np.isfinite(t).all() and np.isfinite(p).all()):
        raise ValueError("samples: times and powers must be finite numbers (found NaN or inf)")
    if t.size > 1 and not (np.diff(t) > 0).all():
        i = int(np.flatnonzero(np.diff(t) <= 0)[0])
        raise ValueError(f"samples: times must increase strictly; sample {i + 1} at {t[i + 1]!r} s "
                         f"does not follow sample {i} at {t[i]!r} s (sort them, drop duplicates)")
    if (p < 0).any():
        i = int(np.flatnonzero(p < 0)[0])
        raise ValueError(f"samples: power must be >= 0 W; sample {i} at t={t[i]!r} s reads {p[i]!r} W")
    return t, p


def _samples_arrays(samples) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(samples, PowerSamples):
        return samples.t_s, samples.power_w
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"samples must be PowerSamples or (t_s, power_w) pairs, got an array of shape {arr.shape}")
    return _check_samples(arr[:, 0], arr[:, 1])


def _check_window(t0_s: float, t1_s: float) -> tuple[float, float]:
    for name, v in (("t0_s", t0_s), ("t1_s", t1_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number of seconds, got {v!r}")
    if t1_s < t0_s:
        raise ValueError(f"the interval ends before it starts: t0_s={t0_s!r} > t1_s={t1_s!r} (swap them)")
    return float(t0_s), float(t1_s)


def integrate_energy_j(samples, t0_s: float, t1_s: float, max_gap_s: float | None = 1.0) -> float:
    """Joules over ``[t0_s, t1_s]`` from power samples (trapezoid over the linearly joined samples).

    ``samples``: :class:`PowerSamples` or ``(t_s, power_w)`` pairs, strictly increasing in time.
    The joined curve is cut at ``t0_s``/``t1_s`` (values interpolated there).  If the samples start
    after ``t0_s`` or end before ``t1_s`` by at most ``max_gap_s``, the nearest sample is held;
    any longer gap, inside or at an edge, raises ValueError (``max_gap_s=None`` bridges every gap).
    """
    t, p = _samples_arrays(samples)
    t0, t1 = _check_window(t0_s, t1_s)
    if max_gap_s is not None and not (isinstance(max_gap_s, (int, float)) and max_gap_s > 0):
        raise ValueError(f"max_gap_s must be a positive number of seconds or None, got {max_gap_s!r}")
    if t0 < t[0]:
        t, p = np.concatenate(([t0], t)), np.concatenate(([p[0]], p))
    if t1 > t[-1]:
        t, p = np.concatenate((t, [t1])), np.concatenate((p, [p[-1]]))
    if max_gap_s is not None and t.size > 1:
        widths = np.diff(t)
        inside = (t[:-1] < t1) & (t[1:] > t0)
        bad = np.flatnonzero(inside & (widths > max_gap_s))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"no power sample for {widths[i]:.3f} s between t={t[i]:.3f} s and t={t[i + 1]:.3f} s "
                f"(inside [{t0:g}, {t1:g}] s, longer than max_gap_s={max_gap_s:g}); the sampler did not cover "
                f"the interval: integrate a covered interval or pass a larger max_gap_s")
    if t1 == t0:
        return 0.0
    inner = (t > t0) & (t < t1)
    tt = np.concatenate(([t0], t[inner], [t1]))
    pp = np.concatenate(([np.interp(t0, t, p)], p[inner], [np.interp(t1, t, p)]))
    return float(np.sum(0.5 * (pp[1:] + pp[:-1]) * np.diff(tt)))


# ---------------------------------------------------------------------------------------------
# the state-based model


def resolve_watts(watts) -> dict[str, float]:
    """``{state: watts}`` from a mapping, a :class:`~rog.testbed.profiles.PowerFigures` or a DeviceProfile.

    ``idle`` defaults to the stall watts when absent.
    """
    if hasattr(watts, "watts") and callable(watts.watts):
        watts = watts.watts()
    if not isinstance(watts, Mapping):
        raise ValueError(f"watts must map state -> W (or be a DeviceProfile), got {type(watts).__name__}")
    out = {}
    for state, w in watts.items():
        if state not in STATES:
            raise ValueError(f"watts: unknown state {state!r}; states are {', '.join(STATES)}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"watts[{state!r}] must be a finite number of watts >= 0, got {w!r}")
        out[state] = float(w)
    missing = [s for s in STATE_PRIORITY if s not in out]
    if missing:
        raise ValueError(f"watts misses state(s) {missing}; give compute, communication and stall watts")
    out.setdefault("idle", out["stall"])
    return out


def check_intervals(intervals: Iterable[Sequence], states: Iterable[str] = STATES) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Validate a state timeline; returns ``(starts, ends, states)``.

    Each interval is ``(start_s, end_s, state)`` with ``start_s <= end_s``; intervals must be sorted
    by start and must not overlap (touching is fine).  Errors name the interval(s) and the fix.
    """
    known = tuple(states)
    items = list(intervals)
    starts = np.empty(len(items))
    ends = np.empty(len(items))
    names: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise ValueError(f"interval {i}: must be (start_s, end_s, state), got {item!r}")
        s, e, st = item
        for label, v in (("start_s", s), ("end_s", e)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
                raise ValueError(f"interval {i}: {label} must be a finite number of seconds, got {v!r}")
        if e < s:
            raise ValueError(f"interval {i}: ends at {e!r} s before it starts at {s!r} s (swap start_s and end_s)")
        if st not in known:
            raise ValueError(f"interval {i}: unknown state {st!r}; states are {', '.join(known)}")
        starts[i], ends[i] = s, e
        names.append(st)
    if len(items) > 1:
        back = np.flatnonzero(starts[1:] < starts[:-1])
        if back.size:
            i = int(back[0]) + 1
            raise ValueError(f"intervals must be sorted by start_s: interval {i} starts at {starts[i]!r} s, "
                             f"before interval {i - 1} at {starts[i - 1]!r} s (sort them by start_s)")
        over = np.flatnonzero(starts[1:] < ends[:-1])
        if over.size:
            i = int(over[0]) + 1
            raise ValueError(
                f"intervals {i - 1} ({names[i - 1]}, {starts[i - 1]!r}-{ends[i - 1]!r} s) and {i} ({names[i]}, "
                f"{starts[i]!r}-{ends[i]!r} s) overlap by {ends[i - 1] - starts[i]:.6g} s; a device is in one "
                f"state at a time: fix the timeline or merge it with merge_by_priority")
    return starts, ends, names


def state_durations_s(intervals: Iterable[Sequence], t0_s: float, t1_s: float) -> dict[str, float]:
    """Seconds spent in each state inside ``[t0_s, t1_s]``; ``idle`` is the time no interval covers."""
    t0, t1 = _check_window(t0_s, t1_s)
    starts, ends, names = check_intervals(intervals)
    dur = np.clip(ends, t0, t1) - np.clip(starts, t0, t1)
    out = {s: 0.0 for s in STATES}
    if names:
        codes = np.array([STATES.index(n) for n in names])
        sums = np.bincount(codes, weights=dur, minlength=len(STATES))
        out = {s: float(sums[k]) for k, s in enumerate(STATES)}
    covered = sum(v for k, v in out.items() if k != "idle")
    out["idle"] += max(0.0, (t1 - t0) - covered)
    return out


def model_energy_j(intervals: Iterable[Sequence], watts, t0_s: float, t1_s: float,
                   idle_w: float | None = None) -> float:
    """Joules over ``[t0_s, t1_s]`` from a state timeline: sum of clipped durations x the state's watts.

    ``watts``: ``{state: W}`` (compute, communication, stall; idle optional) or a DeviceProfile.
    Time no interval covers is idle, at ``idle_w`` if given, else ``watts['idle']``, else the stall
    watts.  Example: 2 s compute at 13.35 W + 1 s stall at 4.04 W = 30.74 J.
    """
    w = resolve_watts(watts)
    if idle_w is not None:
        if isinstance(idle_w, bool) or not isinstance(idle_w, (int, float)) or not math.isfinite(idle_w) or idle_w < 0:
            raise ValueError(f"idle_w must be a finite number of watts >= 0 or None, got {idle_w!r}")
        w["idle"] = float(idle_w)
    dur = state_durations_s(intervals, t0_s, t1_s)
    return float(sum(dur[s] * w[s] for s in STATES))


def model_power_w(intervals: Iterable[Sequence], watts, t_s) -> np.ndarray:
    """The model's power at times ``t_s`` (intervals are half-open ``[start, end)``; elsewhere idle)."""
    w = resolve_watts(watts)
    starts, ends, names = check_intervals(intervals)
    t = np.asarray(t_s, dtype=np.float64)
    out = np.full(t.shape, w["idle"])
    if names:
        state_w = np.array([w[n] for n in names])
        idx = np.searchsorted(starts, t, side="right") - 1
        ok = idx >= 0
        ok[ok] = t[ok] < ends[idx[ok]]
        out[ok] = state_w[idx[ok]]
    return out


# ---------------------------------------------------------------------------------------------
# from the event log (rog.runtime.events) to a timeline


def merge_by_priority(intervals: Iterable[Sequence], priority: Sequence[str] = STATE_PRIORITY) -> list[Interval]:
    """One non-overlapping timeline from possibly overlapping intervals: where states overlap, the
    one earlier in ``priority`` wins (a PS sending to one worker while another transfer waits is
    communicating).  Adjacent pieces of the same state are joined."""
    items = [(float(s), float(e), st) for s, e, st in intervals if e > s]
    if not items:
        return []
    for _, _, st in items:
        if st not in priority:
            raise ValueError(f"state {st!r} is not in priority {tuple(priority)}")
    bounds = np.unique(np.array([x for s, e, _ in items for x in (s, e)]))
    left = bounds[:-1]
    chosen = np.full(left.shape, -1)
    for rank in range(len(priority) - 1, -1, -1):  # lowest priority first, higher ones overwrite
        mine = [(s, e) for s, e, st in items if st == priority[rank]]
        if not mine:
            continue
        s_arr = np.sort(np.array([m[0] for m in mine]))
        e_arr = np.sort(np.array([m[1] for m in mine]))
        active = np.searchsorted(s_arr, left, side="right") - np.searchsorted(e_arr, left, side="right")
        chosen[active > 0] = rank
    out: list[Interval] = []
    for k in np.flatnonzero(chosen >= 0):
        st = priority[int(chosen[k])]
        s, e = float(bounds[k]), float(bounds[k + 1])
        if out and out[-1][2] == st and out[-1][1] == s:
            out[-1] = (out[-1][0], e, st)
        else:
            out.append((s, e, st))
    return out


def timeline_from_events(records: Iterable[Mapping[str, Any]], merge: str = "error",
                         overlap_tol_s: float = 1e-3) -> list[Interval]:
    """A device's state timeline from its event records (:func:`rog.runtime.events.read_events`).

    compute and eval -> compute; push, pull and flush -> communication; stall -> stall (records
    without ``duration_s`` are skipped).  Overlaps up to ``overlap_tol_s`` (clock jitter between
    consecutive events) are trimmed.  Longer overlaps raise (``merge='error'``, right for a worker,
    whose events are sequential) or are resolved by :func:`merge_by_priority` (``merge='priority'``,
    for the parameter server, whose connection threads overlap).
    """
    if merge not in ("error", "priority"):
        raise ValueError(f"merge must be 'error' or 'priority', got {merge!r}")
    if not (isinstance(overlap_tol_s, (int, float)) and overlap_tol_s >= 0):
        raise ValueError(f"overlap_tol_s must be a number of seconds >= 0, got {overlap_tol_s!r}")
    raw = []
    for rec in records:
        state = EVENT_STATES.get(rec.get("kind"))
        if state is None or rec.get("duration_s") is None:
            continue
        s = float(rec["t_s"])
        raw.append((s, s + float(rec["duration_s"]), state, rec))
    raw.sort(key=lambda x: (x[0], x[1]))
    if merge == "priority":
        return merge_by_priority([(s, e, st) for s, e, st, _ in raw])
    out: list[Interval] = []
    prev = None
    for s, e, st, rec in raw:
        if out and s < out[-1][1]:
            overlap = out[-1][1] - s
            if overlap > overlap_tol_s:
                raise ValueError(
                    f"events overlap by {overlap:.6g} s: {prev.get('kind')} at t_s={prev['t_s']!r} "
                    f"(iteration {prev.get('iteration')}) runs past the start of {rec.get('kind')} at "
                    f"t_s={rec['t_s']!r} (iteration {rec.get('iteration')}); a worker is in one state at a "
                    f"time: use merge='priority' for a rank with concurrent events (the PS)")
            ps, _, pst = out[-1]
            out[-1] = (ps, max(ps, s), pst)
        out.append((s, e, st))
        prev = rec
    return out


# ---------------------------------------------------------------------------------------------
# the report


def _check_source(source: str) -> None:
    ok = is_sensor(source) or (isinstance(source, str) and source.startswith("model:") and len(source) > 6)
    if not ok:
        raise ValueError(f"source must be one of {', '.join(n for n in POWER_SOURCES if is_sensor(n))} or 'model:<profile name>', got {source!r}")


@dataclass(frozen=True)
class EnergyReport:
    """Energy of one device over one interval, with the source that produced it.

    ``source`` is 'jtop', 'rapl', 'nvml' (measured) or 'model:<profile name>' (the state-based
    model, never to be read as a measurement; ``is_model`` says so in every output).
    """

    device: str  # rank or host name
    energy_j: float  # joules over [t0_s, t1_s]
    t0_s: float  # interval start (seconds on the run's clock)
    t1_s: float  # interval end
    source: str  # 'jtop' | 'rapl' | 'nvml' | 'model:<profile name>'
    note: str = ""  # provenance (the profile's power basis, what a sensor covers)
    state_s: Mapping[str, float] | None = field(default=None)  # model only: seconds per state

    def __post_init__(self) -> None:
        _check_source(self.source)
        _check_window(self.t0_s, self.t1_s)
        if not (isinstance(self.energy_j, (int, float)) and math.isfinite(self.energy_j) and self.energy_j >= 0):
            raise ValueError(f"energy_j must be a finite number of joules >= 0, got {self.energy_j!r}")

    @property
    def interval_s(self) -> float:
        """Length of the interval in seconds."""
        return float(self.t1_s - self.t0_s)

    @property
    def mean_w(self) -> float:
        """Mean power over the interval (NaN for an empty interval)."""
        return self.energy_j / self.interval_s if self.interval_s > 0 else float("nan")

    @property
    def is_model(self) -> bool:
        """True when the energy comes from the state-based model, not a sensor."""
        return self.source.startswith("model:")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``mean_w``, ``interval_s`` and ``is_model`` included)."""
        out = {"device": self.device, "energy_j": self.energy_j, "mean_w": self.mean_w, "source": self.source,
               "is_model": self.is_model, "t0_s": self.t0_s, "t1_s": self.t1_s, "interval_s": self.interval_s,
               "note": self.note}
        if self.state_s is not None:
            out["state_s"] = dict(self.state_s)
        return out


def report_from_samples(device: str, samples: PowerSamples, t0_s: float, t1_s: float,
                        max_gap_s: float | None = 1.0, note: str = "") -> EnergyReport:
    """An :class:`EnergyReport` from measured samples (:func:`integrate_energy_j`)."""
    if not isinstance(samples, PowerSamples):
        raise ValueError(f"samples must be PowerSamples (they carry the source label), got {type(samples).__name__}")
    energy = integrate_energy_j(samples, t0_s, t1_s, max_gap_s=max_gap_s)
    return EnergyReport(device=device, energy_j=energy, t0_s=float(t0_s), t1_s=float(t1_s),
                        source=samples.source, note=note)


def report_from_timeline(device: str, intervals: Iterable[Sequence], profile, t0_s: float, t1_s: float) -> EnergyReport:
    """An :class:`EnergyReport` from a state timeline and a DeviceProfile, labelled ``model:<name>``."""
    intervals = list(intervals)
    durations = state_durations_s(intervals, t0_s, t1_s)
    energy = model_energy_j(intervals, profile, t0_s, t1_s)
    note = (f"state-based model, not a measurement: seconds per state x {profile.name} watts "
            f"({profile.power_basis})")
    return EnergyReport(device=device, energy_j=energy, t0_s=float(t0_s), t1_s=float(t1_s),
                        source=profile.model_source, note=note, state_s=durations)


def report_from_events(path, profile, device: str | None = None, t0_s: float | None = None,
                       t1_s: float | None = None, merge: str | None = None) -> EnergyReport:
    """The model's :class:`EnergyReport` for one rank's event file over its real training interval.

    The interval defaults to the ``run_start`` .. ``run_end`` records (else the first event's start
    and the last event's end); ``device`` defaults to the file's rank; ``merge`` defaults to
    ``'priority'`` for the PS and ``'error'`` for a worker (see :func:`timeline_from_events`).
    """
    from rog.runtime.events import read_events

    header, records = read_events(path, allow_partial_last_line=True)
    rank = header["rank"]
    if merge is None:
        merge = "priority" if rank == "ps" else "error"
    try:
        intervals = timeline_from_events(records, merge=merge)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    starts = [r["t_s"] for r in records if r["kind"] == "run_start"]
    ends = [r["t_s"] for r in records if r["kind"] == "run_end"]
    if t0_s is None:
        t0_s = starts[0] if starts else (intervals[0][0] if intervals else None)
    if t1_s is None:
        t1_s = ends[-1] if ends else (max(e for _, e, _ in intervals) if intervals else None)
    if t0_s is None or t1_s is None:
        raise ValueError(f"{path}: no run_start/run_end and no timed events; pass t0_s and t1_s")
    return report_from_timeline(device or rank, intervals, profile, t0_s, t1_s)
