"""summary.md's sections that re-read the first item's runs another way.

* worker 0's model alone (:func:`single_worker_measures`): the accuracy claims read from one worker's
  tests, as the original artifact measured, with their own target;
* the target's position (:func:`target_sensitivity`): the time- and energy-to-target claims with the
  target at other fractions of the rise.
"""

from __future__ import annotations

from typing import Any, Sequence

from rog.analysis.claim_table import base_setting, fmt, pair
from rog.analysis.load import RunData, worker_view
from rog.analysis.metrics import SMOOTH_TESTS, TARGET_FRACTION, compute_metrics
from rog.analysis.tables import markdown_table

from .claims import claim_rows

__all__ = ["ACCURACY_CLAIMS", "EQUAL_TIME_CLAIM", "SENSITIVITY_FRACTIONS", "single_worker_measures",
           "single_worker_markdown", "target_sensitivity", "target_sensitivity_markdown"]

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
