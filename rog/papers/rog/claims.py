"""ROG's claims table: every comparison of the paper (MICRO 2022), the artifact's logged numbers and this
reproduction's acceptance bounds (docs/reproduction.md), read from the present runs.

Also the two paragraphs computed beside it: where the time to target is decided (:func:`crossing_table`,
:func:`crossing_paragraph`) and what the two replay modes show (:func:`replay_paragraph`).  The reference
numbers and their sources are in :mod:`.references`; the table's shape in :mod:`rog.analysis.claim_table`.

Re-readings: worker 0's model alone, and the target's position
--------------------------------------------------------------

summary.md's sections that re-read the first item's runs another way.

* worker 0's model alone (:func:`single_worker_measures`): the accuracy claims read from one worker's
  tests, as the original artifact measured, with their own target;
* the target's position (:func:`target_sensitivity`): the time- and energy-to-target claims with the
  target at other fractions of the rise.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from rog.analysis.claim_table import Claim, Setting, base_setting, fmt, in_setting, mean, pair, select
from rog.analysis.load import RunData, worker_view
from rog.analysis.metrics import SMOOTH_TESTS, TARGET_FRACTION, RunMetrics, accuracy_at_time, compute_metrics, ratio
from rog.analysis.tables import markdown_table

from .references import ARTIFACT, ENERGY_CUT, STALL_CUT, THROUGHPUT

__all__ = ["claim_key", "claim_rows", "replay_paragraph", "iteration_at_target", "first_iteration_s", "crossing_table",
           "crossing_paragraph", "ACCURACY_CLAIMS", "EQUAL_TIME_CLAIM", "SENSITIVITY_FRACTIONS",
           "single_worker_measures", "single_worker_markdown", "target_sensitivity",
           "target_sensitivity_markdown"]


# the end-to-end claims that depend on which model is tested (the rest are time composition, the same
# either way); the accuracy-at-equal-time claim names its time, so it is matched by its start
ACCURACY_CLAIMS = ("accuracy at equal iterations, ROG-4 - BSP", "time to target, ROG-4 / min(BSP, SSP-4, FLOWN)",
                   "energy to target, ROG-4 / BSP", "energy to target, ROG-4 / SSP-4")
EQUAL_TIME_CLAIM = "accuracy at equal time"


def single_worker_measures(runs: Sequence[RunData], worker: int = 0, target_fraction: float = TARGET_FRACTION,
                           power: str = "auto", smooth_tests: int = SMOOTH_TESTS) -> dict[str, Any] | None:
    """The accuracy measures read from one worker's model alone (the artifact's measure), with their own
    target; None unless some run tested more than one worker.  ``{"worker", "target_acc", "target_rule",
    "equal_iters", "runs": {run_id: {"time_to_target_s", "energy_to_target_j", "acc_at_equal_iters",
    "acc_final"}}, "claims": [{"comparison", "ours", "verdict", "unit"}]}``."""
    if not any(r.accuracy_tests is not None and not r.accuracy_tests.empty and r.accuracy_tests["worker"].nunique() > 1
               for r in runs):
        return None
    views = [v for v in (worker_view(r, worker) for r in runs) if v is not None]
    if not views:
        return None
    ms, target, rule, eq = compute_metrics(views, target_fraction, power, smooth_tests)
    keys = ("time_to_target_s", "energy_to_target_j", "acc_at_equal_iters", "acc_final")
    entries = {m.run.run_id: m.summary_entry() for m in ms}
    return {"worker": worker, "target_acc": None if target is None else float(target), "target_rule": rule,
            "equal_iters": eq, "runs": {rid: {k: e[k] for k in keys} for rid, e in entries.items()},
            "claims": [{"comparison": c.name, "ours": c.ours, "verdict": c.verdict(), "unit": c.unit}
                       for c in claim_rows(ms) if c.name in ACCURACY_CLAIMS or c.name.startswith(EQUAL_TIME_CLAIM)]}


def single_worker_markdown(d: dict[str, Any] | None) -> str:
    """summary.md's section on the one-worker measure (empty when there is none)."""
    if not d:
        return ""
    w = d["worker"]
    lines = [f"## Worker {w}'s model alone (the artifact's measure)", "",
             f"The tables above read accuracy from the team's curve: the mean over every worker's model. The original "
             f"artifact tested one worker's model. Here the accuracy claims are read from worker {w}'s tests "
             f"alone, in the first item's runs, with their own target. Worker {w} replays the trace from offset 0; "
             f"when that part of the trace is a long fade, it is the permanent straggler, and ROG's ATP gives a "
             f"straggler the MTA share of rows only, so its model is the team's stalest.", "",
             f"- Target: {fmt(d['target_acc'])} %. Rule: {d['target_rule']}.",
             f"- Equal iterations: {d['equal_iters'] if d['equal_iters'] is not None else '-'}.", "",
             *markdown_table(["comparison", f"ours (worker {w} alone)", "verdict against the acceptance bound"])]
    for c in d["claims"]:
        v = c["ours"]
        unit = "x" if c["unit"] == "x" else " pts"
        lines.append(f"| {c['comparison']} | {'-' if v is None else f'{v:.2f}{unit}'} | {c['verdict']} |")
    lines += ["", *markdown_table(["run", "time to target (s)", "energy to target (kJ)", "acc @ equal iters",
                                   "acc final"])]
    for rid, v in d["runs"].items():
        lines.append(f"| {rid} | {fmt(v['time_to_target_s'], 1)} | {fmt(v['energy_to_target_j'], 3, 1e-3)} "
                     f"| {fmt(v['acc_at_equal_iters'])} | {fmt(v['acc_final'])} |")
    return "\n".join(lines) + "\n"


SENSITIVITY_FRACTIONS = (0.5, 0.6, 0.7, 0.8, 0.9)  # target fractions of the target-sensitivity table


def target_sensitivity(runs: Sequence[RunData], fractions: Sequence[float] = SENSITIVITY_FRACTIONS,
                       power: str = "auto", smooth_tests: int = SMOOTH_TESTS) -> list[dict[str, Any]]:
    """The time- and energy-to-target claims of the end-to-end setting recomputed with the target at
    other fractions of the way from the start to the lowest peak (the summary's rule uses
    :data:`rog.analysis.metrics.TARGET_FRACTION`).  When the curves share a plateau, a target on it is
    crossed by every system while lingering there and the ratio swings with the fraction; this table
    shows whether a verdict is a property of the curves or of where the target happens to fall.
    One ``{"fraction", "target_acc", "ttt_ratio", "energy_ratio_bsp", "energy_ratio_ssp4"}`` per fraction."""
    out = []
    for f in fractions:
        ms, target, _, _ = compute_metrics(runs, f, power, smooth_tests)
        setting = base_setting(ms)
        ttt = pair(ms, setting, "ROG-4", ["BSP", "SSP-4", "FLOWN"], lambda m: m.time_to_target_s)[0]
        e_b = pair(ms, setting, "ROG-4", "BSP", lambda m: m.energy_to_target_j, same_source=True)[0]
        e_s = pair(ms, setting, "ROG-4", "SSP-4", lambda m: m.energy_to_target_j, same_source=True)[0]
        out.append({"fraction": float(f), "target_acc": None if target is None else float(target), "ttt_ratio": ttt,
                    "energy_ratio_bsp": e_b, "energy_ratio_ssp4": e_s})
    return out


def target_sensitivity_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """summary.md's table of :func:`target_sensitivity` (empty when there are no rows)."""
    if not rows:
        return ""
    lines = ["## How the time and energy to target depend on where the target is", "",
             "The claims above use one rule for the target (start + 0.8 x (lowest peak - start)). The same "
             "end-to-end runs with the target at other fractions of that rise (the acceptance bounds: time <= 0.75x, "
             "energy <= 0.8x):", "",
             *markdown_table(["fraction", "target (%)", "time to target, ROG-4 / min(BSP, SSP-4, FLOWN)",
                              "energy, ROG-4 / BSP", "energy, ROG-4 / SSP-4"])]
    for r in rows:
        lines.append(f"| {r['fraction']:g} | {fmt(r['target_acc'])} | {fmt(r['ttt_ratio'])} | {fmt(r['energy_ratio_bsp'])} "
                     f"| {fmt(r['energy_ratio_ssp4'])} |")
    return "\n".join(lines) + "\n"


_EQUAL_TIME = re.compile(r"\([^()]*s, the shortest of these runs\)")


def claim_key(name: str) -> str:
    """The claim's name without what differs between replicas (the equal-time claim names its time)."""
    return _EQUAL_TIME.sub("(at the end of the shortest of these runs)", name)


def _art(label: str, key: str) -> float | None:
    return ARTIFACT.get(label, {}).get(key)


def _art_ratio(a: str, b: str, key: str) -> float | None:
    return ratio(_art(a, key), _art(b, key))


def claim_rows(metrics: Sequence[RunMetrics], setting: Setting | None = None,
               sensitivity: Sequence[RunMetrics] | None = None, threshold: Sequence[RunMetrics] | None = None) -> list[Claim]:
    """Every comparison of the paper, the artifact (:mod:`.references`) and the acceptance bounds that the present runs support (others: not measured).

    The worker / batch rows are read from ``sensitivity`` and the threshold rows from ``threshold``
    when given (:class:`.item_groups.ItemGroups`: those items' runs over their own budget and target), else from ``metrics``."""
    setting = setting or base_setting(metrics)
    sens = list(metrics) if sensitivity is None else list(sensitivity)
    thr_ms = list(metrics) if threshold is None else list(threshold)
    st = lambda m: m.stall_s  # noqa: E731
    it = lambda m: m.iter_s  # noqa: E731
    en = lambda m: m.energy_to_target_j  # noqa: E731
    rows: list[Claim] = []

    def add(name, a, b, get, artifact, paper, paper_text, bound, unit="x", combine="ratio", among=None, **override):
        v, why, ids, counts = pair(metrics if among is None else among, setting, a, b, get, combine,
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
    add(f"accuracy at equal time ({fmt(t_eq, 0)} s, the shortest of these runs), ROG-4 - best of BSP / SSP-4 / FLOWN",
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
            vals[(lab, mode)] = mean(select(metrics, lab, setting, replay_mode=mode), lambda m: m.stall_s)
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
    rows = [*markdown_table(["run", "time to target (s)", "tested workers' mean iteration at the target",
                             "worker 0's first iteration ended (s)", "s/iter"])]
    for m in (m for m in metrics if in_setting(m.run, setting)):
        rows.append(f"| {m.run.run_id} | {fmt(m.time_to_target_s, 1)} | {fmt(iteration_at_target(m), 1)} "
                    f"| {fmt(first_iteration_s(m), 1)} | {fmt(m.iter_s, 3)} |")
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
