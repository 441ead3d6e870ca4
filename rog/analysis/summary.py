"""``result/summary.json`` and ``result/summary.md``: every run's measures next to the paper and the artifact.

``summary.json``: ``{"target_acc": %, "target_rule": str, "runs": {run_id: {...}}, "robustness": [...]}``
(every claim over the trace x seed replicas: :mod:`rog.analysis.robustness`), ``robustness_causes`` when a
claim fails on some replicas (:mod:`rog.analysis.causes`), ``long_horizon`` with the ``outdoors_long`` item
(:mod:`rog.analysis.horizons`); each run entry
has exactly :data:`rog.analysis.metrics.SUMMARY_KEYS`.  Accuracy is the team's curve
(:func:`rog.analysis.load.team_accuracy`); when several workers' models were tested, ``worker0`` holds
the accuracy claims read from worker 0's model alone, as the original artifact measured.  ``summary.md``: the same
as tables, the time composition next to the original artifact's logged numbers, one row per
claim (ours, the artifact's, the paper's, the acceptance bound of docs/reproduction.md) with a sentence computed
from those numbers, and a paragraph on the two replay modes, also computed.

Where the inputs come from (each run's testbed and fallback, the trace, the energy source and the
profile whose watts priced a model, the reference columns' sources): :mod:`.provenance`.  Worker 0's
model alone and the target's position: :mod:`.rereadings`.

Reference numbers (:data:`ARTIFACT`, :data:`STALL_CUT`, :data:`THROUGHPUT`, :data:`ENERGY_CUT`) live in
:mod:`.references` with their sources: the paper's claims (ROG, MICRO 2022, CRUDA outdoors) and the
artifact's outdoor logs.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .atp import atp_markdown, atp_table
from .load import RunData, clip_run, find_runs, load_run
from .metrics import (SMOOTH_TESTS, SUMMARY_KEYS, TARGET_FRACTION, RunMetrics, accuracy_at_time,
                      compute_metrics, is_sensor, ratio)
from .provenance import energy_source_line, reference_sources_line, testbed_cell, testbed_line, trace_source_line
from .references import ARTIFACT, ENERGY_CUT, STALL_CUT, THROUGHPUT

__all__ = ["ARTIFACT", "Claim", "Setting", "base_setting", "select", "build_summary", "write_summary",
           "render_markdown", "claim_rows", "replay_paragraph", "item_views", "read_plan", "Views",
           "in_setting", "iteration_at_target", "first_iteration_s", "crossing_table", "crossing_paragraph",
           "single_worker_measures", "single_worker_markdown", "target_sensitivity", "target_sensitivity_markdown",
           "SENSITIVITY_FRACTIONS", "trace_source_line"]


def _art(label: str, key: str) -> float | None:
    return ARTIFACT.get(label, {}).get(key)


def _art_ratio(a: str, b: str, key: str) -> float | None:
    return ratio(_art(a, key), _art(b, key))


@dataclass(frozen=True)
class Setting:
    """Which runs a comparison reads: base workers / batch multiple / control and a replay mode."""

    workers: int | None
    batch_multiple: int | None
    replay_mode: str | None
    control: Any = None


def _mode(values: Sequence[Any], prefer: Any = None) -> Any:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    if prefer is not None and prefer in vals:
        return prefer
    return Counter(vals).most_common(1)[0][0]


def base_setting(metrics: Sequence[RunMetrics]) -> Setting:
    """The end-to-end item's setting: 4 workers and batch x1 when present (else the most common),
    ``artifact`` replay mode when present (the paper's items run in it)."""
    runs = [m.run for m in metrics]
    return Setting(workers=_mode([r.workers for r in runs], 4), batch_multiple=_mode([r.batch_multiple for r in runs], 1),
                   replay_mode=_mode([r.replay_mode for r in runs], "artifact"), control=_mode([r.control for r in runs]))


def in_setting(run: RunData, setting: Setting, **override) -> bool:
    """Whether ``run`` belongs to ``setting`` (fields overridable by keyword; None workers/batch = any)."""
    s = {**setting.__dict__, **override}
    if s["workers"] is not None and run.workers != s["workers"]:
        return False
    if s["batch_multiple"] is not None and run.batch_multiple != s["batch_multiple"]:
        return False
    return run.replay_mode == s["replay_mode"] and run.control == s["control"]


def select(metrics: Sequence[RunMetrics], label: str, setting: Setting, **override) -> list[RunMetrics]:
    """The runs of system ``label`` (``ROG-4``, ``BSP``) in ``setting`` (fields overridable by keyword)."""
    return [m for m in metrics if m.run.label == label and in_setting(m.run, setting, **override)]


def _mean(ms: Sequence[RunMetrics], get: Callable[[RunMetrics], float | None]) -> float | None:
    return _mean_of(ms, get)[0]


def _mean_of(ms: Sequence[RunMetrics], get: Callable[[RunMetrics], float | None]) -> tuple[float | None, int]:
    """The mean over the runs that have a value (seeds that reached the target) and how many did."""
    vals = [get(m) for m in ms]
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    return (float(np.mean(vals)) if vals else None), len(vals)


MIXED_SOURCES = "mixed energy sources"  # an energy ratio between a sensor reading and a model is not computed


def mixed_sources(runs: Sequence[RunMetrics]) -> str:
    """Why an energy ratio over ``runs`` is not computed (their energy sources differ), or ''."""
    by = {}
    for m in runs:
        by.setdefault(m.energy_source, []).append(m.run.label)
    if len(by) < 2:
        return ""
    kinds = sorted({"sensor" if is_sensor(s) else "model" for s in by}, reverse=True)
    what = " / ".join(kinds) if len(kinds) > 1 else " / ".join(sorted(by))
    detail = ", ".join(f"{'/'.join(dict.fromkeys(labs))} {src}" for src, labs in sorted(by.items()))
    return f"{MIXED_SOURCES} ({what}): {detail}"


# ----------------------------------------------------------------------------- claims
@dataclass(frozen=True)
class Claim:
    """One comparison: our value, the artifact's, the paper's range (or words), the acceptance bound."""

    name: str
    ours: float | None
    artifact: float | None
    paper: tuple[float, float] | None
    paper_text: str
    bound: tuple[str, float] | None  # ('<=', 0.5) or ('>=', -1.5): the reproduction's acceptance bound
    unit: str  # 'x' (a ratio) or 'points'
    missing: str = ""  # why ours is None
    run_ids: tuple[str, ...] = ()  # the runs behind ours
    source: str = ""  # where the runs come from: '' (end to end), 'sensitivity' (worker / batch items) or 'threshold'
    counts: tuple[tuple[str, int, int], ...] = ()  # (system, runs with a value, runs) behind ours, over seeds

    def reached(self) -> str:
        """``ROG-4 reached 2 of 3, BSP 3 of 3`` when several runs (seeds) or a missing value stand behind ours."""
        word = "reached" if "to target" in self.name else "measured"
        if not any(k < n or (n > 1 and word == "reached") for _, k, n in self.counts):
            return ""
        return f"{word} " + ", ".join(f"{lab} {k} of {n}" for lab, k, n in self.counts)

    def sentence(self) -> str:
        """Agreement or disagreement, computed from the numbers."""
        if self.ours is None:
            if self.missing.startswith(MIXED_SOURCES):
                return f"Not measured: {self.missing}."
            return f"Not decidable: {self.missing or 'a run is missing or never reached the target'}."
        v = self.ours
        fmt = (lambda x: f"{x:.2f}x") if self.unit == "x" else (lambda x: f"{x:+.2f} points")
        parts = []
        if self.paper is not None:
            lo, hi = self.paper
            if self.unit == "x":
                rng = f"{lo:.2f}x" if lo == hi else f"{lo:.2f}x to {hi:.2f}x"
            else:
                rng = f"{lo:+.2f} points" if lo == hi else f"{lo:+.2f} to {hi:+.2f} points"
            where = "inside" if lo <= v <= hi else "below" if v < lo else "above"
            what = "the paper's value" if lo == hi else "the paper's range"
            if lo == hi:
                where = "close to" if abs(v - lo) <= 0.05 * max(abs(lo), 1e-9) else where
            parts.append(f"ours ({fmt(v)}) is {where} {what} {rng}")
        else:
            parts.append(f"ours is {fmt(v)}")
        if self.artifact is not None:
            d = v - self.artifact
            if self.unit == "x":
                rel = d / self.artifact if self.artifact else float("inf")
                word = "close to" if abs(rel) <= 0.15 else ("above" if d > 0 else "below")
                parts.append(f"{word} the artifact's logged {fmt(self.artifact)}" +
                             ("" if word == "close to" else f" ({abs(rel) * 100:.0f} % {'more' if d > 0 else 'less'})"))
            else:
                word = "close to" if abs(d) <= 1.0 else ("above" if d > 0 else "below")
                parts.append(f"{word} the artifact's logged {fmt(self.artifact)}")
        if self.bound is not None:
            op, b = self.bound
            ok = v <= b if op == "<=" else v >= b
            parts.append(f"{'meets' if ok else 'MISSES'} the acceptance bound {op} {fmt(b) if self.unit == 'x' else f'{b:+.2f} points'}")
        s = "; ".join(parts)
        return s[0].upper() + s[1:] + "."

    def verdict(self) -> str:
        """``pass`` / ``FAIL`` against the bound, ``-`` without one, ``not measured`` (mixed energy sources)
        or ``not decidable`` (an input is missing) without a value."""
        if self.ours is None:
            return "not measured" if self.missing.startswith(MIXED_SOURCES) else "not decidable"
        if self.bound is None:
            return "-"
        op, b = self.bound
        return "pass" if (self.ours <= b if op == "<=" else self.ours >= b) else "FAIL"


def _pair(metrics, setting, a: str, b: str | Sequence[str], get, combine: str = "ratio", same_source: bool = False,
          **override):
    """Ours for ``a`` vs ``b`` (``b`` a list: the minimum, or the best, over those systems), why it is
    missing, the runs behind it and ``(system, runs with a value, runs)`` per system; with
    ``same_source`` (energy) no ratio between runs of different energy sources."""
    A = select(metrics, a, setting, **override)
    bs = [b] if isinstance(b, str) else list(b)
    B = {x: select(metrics, x, setting, **override) for x in bs}
    missing = [x for x, ms in ({a: A} | B).items() if not ms]
    va, ka = _mean_of(A, get)
    means = {x: _mean_of(ms, get) for x, ms in B.items() if ms}
    vbs = {x: v for x, (v, _) in means.items() if v is not None}
    ids = tuple(m.run.run_id for m in A) + tuple(m.run.run_id for ms in B.values() for m in ms)
    counts = tuple((lab, k, len(ms)) for lab, ms, k in [(a, A, ka)] + [(x, B[x], means[x][1]) for x in means])
    if va is None or not vbs or (isinstance(b, str) and b not in vbs):
        if missing:
            why = f"no run of {', '.join(missing)}"
        else:
            none = [lab for lab, k, _ in counts if k == 0]
            why = f"no value for {', '.join(none)} (no run of it reached the target, or none was tested in range)"
        return None, why, ids, counts
    if same_source:
        mixed = mixed_sources([m for m in A if get(m) is not None] + [m for x in vbs for m in B[x] if get(m) is not None])
        if mixed:
            return None, mixed, ids, counts
    if combine == "ratio":
        return ratio(va, min(vbs.values())), "", ids, counts
    if combine == "diff_best":
        return va - max(vbs.values()), "", ids, counts
    return va - min(vbs.values()), "", ids, counts


def claim_rows(metrics: Sequence[RunMetrics], setting: Setting | None = None,
               sensitivity: Sequence[RunMetrics] | None = None, threshold: Sequence[RunMetrics] | None = None) -> list[Claim]:
    """Every comparison of the paper, the artifact (:mod:`.references`) and the acceptance bounds that the present runs support (others: not measured).

    The worker / batch rows are read from ``sensitivity`` and the threshold rows from ``threshold``
    when given (:class:`Views`: those items' runs over their own budget and target), else from ``metrics``."""
    setting = setting or base_setting(metrics)
    sens = list(metrics) if sensitivity is None else list(sensitivity)
    thr_ms = list(metrics) if threshold is None else list(threshold)
    st = lambda m: m.stall_s  # noqa: E731
    it = lambda m: m.iter_s  # noqa: E731
    en = lambda m: m.energy_to_target_j  # noqa: E731
    rows: list[Claim] = []

    def add(name, a, b, get, artifact, paper, paper_text, bound, unit="x", combine="ratio", among=None, **override):
        v, why, ids, counts = _pair(metrics if among is None else among, setting, a, b, get, combine,
                                    same_source=get is en, **override)
        source = "" if among is None else "sensitivity" if among is sens else "threshold"
        rows.append(Claim(name, v, artifact, paper, paper_text, bound, unit, why, ids, source, counts))

    stall_txt = "stall cut by 49.1-86.5 %"
    add("stall / iteration, ROG-4 / BSP", "ROG-4", "BSP", st, _art_ratio("ROG-4", "BSP", "stall_s"), STALL_CUT, stall_txt, ("<=", 0.5))
    add("stall / iteration, ROG-4 / SSP-4", "ROG-4", "SSP-4", st, _art_ratio("ROG-4", "SSP-4", "stall_s"), STALL_CUT, stall_txt, ("<=", 0.6))
    add("stall / iteration, ROG-20 / SSP-20", "ROG-20", "SSP-20", st, _art_ratio("ROG-20", "SSP-20", "stall_s"), STALL_CUT, stall_txt, ("<=", 0.5))
    add("stall / iteration, ROG-4 / FLOWN", "ROG-4", "FLOWN", st, None, STALL_CUT, stall_txt, None)
    thr_txt = "throughput 25.2-80.4 % higher"
    add("time / iteration, ROG-4 / BSP", "ROG-4", "BSP", it, _art_ratio("ROG-4", "BSP", "iter_s"), THROUGHPUT, thr_txt, ("<=", 0.7))
    add("time / iteration, ROG-4 / SSP-4", "ROG-4", "SSP-4", it, _art_ratio("ROG-4", "SSP-4", "iter_s"), THROUGHPUT, thr_txt, None)
    add("time / iteration, ROG-20 / SSP-20", "ROG-20", "SSP-20", it, _art_ratio("ROG-20", "SSP-20", "iter_s"), THROUGHPUT, thr_txt, None)
    add("accuracy at equal iterations, ROG-4 - BSP", "ROG-4", "BSP", lambda m: m.acc_at_equal_iters, None, None,
        "statistical efficiency about equal to BSP's", (">=", -1.5), unit="points", combine="diff")
    art_gain = _art("ROG-4", "acc_60min") - max(_art("BSP", "acc_60min"), _art("SSP-4", "acc_60min"))
    compared = [m for lab in ("ROG-4", "BSP", "SSP-4", "FLOWN") for m in select(metrics, lab, setting)]
    t_eq = min((float(m.run.accuracy["time_s"].max()) for m in compared if not m.run.accuracy.empty), default=None)
    add(f"accuracy at equal time ({_f(t_eq, 0)} s, the shortest of these runs), ROG-4 - best of BSP / SSP-4 / FLOWN",
        "ROG-4", ["BSP", "SSP-4", "FLOWN"], lambda m: accuracy_at_time(m.accuracy_curve, t_eq), art_gain, (4.9, 6.5),
        "+4.9-6.5 points at 60 min", None, unit="points", combine="diff_best")
    art_ttt = ratio(_art("ROG-4", "ttt_s"), min(_art("BSP", "ttt_s"), _art("SSP-4", "ttt_s")))
    add("time to target, ROG-4 / min(BSP, SSP-4, FLOWN)", "ROG-4", ["BSP", "SSP-4", "FLOWN"], lambda m: m.time_to_target_s,
        art_ttt, None, "no number (Fig. 6c)", ("<=", 0.75))
    en_txt = "20.4-50.7 % less energy to 64 %"
    add("energy to target, ROG-4 / BSP", "ROG-4", "BSP", en, None, ENERGY_CUT, en_txt, ("<=", 0.8))
    add("energy to target, ROG-4 / SSP-4", "ROG-4", "SSP-4", en, _art_ratio("ROG-4", "SSP-4", "energy_kj"), ENERGY_CUT, en_txt, ("<=", 0.8))
    # the sensitivity items (their runs vary one setting away from the base)
    runs = [m.run for m in sens]
    for w in sorted({r.workers for r in runs if r.workers != setting.workers}):
        add(f"stall / iteration, ROG-4 / BSP at {w} workers", "ROG-4", "BSP", st, None, None, "(no stall claim)",
            ("<=", 0.6), among=sens, workers=w)
        paper = {6: 1 - 0.481, 8: 1 - 0.551}.get(w)
        add(f"energy to target, ROG-4 / BSP at {w} workers", "ROG-4", "BSP", en, None,
            None if paper is None else (paper, paper), f"-{(1 - paper) * 100:.1f} % energy" if paper else "(no claim)",
            None, among=sens, workers=w)
    for b in sorted({r.batch_multiple for r in runs if r.batch_multiple != setting.batch_multiple}):
        add(f"stall / iteration, ROG-4 / BSP at batch x{b}", "ROG-4", "BSP", st, None, None, "(no stall claim)",
            ("<=", 0.6), among=sens, batch_multiple=b)
        paper = {2: 1 - 0.303, 4: 1 - 0.337}.get(b)
        add(f"energy to target, ROG-4 / BSP at batch x{b}", "ROG-4", "BSP", en, None,
            None if paper is None else (paper, paper), f"-{(1 - paper) * 100:.1f} % energy" if paper else "(no claim)",
            None, among=sens, batch_multiple=b)
    if any(r.workers != setting.workers or r.batch_multiple != setting.batch_multiple for r in runs):
        add("stall / iteration, ROG-4 / BSP at the base setting (worker / batch items)", "ROG-4", "BSP", st, None, None,
            "(no stall claim)", ("<=", 0.6), among=sens)
    for thr in (30, 40):
        add(f"time to target, ROG-{thr} / ROG-4", f"ROG-{thr}", "ROG-4", lambda m: m.time_to_target_s,
            _art_ratio(f"ROG-{thr}", "ROG-4", "ttt_s"), (0.0, 1.0), "larger thresholds train faster early", None,
            among=thr_ms)
        art = None if _art(f"ROG-{thr}", "acc_60min") is None else _art(f"ROG-{thr}", "acc_60min") - _art("ROG-4", "acc_60min")
        add(f"final accuracy, ROG-{thr} - ROG-4", f"ROG-{thr}", "ROG-4", lambda m: m.acc_final, art, (-3.0, 0.0),
            "larger thresholds end slightly lower", None, unit="points", combine="diff", among=thr_ms)
    return rows


def replay_paragraph(metrics: Sequence[RunMetrics], setting: Setting | None = None) -> str:
    """What the two replay modes show, computed from the end-to-end runs present in both."""
    setting = setting or base_setting(metrics)
    modes = sorted({m.run.replay_mode for m in metrics if m.run.replay_mode})
    if not {"artifact", "recorded"} <= set(modes):
        return (f"Only replay mode(s) {modes or ['(not recorded in the configs)']} present: no comparison of the "
                f"`artifact` and `recorded` modes.")
    out = []
    vals: dict[tuple[str, str], float | None] = {}
    for mode in ("artifact", "recorded"):
        for lab in ("BSP", "SSP-4", "ROG-4", "SSP-20", "ROG-20", "FLOWN"):
            vals[(lab, mode)] = _mean(select(metrics, lab, setting, replay_mode=mode), lambda m: m.stall_s)
    b_a, b_r = vals[("BSP", "artifact")], vals[("BSP", "recorded")]
    if b_a is not None and b_r is not None:
        out.append(f"BSP stalls {b_a:.3f} s per iteration in `artifact` mode and {b_r:.3f} s in `recorded` mode "
                   f"({'more' if b_a > b_r else 'less'} under the artifact's long plateaus).")
    for lab in ("SSP-4", "SSP-20", "FLOWN", "ROG-4", "ROG-20"):
        ra = ratio(vals[(lab, "artifact")], b_a)
        rr = ratio(vals[(lab, "recorded")], b_r)
        if ra is None or rr is None:
            continue
        out.append(f"{lab} removes {100 * (1 - ra):.0f} % of BSP's stall in `artifact` mode and {100 * (1 - rr):.0f} % "
                   f"in `recorded` mode.")
    s4a, s4r = ratio(vals[("SSP-4", "artifact")], b_a), ratio(vals[("SSP-4", "recorded")], b_r)
    r4a, r4r = ratio(vals[("ROG-4", "artifact")], b_a), ratio(vals[("ROG-4", "recorded")], b_r)
    if s4a is not None and s4r is not None:
        agrees = s4r < s4a
        out.append(f"With sub-second rate changes SSP-4 absorbs {'more' if agrees else 'less'} of the fluctuation by "
                   f"itself than with the artifact's plateaus, which {'agrees' if agrees else 'disagrees'} with the "
                   f"four-worker model of the artifact's logs.")
    if r4a is not None and r4r is not None and s4a is not None and s4r is not None:
        gap_a, gap_r = s4a - r4a, s4r - r4r
        out.append(f"ROG-4's advantage over SSP-4 in stall is {gap_a:.2f} of BSP's stall in `artifact` mode and "
                   f"{gap_r:.2f} in `recorded` mode.")
    return " ".join(out) if out else "The end-to-end systems are not present in both replay modes: no comparison."


# ----------------------------------------------------------------------------- outputs
def build_summary(metrics: Sequence[RunMetrics], target: float | None, rule: str) -> dict[str, Any]:
    """The summary.json object: top-level ``target_acc`` (%), ``target_rule`` and ``runs``."""
    runs = {}
    for m in metrics:
        entry = m.summary_entry()
        if tuple(entry) != SUMMARY_KEYS:  # pragma: no cover - summary_entry asserts it too
            raise AssertionError("summary entry keys drifted from SUMMARY_KEYS")
        runs[m.run.run_id] = entry
    return {"target_acc": None if target is None else float(target), "target_rule": rule, "runs": runs}


def _f(x: float | None, nd: int = 2, scale: float = 1.0) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * scale:.{nd}f}"


def iteration_at_target(m: RunMetrics) -> float | None:
    """The tested workers' mean iteration count (worker 0's when only it is tested) when the (smoothed)
    accuracy curve crossed the target, interpolated in time."""
    curve = m.accuracy_curve
    if m.time_to_target_s is None or curve is None or curve.empty:
        return None
    c = curve.sort_values("time_s")
    return float(np.interp(m.time_to_target_s, c["time_s"].to_numpy(float), c["iteration"].to_numpy(float)))


def first_iteration_s(m: RunMetrics, worker: int = 0) -> float | None:
    """Seconds from the run start until ``worker`` completed its first iteration (its first push and pull)."""
    it = m.run.iterations
    if it is None or it.empty:
        return None
    w = it[(it["worker"] == worker) & (it["iteration"] == it[it["worker"] == worker]["iteration"].min())]
    return None if w.empty else float(w["t_end_s"].iloc[0])


def crossing_table(metrics: Sequence[RunMetrics], setting: Setting | None = None) -> list[str]:
    """Per run of the end-to-end setting: time to target, the tested workers' iteration then, worker 0's first
    iteration's end."""
    setting = setting or base_setting(metrics)
    rows = ["| run | time to target (s) | tested workers' mean iteration at the target | worker 0's first iteration ended (s) "
            "| s/iter |", "|---|---|---|---|---|"]
    for m in (m for m in metrics if in_setting(m.run, setting)):
        rows.append(f"| {m.run.run_id} | {_f(m.time_to_target_s, 1)} | {_f(iteration_at_target(m), 1)} "
                    f"| {_f(first_iteration_s(m), 1)} | {_f(m.iter_s, 3)} |")
    return rows


def crossing_paragraph(metrics: Sequence[RunMetrics], target: float | None, setting: Setting | None = None) -> str:
    """A sentence on how early the target is crossed (in worker 0's iterations) and what the first iteration costs."""
    setting = setting or base_setting(metrics)
    ms = [m for lab in ("BSP", "SSP-4", "FLOWN", "ROG-4") for m in select(metrics, lab, setting)]
    got = [(m.run.label, iteration_at_target(m), first_iteration_s(m), m.time_to_target_s) for m in ms]
    got = [g for g in got if g[1] is not None and g[2] is not None and g[3] is not None]
    if target is None or not got:
        return "No run of BSP / SSP-4 / FLOWN / ROG-4 in the end-to-end setting crossed a target: nothing to explain."
    parts = [f"{lab} at iteration {k:.1f} after {t:.1f} s (its first iteration took {f:.1f} s, "
             f"{100 * f / t:.0f} % of that)" for lab, k, f, t in got]
    return (f"The target {target:.2f} % is crossed by {'; '.join(parts)}. A crossing within a few iterations is "
            "decided by the first iterations, where worker 0's first push and pull over the start of its trace "
            "weigh as much as the per-iteration speed-up (every system waits for it sooner or later), and, when "
            "one worker's model is tested, by that model's swing from one test to the next; "
            "the further in (in iterations) it lies, the more it measures the throughput the stall and time "
            "composition tables show.")


def render_markdown(metrics: Sequence[RunMetrics], target: float | None, rule: str, equal_iters: int | None,
                    views: Views | None = None, robustness: Sequence[dict[str, Any]] | None = None) -> str:
    """summary.md: tables next to the paper's claims and the artifact's numbers, sentences computed
    (``views``: the other items' runs over their own budgets, :func:`item_views`; ``robustness``: the
    claims over the replicas, for the sensitivity items' decidability rule, :mod:`rog.analysis.decidable`)."""
    from .decidable import NOT_DECIDABLE, reasons
    views = views or Views()
    setting = base_setting(metrics)
    acc_sources = sorted({m.run.accuracy_source for m in metrics})
    lines = ["# Results summary", "",
             trace_source_line([m.run for m in metrics]),
             testbed_line([m.run for m in metrics]),
             f"- Runs: {len(metrics)} ({sum(m.run.status == 'done' for m in metrics)} complete).",
             f"- Target accuracy: {_f(target)} %. Rule: {rule}.",
             f"- Accuracy at equal iterations: at iteration {equal_iters if equal_iters is not None else '-'} "
             f"(the smallest last-tested iteration of the complete runs).",
             f"- Accuracy source: {', '.join(acc_sources)}.",
             energy_source_line(metrics),
             f"- End-to-end setting used for the comparisons: {setting.workers} workers, batch x{setting.batch_multiple}, "
             f"replay mode {('`' + setting.replay_mode + '`') if setting.replay_mode else '(not in the configs)'}, "
             f"control {setting.control if setting.control is not None else '(not in the configs)'}.",
             *([f"- Budgets per item: {', '.join(f'{n} {b:g} s' for n, b in views.budgets_s.items())}. A run shared by "
                "items ran for the longest; every other item reads it over its own budget (its first seconds), "
                "so every run of an item is compared over the same training time."] if views.budgets_s else []),
             "",
             "## Runs", "",
             "| run | system | testbed | replay | workers | batch | status | iterations | s/iter | compute | comm | stall "
             "| data wait | other | acc start | acc final | acc @ equal iters | time to target (s) | energy to target (kJ) "
             "| energy source |", "|---" * 20 + "|"]
    for m in metrics:
        r = m.run
        lines.append(f"| {r.run_id} | {r.label} | {testbed_cell(r)} | {r.replay_mode or '-'} | {r.workers} "
                     f"| x{r.batch_multiple} | {r.status} "
                     f"| {m.iterations} | {_f(m.iter_s, 3)} | {_f(m.compute_s, 3)} | {_f(m.comm_s, 3)} | {_f(m.stall_s, 3)} "
                     f"| {_f(m.data_wait_s, 3)} | {_f(m.other_s, 3)} | {_f(m.acc_start)} | {_f(m.acc_final)} | {_f(m.acc_at_equal_iters)} "
                     f"| {_f(m.time_to_target_s, 1)} | {_f(m.energy_to_target_j, 3, 1e-3)} | {m.energy_source} |")
    lines += ["", "## Time composition next to the artifact's logs", "",
              "Seconds per iteration, means over workers (the artifact: one Jetson worker). Our compute is paced "
              "to a scaled device profile, so compare the shares (stall / compute, comm / compute), not seconds.", "",
              "| system | ours s/iter | ours compute | ours comm | ours stall | ours stall/compute | artifact s/iter "
              "| artifact compute | artifact comm | artifact stall | artifact stall/compute | sentence |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    labels = []
    for m in metrics:
        if m.run.label not in labels:
            labels.append(m.run.label)
    for lab in labels:
        ms = select(metrics, lab, setting)
        if not ms:
            continue
        c, co, sl, i = (_mean(ms, g) for g in (lambda m: m.compute_s, lambda m: m.comm_s, lambda m: m.stall_s,
                                                 lambda m: m.iter_s))
        ours_share = ratio(sl, c)
        art = ARTIFACT.get(lab, {})
        art_share = ratio(art.get("stall_s"), art.get("compute_s"))
        if ours_share is None or art_share is None:
            sent = "No artifact log for this system." if not art else "A value is missing."
        else:
            rel = ours_share / art_share if art_share else float("inf")
            sent = (f"Our stall is {ours_share:.2f}x compute against the artifact's {art_share:.2f}x "
                    + ("(close)." if 0.67 <= rel <= 1.5 else f"({'more' if rel > 1 else 'less'} stall relative to compute).")
                    )
        lines.append(f"| {lab} | {_f(i, 3)} | {_f(c, 3)} | {_f(co, 3)} | {_f(sl, 3)} | {_f(ours_share)} "
                     f"| {_f(art.get('iter_s'))} | {_f(art.get('compute_s'))} | {_f(art.get('comm_s'))} "
                     f"| {_f(art.get('stall_s'))} | {_f(art_share)} | {sent} |")
    lines += ["", "## Claims", "",
              "Ratios are ours / baseline in the end-to-end setting (other settings where named); 'points' are "
              "accuracy differences; several runs of a system (seeds) are averaged over those with a value, and the "
              "'ours' cell says how many had one. " + reference_sources_line(), "",
              "| comparison | ours | artifact | paper | acceptance | verdict | sentence |", "|---|---|---|---|---|---|---|"]
    claims = claim_rows(metrics, setting, views.sensitivity, views.threshold)
    undecided = reasons(claims, views.budgets_s, robustness)
    for c in claims:
        unit = "x" if c.unit == "x" else " pts"
        fmt = (lambda x: "-" if x is None else f"{x:.2f}{unit}")
        ours = fmt(c.ours) + (f" ({c.reached()})" if c.reached() else "")
        bound = "-" if c.bound is None else f"{c.bound[0]} {c.bound[1]:g}{unit}"
        verdict, sentence = c.verdict(), c.sentence()
        if c.name in undecided:
            verdict = NOT_DECIDABLE
            sentence = f"{undecided[c.name][0].upper()}{undecided[c.name][1:]}; ours is shown, not judged. {sentence}"
        lines.append(f"| {c.name} | {ours} | {fmt(c.artifact)} | {c.paper_text} | {bound} | {verdict} "
                     f"| {sentence} |")
    lines += ["", "## Where the time to target is decided", "", crossing_paragraph(metrics, target, setting), ""]
    lines += crossing_table(metrics, setting)
    horizon = views.replay_horizon_s
    lines += ["", "## Replay modes", "",
              (f"Both modes read over their first {horizon:g} s (the shorter of the two items' budgets). " if horizon else "")
              + replay_paragraph(views.replay or metrics, setting), ""]
    notes = [f"- {m.run.run_id}: {n}" for m in metrics for n in m.notes]
    if notes:
        lines += ["## Notes", "", *notes, ""]
    return "\n".join(lines)


@dataclass
class Views:
    """What the items' own budgets and targets give besides the primary metrics (:func:`item_views`):
    the worker / batch items' runs, the threshold item's, and the end-to-end systems of both replay
    modes over one budget (the replay-mode paragraph); None where the items are not there."""

    sensitivity: list[RunMetrics] | None = None
    threshold: list[RunMetrics] | None = None
    replay: list[RunMetrics] | None = None
    replay_horizon_s: float | None = None  # the seconds both replay modes are read over
    budgets_s: dict[str, float] | None = None
    first_runs: list[RunData] | None = None  # the first item's runs as it reads them (over its budget)
    item_sets: dict[str, list[RunMetrics]] | None = None  # item name -> its runs' metrics (own budget and target)


def _base(name: str) -> str:
    return name.split(":", 1)[0]  # --traces items are "<item>:<trace stem>"


def item_views(runs: Sequence[RunData], items: dict[str, Sequence[str]], target_fraction: float = TARGET_FRACTION,
               power: str = "auto", smooth_tests: int = SMOOTH_TESTS, budgets_s: dict[str, float] | None = None
               ) -> tuple[list[RunMetrics], dict[str, Any], Views]:
    """One target and one equal-iteration count per evaluation item (one target for all runs of an
    item), every item read over its own budget.

    ``items``: item name -> run ids (``result/plan.json``); ``budgets_s``: item name -> budget (its
    ``budgets_s``): a run longer than its item's budget is read over the budget
    (:func:`rog.analysis.load.clip_run`).  Returns every run's metrics in the first item that holds it
    (its primary item; runs in no item form one more group, ``(other)``), per item ``{"target_acc",
    "target_rule", "equal_iters", "budget_s", "runs": {run_id: {"time_to_target_s",
    "energy_to_target_j", "acc_at_equal_iters"}}}``, and the :class:`Views` of the other items."""
    budgets_s = dict(budgets_s or {})
    by_id = {r.run_id: r for r in runs}
    groups = [(name, [by_id[i] for i in ids if i in by_id]) for name, ids in items.items()]
    covered = {r.run_id for _, g in groups for r in g}
    rest = [r for r in runs if r.run_id not in covered]
    if rest:
        groups.append(("(other)", rest))
    primary: dict[str, RunMetrics] = {}
    per_item: dict[str, Any] = {}
    sets: dict[str, list[RunMetrics]] = {}
    views = Views(budgets_s=budgets_s or None)
    from .paper_sections import item_target_rules  # an item's own target rule (the compare item's), from its paper
    target_rules = item_target_rules()
    for name, group in groups:
        budget = budgets_s.get(name)
        if budget is not None:
            group = [clip_run(r, budget) for r in group]
        if views.first_runs is None:
            views.first_runs = group  # the first item's, also when none of its runs is there
        if not group:
            continue
        ms, target, rule, eq = compute_metrics(group, target_fraction, power, smooth_tests,
                                               sets_target=target_rules.get(_base(name)))
        sets[name] = ms
        per_item[name] = {"target_acc": None if target is None else float(target), "target_rule": rule,
                          "equal_iters": eq, "budget_s": budget, "runs": {
                              m.run.run_id: {"time_to_target_s": m.summary_entry()["time_to_target_s"],
                                             "energy_to_target_j": m.summary_entry()["energy_to_target_j"],
                                             "acc_at_equal_iters": m.summary_entry()["acc_at_equal_iters"]}
                              for m in ms}}
        for m in ms:
            primary.setdefault(m.run.run_id, m)

    def union(kinds: tuple[str, ...]) -> list[RunMetrics] | None:
        seen: dict[str, RunMetrics] = {}
        for name, ms in sets.items():
            if _base(name) in kinds:
                for m in ms:
                    seen.setdefault(m.run.run_id, m)
        return list(seen.values()) or None

    views.item_sets = sets
    views.sensitivity = union(("batch", "workers"))
    views.threshold = union(("threshold",))
    # both replay modes over the shorter of the two budgets: stall per iteration over the same training time
    e2e = [n for n in sets if _base(n) == "outdoors"]
    rec = [n for n in sets if _base(n) == "recorded"]
    if e2e and rec:
        horizon = min((budgets_s[n] for n in e2e + rec if n in budgets_s), default=None)
        both = [by_id[i] for n in e2e + rec for i in items.get(n, ()) if i in by_id]
        both = list({r.run_id: (r if horizon is None else clip_run(r, horizon)) for r in both}.values())
        views.replay = compute_metrics(both, target_fraction, power, smooth_tests)[0]
        views.replay_horizon_s = horizon
    return [primary[r.run_id] for r in runs if r.run_id in primary], per_item, views


def _items_markdown(per_item: dict[str, Any]) -> str:
    lines = ["## Targets per item", "",
             "One target accuracy for all runs of an item; a run shared by several items is measured against each "
             "item's target here, and against its first item's target in the tables above.", ""]
    for name, d in per_item.items():
        lines += [f"### {name}", "", *([f"- Budget: {d['budget_s']:g} s (longer runs read over their first "
                                         f"{d['budget_s']:g} s)."] if d.get("budget_s") else []),
                  f"- Target: {_f(d['target_acc'])} %. Rule: {d['target_rule']}.",
                  f"- Equal iterations: {d['equal_iters'] if d['equal_iters'] is not None else '-'}.", "",
                  "| run | time to target (s) | energy to target (kJ) | acc @ equal iters |", "|---|---|---|---|"]
        for rid, v in d["runs"].items():
            lines.append(f"| {rid} | {_f(v['time_to_target_s'], 1)} | {_f(v['energy_to_target_j'], 3, 1e-3)} "
                         f"| {_f(v['acc_at_equal_iters'])} |")
        lines.append("")
    return "\n".join(lines)


def write_summary(result_dir: str | Path, pattern: str | Sequence[str] = "*", target_fraction: float = TARGET_FRACTION,
                  power: str = "auto", stem: str = "summary", items: dict[str, Sequence[str]] | None = None,
                  smooth_tests: int = SMOOTH_TESTS, budgets_s: dict[str, float] | None = None) -> tuple[Path, Path]:
    """Load the runs under ``result_dir`` matching ``pattern`` (glob or globs) and write
    ``<stem>.json`` and ``<stem>.md`` into ``result_dir``; returns both paths.  With ``items`` (item ->
    run ids) every item gets its own target (:func:`item_views`); the top-level ``target_acc`` is
    the first item's and ``items`` holds every item's target, rule and per-run measures; with
    ``budgets_s`` (item -> seconds, plan.json's) every item reads its runs over its own budget."""
    result_dir = Path(result_dir)
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    dirs = sorted({d for p in patterns for d in find_runs(result_dir, p)})
    if not dirs:
        raise ValueError(f"no run folder under {str(result_dir)!r} matches {patterns}; check --result-dir and --runs")
    runs: list[RunData] = [load_run(d) for d in dirs]
    if items:
        metrics, per_item, views = item_views(runs, items, target_fraction, power, smooth_tests, budgets_s)
        first = next(iter(per_item.values()))
        target, eq = first["target_acc"], first["equal_iters"]
        rule = f"per item (top level: item {next(iter(per_item))!r}): {first['target_rule']}"
    else:
        metrics, target, rule, eq = compute_metrics(runs, target_fraction, power, smooth_tests)
        per_item, views = None, None
    from .robustness import robustness, robustness_markdown

    doc = build_summary(metrics, target, rule)
    robust, per_replica = robustness(views.item_sets if views is not None else None, metrics)
    doc["robustness"] = robust
    md_text = render_markdown(metrics, target, rule, eq, views, robust)
    md_text += "\n" + robustness_markdown(robust, per_replica, views.budgets_s if views is not None else None)
    from .causes import causes_markdown, explain  # why a claim fails on some replicas
    why = explain(robust, per_replica, [m for ms in (views.item_sets or {}).values() for m in ms] if views is not None else metrics)
    if why:  # some claim fails on some replicas
        doc["robustness_causes"] = why
        md_text += "\n" + causes_markdown(why)
    first_runs = views.first_runs if views is not None and views.first_runs is not None else runs
    single = single_worker_measures(first_runs, 0, target_fraction, power, smooth_tests)
    if single is not None:
        doc["worker0"] = single
        md_text += "\n" + single_worker_markdown(single)
    sens_rows = target_sensitivity(first_runs, power=power, smooth_tests=smooth_tests)
    doc["target_sensitivity"] = sens_rows
    md_text += "\n" + target_sensitivity_markdown(sens_rows)
    from .efficiency import efficiency_section  # iterations to each level of the rise, where the target falls
    eff = efficiency_section(first_runs, target_fraction, power, smooth_tests) if items else None
    if eff is not None:
        doc["efficiency"], md_text = eff[0], md_text + "\n" + eff[1]
    atp = atp_table(runs)  # every ROG run's budgets and delivered shares, over its whole event logs
    doc["atp"] = atp
    if atp:
        md_text += "\n" + atp_markdown(atp)
    from .horizons import long_horizon, long_horizon_markdown  # outdoors_long at 150 s, 30 and 60 paper-minutes
    lh = long_horizon(runs, items, budgets_s, target_fraction=target_fraction, power=power, smooth_tests=smooth_tests) if items else None
    if lh is not None:
        doc["long_horizon"] = lh
        md_text += "\n" + long_horizon_markdown(lh)
    if per_item is not None:
        doc["items"] = per_item
        md_text += "\n" + _items_markdown(per_item)
    from .paper_sections import sections  # each reproduced paper's own tables (rog/papers/<paper>/)
    for name, entry, section_md in sections(runs, views.item_sets if views is not None else None, result_dir):
        doc[name], md_text = entry, md_text + "\n" + section_md
    js = result_dir / f"{stem}.json"
    md = result_dir / f"{stem}.md"
    js.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    md.write_text(md_text, encoding="utf-8")
    return js, md


# re-read sections (worker 0's model alone, the target's position): their own module, names kept here
from .rereadings import (ACCURACY_CLAIMS, EQUAL_TIME_CLAIM, SENSITIVITY_FRACTIONS, single_worker_markdown,  # noqa: E402
                         single_worker_measures, target_sensitivity, target_sensitivity_markdown)
from .plan_file import read_plan  # noqa: E402,F401  (plan.json of run_items.py; its own module)
