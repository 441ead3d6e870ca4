"""The paper's measures from run tables: time composition, targets, time and energy to target.

* :func:`composition`: means per iteration of compute / communication / stall, first per worker
  (over its complete iterations), then over workers: the same boundaries for every system
  (docs/design.md#event-records).  ``iter_s`` is wall-clock seconds per iteration (first compute start to last pull
  end, divided by the iterations), so ``iter_s - compute - comm - stall`` is time no event covers
  (bookkeeping, worker 0's tests).
* :func:`select_target`: one target accuracy for all runs compared (:data:`TARGET_RULE`):
  ``start + f x (lowest peak - start)``, the lowest peak being the highest accuracy that *every*
  run reaches; ``f`` defaults to 0.8, so every run reaches the target and the slowest does so
  near its best.
* :func:`time_to_target_s`: first crossing of the target, linearly interpolated in time between
  the test before it and the first test at or above it.
* :func:`smooth_accuracy`: the curve the target, the time to it and the accuracy at equal
  iterations are read from: each test after the first replaced by the mean of it and its
  neighbours (:data:`SMOOTH_TESTS` consecutive tests, centred); the first test, the model before
  training, is kept.  One worker's model after a mini-batch of its own non-IID shard swings by
  several points from test to test; a first crossing on the raw curve is decided by that swing,
  not by the training speed.  Final and peak accuracies stay raw.
* Energy: every worker's energy from the run start to the target time, summed over workers (the
  parameter server is not a robot and is left out).  Measured power logs are used when every
  worker has one from a sensor on its own device (``testbed: hosts``); otherwise the state-based
  model (docs/design.md#energy-model): each worker's event timeline at the watts its run's ``energy.json`` priced it
  with (the workers' device profile's; :func:`model_pricing`), labelled ``model:<profile name>``, with
  untracked time at the profile's idle watts; a run without ``energy.json`` at the Jetson Xavier NX
  watts of Table III (:data:`MODEL_SOURCE`).
* :func:`equal_iteration_count` / :func:`accuracy_at_iteration`: accuracy every run has at the
  smallest iteration count all runs' tests cover (linear interpolation between tests).

Accuracies are in percent (points), times in seconds since each run's start.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from rog.experiment.rundir import ENERGY_FILE
from rog.policies.registry import reference_systems
from rog.power.energy import SENSOR_SOURCES as ENERGY_SENSOR_SOURCES
from rog.power.sources import is_sensor

from .load import RunData, finite_or_none

try:  # the power helper's integrators (rog/power); the fallbacks below implement the same model
    from rog.power.energy import integrate_energy_j as _integrate_energy_j
    from rog.power.energy import model_energy_j as _model_energy_j
except ImportError:  # pragma: no cover - only when rog.power is absent
    _integrate_energy_j = None
    _model_energy_j = None

__all__ = [
    "JETSON_WATTS", "MODEL_SOURCE", "SENSOR_SOURCES", "ModelPricing", "model_pricing", "is_model_source",
    "TARGET_FRACTION", "SUMMARY_KEYS", "RunMetrics",
    "composition", "select_target", "smooth_accuracy", "time_to_target_s", "accuracy_at_iteration", "accuracy_at_time", "equal_iteration_count",
    "worker_timeline", "cumulative_model_energy_j", "energy_source", "team_energy_j", "team_energy_curve_j",
    "energy_to_accuracy", "run_measures", "compute_metrics",
]

# Table III, Jetson Xavier NX, whole board; time between logged events is counted at the stall watts
JETSON_WATTS = {"compute": 13.35, "communication": 4.25, "stall": 4.04, "idle": 4.04}
MODEL_SOURCE = "model:jetson-xavier-nx"
SENSOR_SOURCES = ENERGY_SENSOR_SOURCES  # the live sensors (rog.power.sources.POWER_SOURCES); checks use is_sensor
TARGET_FRACTION = 0.8  # share of the gap between the start accuracy and the lowest peak
SMOOTH_TESTS = 3  # consecutive tests averaged (centred) before reading targets and crossings
REFERENCE_SYSTEMS = reference_systems()  # measured against an item's target and equal-iteration count, never setting them
EVENT_STATE = {"compute": "compute", "eval": "compute", "push": "communication", "pull": "communication",
               "flush": "communication", "stall": "stall"}
# the per-run keys of result/summary.json, exactly these, in this order
SUMMARY_KEYS = ("system", "threshold", "control", "replay_mode", "workers", "batch_multiple", "iterations", "iter_s",
                "compute_s", "comm_s", "stall_s", "data_wait_s", "time_to_target_s", "energy_to_target_j", "energy_source",
                "acc_final", "acc_at_equal_iters")


# ----------------------------------------------------------------------------- time composition
def composition(run: RunData) -> dict[str, Any]:
    """Means per iteration (seconds): ``iter_s``, ``compute_s``, ``comm_s``, ``stall_s``, ``data_wait_s``, ``other_s``
    (mean over workers of each worker's mean), ``iterations`` (complete iterations every worker
    finished) and ``per_worker`` (a table, one row per worker)."""
    it = run.iterations
    keys = ("iter_s", "compute_s", "comm_s", "stall_s", "data_wait_s", "other_s")
    if it is None or it.empty:
        return {**{k: None for k in keys}, "iterations": 0, "per_worker": pd.DataFrame(columns=["worker", *keys, "iterations"])}
    g = it.groupby("worker")
    per = pd.DataFrame({
        "iterations": g["iteration"].count(),
        "compute_s": g["compute_s"].mean(),
        "comm_s": g["comm_s"].mean(),
        "stall_s": g["stall_s"].mean(),
        "data_wait_s": g["data_wait_s"].mean() if "data_wait_s" in it.columns else 0.0,
        "iter_s": (g["t_end_s"].max() - g["t_start_s"].min()) / g["iteration"].count(),
    })
    per["other_s"] = per["iter_s"] - per["compute_s"] - per["comm_s"] - per["stall_s"] - per["data_wait_s"]
    per = per.reset_index()
    out = {k: float(per[k].mean()) for k in keys}
    out["iterations"] = int(per["iterations"].min())
    out["per_worker"] = per
    return out


# ----------------------------------------------------------------------------- accuracy and targets
def _by_iteration(acc: pd.DataFrame) -> pd.DataFrame:
    return acc.sort_values(["iteration", "time_s"]).drop_duplicates("iteration", keep="last")


def accuracy_at_iteration(acc: pd.DataFrame, iteration: float) -> float | None:
    """Accuracy (%) at ``iteration``, linearly interpolated between tests; None outside the tested range."""
    if acc is None or acc.empty or iteration is None:
        return None
    a = _by_iteration(acc)
    x, y = a["iteration"].to_numpy(float), a["accuracy_pct"].to_numpy(float)
    if iteration < x[0] or iteration > x[-1]:
        return None
    return float(np.interp(iteration, x, y))


def accuracy_at_time(acc: pd.DataFrame, time_s: float | None) -> float | None:
    """Accuracy (%) at ``time_s`` seconds since the start, linearly interpolated between tests; None outside."""
    if acc is None or acc.empty or time_s is None:
        return None
    a = acc.sort_values("time_s")
    x, y = a["time_s"].to_numpy(float), a["accuracy_pct"].to_numpy(float)
    if time_s < x[0] or time_s > x[-1]:
        return None
    return float(np.interp(time_s, x, y))


def equal_iteration_count(accuracies: Sequence[pd.DataFrame]) -> int | None:
    """The smallest, over runs, of the last tested iteration: every run has an accuracy there."""
    last = [float(a["iteration"].max()) for a in accuracies if a is not None and not a.empty]
    return int(min(last)) if last else None


def smooth_accuracy(acc: pd.DataFrame | None, window: int = SMOOTH_TESTS) -> pd.DataFrame | None:
    """``acc`` sorted by time, ``accuracy_pct`` of every test after the first replaced by the centred
    mean over ``window`` consecutive tests (fewer at the ends; the first test is not averaged in)."""
    if acc is None or acc.empty:
        return acc
    if isinstance(window, bool) or not isinstance(window, int) or window < 1 or window % 2 == 0:
        raise ValueError(f"window must be an odd number of tests >= 1, got {window!r}")
    a = acc.sort_values("time_s").reset_index(drop=True).copy()
    if window > 1 and len(a) > 2:
        tail = a["accuracy_pct"].iloc[1:].astype(float)
        a.loc[1:, "accuracy_pct"] = tail.rolling(window, center=True, min_periods=1).mean().to_numpy()
    return a


def time_to_target_s(acc: pd.DataFrame, target_pct: float | None) -> float | None:
    """Seconds from the run start until the accuracy first reaches ``target_pct`` (interpolated
    between the last test below and the first test at or above it); None if never reached."""
    if target_pct is None or acc is None or acc.empty:
        return None
    a = acc.sort_values("time_s")
    t, y = a["time_s"].to_numpy(float), a["accuracy_pct"].to_numpy(float)
    hit = np.flatnonzero(y >= target_pct)
    if hit.size == 0:
        return None
    k = int(hit[0])
    if k == 0:
        return float(max(t[0], 0.0))
    t0, t1, y0, y1 = t[k - 1], t[k], y[k - 1], y[k]
    return float(t0 + (target_pct - y0) / (y1 - y0) * (t1 - t0))


def select_target(accuracies: Sequence[pd.DataFrame], fraction: float = TARGET_FRACTION,
                  names: Sequence[str] | None = None) -> tuple[float | None, str]:
    """One target accuracy (%) for all runs and the rule that chose it (a sentence with the numbers).

    target = start + ``fraction`` x (lowest peak - start); start = mean of each run's first test,
    lowest peak = min over runs of the run's highest accuracy.  None when some run never rises
    above the start (no common target exists).
    """
    if not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise ValueError(f"fraction must lie in (0, 1], got {fraction!r}")
    names = list(names) if names is not None else [f"run {i}" for i in range(len(accuracies))]
    rows = [(n, a) for n, a in zip(names, accuracies) if a is not None and not a.empty]
    if not rows:
        return None, "no run has an accuracy record: no target"
    starts = [float(a.sort_values("time_s")["accuracy_pct"].iloc[0]) for _, a in rows]
    peaks = [float(a["accuracy_pct"].max()) for _, a in rows]
    start = float(np.mean(starts))
    k = int(np.argmin(peaks))
    low = peaks[k]
    base = (f"target = start + {fraction:g} x (lowest peak - start), accuracy in %: start = {start:.2f} "
            f"(mean first test of {len(rows)} runs), lowest peak = {low:.2f} ({rows[k][0]})")
    if low <= start:
        return None, base + ": that run never rose above the start, so no common target exists"
    target = start + fraction * (low - start)
    return float(target), base + f", target = {target:.2f}"


# ----------------------------------------------------------------------------- energy
@dataclass(frozen=True)
class ModelPricing:
    """The watts that price a run's state-based model: its workers' device profile's."""

    source: str  # model:<profile name>
    profile: str
    watts: dict  # {state: watts} for compute, communication, stall and idle
    basis: str  # where the watts come from (the profile's power_basis)


DEFAULT_PRICING = ModelPricing(MODEL_SOURCE, "jetson-xavier-nx", dict(JETSON_WATTS), "measured: paper Table III")


def is_model_source(source: str) -> bool:
    """Whether an energy source label is the state-based model (``model:<profile>``), not a sensor."""
    return str(source).startswith("model:")


@lru_cache(maxsize=64)
def _recorded_pricing(path: str, mtime_ns: int) -> ModelPricing | None:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read it as JSON ({type(e).__name__}: {e}); rerun the run's finalize step "
                         "or delete the file") from None
    devices = doc.get("devices") if isinstance(doc, dict) else None
    for rank, d in sorted((devices or {}).items()):
        if str(rank).startswith("w") and isinstance(d, dict) and isinstance(d.get("watts"), dict):
            w = {k: float(v) for k, v in d["watts"].items()}
            w.setdefault("idle", w["stall"])
            note = str(d.get("note", ""))
            basis = note[note.find("(") + 1:note.rfind(")")] if "(" in note else note
            return ModelPricing(str(d.get("source") or f"model:{d.get('profile')}"), str(d.get("profile")), w, basis)
    return None


def model_pricing(run: RunData) -> ModelPricing:
    """The pricing of ``run``'s modelled energy: the watts its ``energy.json`` priced its workers with (their
    device profile's, ``model:<profile>``), so that the summary and the run's own report give one modelled
    energy; :data:`DEFAULT_PRICING` (Table III) for a run without one."""
    path = Path(run.run_dir) / ENERGY_FILE
    if not path.is_file():
        return DEFAULT_PRICING
    return _recorded_pricing(str(path), path.stat().st_mtime_ns) or DEFAULT_PRICING


def worker_timeline(ev: pd.DataFrame) -> list[tuple[float, float, str]]:
    """A worker's ``(start_s, end_s, state)`` intervals on the run clock, sorted, overlaps trimmed
    (a later event cuts the earlier one short: clock jitter between consecutive records)."""
    if ev is None or ev.empty or "duration_s" not in ev.columns:
        return []
    d = ev[ev["kind"].isin(list(EVENT_STATE)) & ev["duration_s"].notna()]
    d = d.sort_values("t_s")
    starts = d["t_s"].to_numpy(float)
    ends = starts + d["duration_s"].to_numpy(float)
    states = [EVENT_STATE[k] for k in d["kind"]]
    out = []
    for s, e, st in zip(starts, ends, states):
        if out and s < out[-1][1]:
            ps, _, pst = out[-1]
            out[-1] = (ps, max(ps, s), pst)
        if e > s:
            out.append((float(s), float(e), st))
    return out


def cumulative_model_energy_j(intervals: Sequence[tuple[float, float, str]], t0_s: float, times_s,
                              watts: dict[str, float] = JETSON_WATTS) -> np.ndarray:
    """Model joules over ``[t0_s, t]`` for every ``t`` in ``times_s`` (vectorised; non-overlapping intervals).

    Untracked time is at ``watts['idle']``.  ``t < t0_s`` gives 0.
    """
    t = np.asarray(times_s, dtype=float)
    idle = float(watts.get("idle", watts["stall"]))
    span = np.clip(t - t0_s, 0.0, None)
    if not intervals:
        return idle * span
    s = np.array([i[0] for i in intervals])
    e = np.array([i[1] for i in intervals])
    extra = np.array([watts[i[2]] - idle for i in intervals])
    s, e = np.clip(s, t0_s, None), np.clip(e, t0_s, None)
    full = np.concatenate(([0.0], np.cumsum(extra * (e - s))))  # extra joules of intervals 0..k-1
    tt = np.maximum(t, t0_s)
    k = np.searchsorted(e, tt, side="right")  # intervals fully ended by t
    partial = np.zeros_like(tt)
    inside = k < len(s)
    kk = k[inside]
    partial[inside] = extra[kk] * np.clip(tt[inside] - s[kk], 0.0, None)
    return idle * span + full[k] + partial


def energy_source(run: RunData, power: str = "auto") -> str:
    """The energy source for ``run``: a sensor name, or its model's label (:func:`model_pricing`).

    ``power='auto'``: the sensor when every worker has a power log from one sensor and the
    workers are separate devices (``testbed: hosts``); otherwise the model.  ``'sensor'``
    insists on logs (ValueError naming what is missing); ``'model'`` always the model.
    """
    if power not in ("auto", "sensor", "model"):
        raise ValueError(f"power must be 'auto', 'sensor' or 'model', got {power!r}")
    if power == "model":
        return model_pricing(run).source
    sources = []
    for rank in run.worker_ranks:
        df = run.power.get(rank)
        src = None if df is None or df.empty else str(df["source"].iloc[0])
        sources.append(src if is_sensor(src) else None)
    ok = bool(sources) and all(sources) and len(set(sources)) == 1
    if power == "sensor":
        if not ok:
            raise ValueError(f"{run.run_dir}: power='sensor' needs a sensor power log (jtop/rapl/nvml) for every "
                             f"worker; found {dict(zip(run.worker_ranks, sources))}")
        return sources[0]
    from .load import config_value

    separate = config_value(run.config, "testbed") == "hosts"
    return sources[0] if ok and separate else model_pricing(run).source


def team_energy_curve_j(run: RunData, times_s, source: str) -> np.ndarray:
    """Joules of all workers together from the run start to each time in ``times_s`` (seconds since start)."""
    t = np.asarray(times_s, dtype=float)
    total = np.zeros_like(t)
    watts = model_pricing(run).watts if is_model_source(source) else None
    for rank in run.worker_ranks:
        if watts is not None:
            iv = [(s - run.t0_s, e - run.t0_s, st) for s, e, st in worker_timeline(run.events[rank])]
            total += cumulative_model_energy_j(iv, 0.0, t, watts)
        else:
            p = run.power[rank]
            tp, pw = p["time_s"].to_numpy(float), p["power_w"].to_numpy(float)
            grid = np.unique(np.concatenate(([0.0], tp[tp > 0])))
            pg = np.interp(grid, tp, pw)
            cum = np.concatenate(([0.0], np.cumsum(0.5 * (pg[1:] + pg[:-1]) * np.diff(grid))))
            total += np.interp(np.clip(t, 0.0, None), grid, cum, right=np.nan)
    return total


def team_energy_j(run: RunData, t_s: float | None, source: str) -> float | None:
    """Joules of all workers from the run start to ``t_s`` seconds after it (None if ``t_s`` is None)."""
    if t_s is None:
        return None
    total = 0.0
    watts = model_pricing(run).watts if is_model_source(source) else None
    for rank in run.worker_ranks:
        if watts is not None:
            iv = [(s - run.t0_s, e - run.t0_s, st) for s, e, st in worker_timeline(run.events[rank])]
            if _model_energy_j is not None:
                total += _model_energy_j(iv, watts, 0.0, float(t_s), idle_w=watts["idle"])
            else:  # pragma: no cover
                total += float(cumulative_model_energy_j(iv, 0.0, [t_s], watts)[0])
        else:
            p = run.power[rank]
            pairs = np.column_stack([p["time_s"].to_numpy(float), p["power_w"].to_numpy(float)])
            total += _integrate_energy_j(pairs, 0.0, float(t_s), max_gap_s=2.0)
    return float(total)


def energy_to_accuracy(run: RunData, levels_pct, source: str, curve: pd.DataFrame | None = None) -> np.ndarray:
    """Team joules until the accuracy first reaches each level (NaN where never reached), read from
    ``curve`` (a :class:`RunMetrics`' ``accuracy_curve``; default: the run's curve smoothed over
    :data:`SMOOTH_TESTS` tests)."""
    lv = np.asarray(levels_pct, dtype=float)
    smooth = smooth_accuracy(run.accuracy) if curve is None else curve
    times = np.array([np.nan if (x := time_to_target_s(smooth, float(v))) is None else x for v in lv])
    out = np.full(lv.shape, np.nan)
    ok = np.isfinite(times)
    if ok.any():
        out[ok] = team_energy_curve_j(run, times[ok], source)
    return out


# ----------------------------------------------------------------------------- everything per run
@dataclass
class RunMetrics:
    """The measures of one run (seconds, %, joules) and the run they came from."""

    run: RunData
    iterations: int
    iter_s: float | None
    compute_s: float | None
    comm_s: float | None
    stall_s: float | None
    other_s: float | None
    acc_start: float | None
    acc_final: float | None
    acc_peak: float | None
    acc_at_equal_iters: float | None
    time_to_target_s: float | None
    energy_to_target_j: float | None
    energy_source: str
    train_s: float | None  # seconds from the run start to the last complete iteration
    notes: list[str] = field(default_factory=list)
    accuracy_curve: pd.DataFrame | None = None  # the (smoothed) curve targets and crossings were read from
    data_wait_s: float | None = None  # streaming runs: waiting for the batch on the arrival clock (0 otherwise)

    @property
    def label(self) -> str:
        return self.run.label

    def summary_entry(self) -> dict[str, Any]:
        """Exactly :data:`SUMMARY_KEYS`, JSON-ready."""
        r = self.run
        entry = {
            "system": r.system, "threshold": r.threshold, "control": r.control, "replay_mode": r.replay_mode,
            "workers": r.workers, "batch_multiple": r.batch_multiple, "iterations": int(self.iterations),
            "iter_s": finite_or_none(self.iter_s), "compute_s": finite_or_none(self.compute_s),
            "comm_s": finite_or_none(self.comm_s), "stall_s": finite_or_none(self.stall_s),
            "data_wait_s": finite_or_none(self.data_wait_s),
            "time_to_target_s": finite_or_none(self.time_to_target_s),
            "energy_to_target_j": finite_or_none(self.energy_to_target_j), "energy_source": self.energy_source,
            "acc_final": finite_or_none(self.acc_final), "acc_at_equal_iters": finite_or_none(self.acc_at_equal_iters),
        }
        assert tuple(entry) == SUMMARY_KEYS
        return entry


def run_measures(run: RunData, smooth_tests: int = SMOOTH_TESTS) -> dict[str, Any]:
    """What :func:`compute_metrics` reads of one run whatever the target: ``composition`` (:func:`composition`),
    ``smooth`` (:func:`smooth_accuracy`), ``acc_start``, ``acc_final``, ``acc_peak`` and ``train_s``.  Computed once per
    run object and ``smooth_tests`` and kept on the run, so that every reading of the same run (the summary, each
    re-reading at another target, each horizon a run is not clipped at) reuses it; a run whose ``iterations`` or
    ``accuracy`` table was replaced is measured again."""
    cache = run.measures
    key = (smooth_tests, id(run.iterations), id(run.accuracy))
    got = cache.get(key)
    if got is None:
        acc = run.accuracy
        has_acc = acc is not None and not acc.empty
        by_time = acc.sort_values("time_s")["accuracy_pct"] if has_acc else None
        got = cache[key] = {
            "composition": composition(run), "smooth": smooth_accuracy(acc, smooth_tests),
            "acc_start": float(by_time.iloc[0]) if has_acc else None,
            "acc_final": float(by_time.iloc[-1]) if has_acc else None,
            "acc_peak": float(acc["accuracy_pct"].max()) if has_acc else None,
            "train_s": float(run.iterations["t_end_s"].max()) if not run.iterations.empty else None}
    return got


def compute_metrics(runs: Sequence[RunData], target_fraction: float = TARGET_FRACTION, power: str = "auto",
                    smooth_tests: int = SMOOTH_TESTS, sets_target: Callable[[RunData], bool] | None = None
                    ) -> tuple[list[RunMetrics], float | None, str, int | None]:
    """Measures of every run against one common target and one common iteration count.

    Targets, crossings and the accuracy at equal iterations are read from each run's accuracy curve
    smoothed over ``smooth_tests`` consecutive tests (:func:`smooth_accuracy`; 1 = raw).

    Returns ``(metrics, target_pct, target_rule, equal_iters)``.  The target and the common
    iteration count come from the completed runs (all runs when none is complete yet) of the
    paper's systems (a reference baseline such as DDP is measured, it does not set them).
    ``sets_target``: when given, only the basis runs it accepts set the target (an item's own rule, e.g. the
    compare item's: the ROG paper's four systems); the equal-iteration count keeps the whole basis.
    """
    basis = [r for r in runs if r.status == "done"] or list(runs)
    # a reference baseline (DDP: float32 over links sized for 1-bit pushes) may manage only a few
    # iterations in the budget; it is measured against the target, it does not set it
    basis = [r for r in basis if r.library not in reference_systems()] or basis
    setters = basis if sets_target is None else [r for r in basis if sets_target(r)]
    target, rule = select_target([run_measures(r, smooth_tests)["smooth"] for r in setters], target_fraction,
                                 [r.run_id for r in setters])
    if sets_target is not None:
        rule = f"set by {len(setters)} of {len(basis)} runs (the item's own rule); " + rule
    if smooth_tests > 1:
        rule = f"accuracy curves smoothed over {smooth_tests} consecutive tests (centred; the first test kept); " + rule
    eq = equal_iteration_count([r.accuracy for r in basis])
    sources = {r.run_id: energy_source(r, power) for r in runs}
    sensors = {rid: s for rid, s in sources.items() if not is_model_source(s)}
    # compared runs: one sensor for every run, else every run on its own labelled model (never a mix)
    mixed = power == "auto" and bool(sensors) and (len(sensors) < len(sources) or len(set(sensors.values())) > 1)
    out = []
    for r in runs:
        measured = run_measures(r, smooth_tests)
        comp, smooth = measured["composition"], measured["smooth"]
        src = model_pricing(r).source if mixed else sources[r.run_id]
        ttt = time_to_target_s(smooth, target)
        notes = list(r.warnings)
        if mixed and r.run_id in sensors:
            notes.append(f"energy: {src}, not this run's {sources[r.run_id]} logs: not every compared run "
                         f"has {sources[r.run_id]} readings for every worker (sources {sorted(set(sources.values()))}), "
                         f"and a comparison never mixes sensor and model")
        try:
            e = team_energy_j(r, ttt, src)
        except ValueError as exc:  # a sensor log with a gap: fall back to the model, and say so
            src_model = model_pricing(r).source
            notes.append(f"energy from {src} failed ({exc}); used {src_model}")
            src = src_model
            e = team_energy_j(r, ttt, src)
        out.append(RunMetrics(
            run=r, iterations=comp["iterations"], iter_s=comp["iter_s"], compute_s=comp["compute_s"],
            comm_s=comp["comm_s"], stall_s=comp["stall_s"], other_s=comp["other_s"], data_wait_s=comp["data_wait_s"],
            acc_start=measured["acc_start"], acc_final=measured["acc_final"], acc_peak=measured["acc_peak"],
            acc_at_equal_iters=accuracy_at_iteration(smooth, eq), time_to_target_s=ttt, energy_to_target_j=e,
            energy_source=src, train_s=measured["train_s"], notes=notes, accuracy_curve=smooth))
    return out, target, rule, eq


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return None
    return a / b
