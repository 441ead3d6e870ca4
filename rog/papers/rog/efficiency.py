"""ROG's statistical efficiency and where the target falls, read from the runs' own curves and event logs.

Three readings of one comparison, each a second, stated reading beside the claims (no bound changes):

* **Iterations to each level of the rise** (:data:`LEVELS`: 0.5, 0.7, 0.8, 0.9): per level, the summary's
  target rule at that fraction (:func:`rog.analysis.metrics.select_target` over the compared runs' smoothed
  curves), the iteration at which each run's curve crosses it (interpolated in time,
  :func:`rog.papers.rog.robustness.crossing_iteration`) and ROG-4's count over BSP's and SSP-4's.  A ratio
  above 1: ROG-4 needed more iterations (staler models) to get there.
* **Where the target falls**: each run's crossing of the 0.8 target as a share of its training time, and
  the first fade of the replayed links (:func:`rog.papers.rog.robustness.first_fade_s`) as a share of the same.
* **ROG-4 to each baseline's final accuracy**: the time ROG-4's curve first reaches the final (smoothed)
  accuracy of each baseline, over that baseline's training time.

**Which rows go stale longest**: every ``staleness`` record's per-tensor maximum (``tensor_max``, iterations
a tensor's stalest row trails the push count), averaged over a run's records and workers; the tensors with
the largest mean, named from the run's ``layout.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rog.analysis.metrics import SMOOTH_TESTS, compute_metrics, select_target, time_to_target_s
from rog.policies.registry import reference_systems

from .robustness import crossing_iteration, run_fades
from rog.analysis.tables import fmt, markdown_table

__all__ = ["LEVELS", "iterations_to_levels", "level_ratios", "target_position", "time_to_final_of",
           "stale_tensors", "efficiency", "efficiency_markdown",
           "efficiency_section"]

LEVELS = (0.5, 0.7, 0.8, 0.9)
SUBJECT = "ROG-4"
BASELINES = ("BSP", "SSP-4")
TOP_TENSORS = 5


def _curves(metrics) -> dict[str, Any]:
    return {m.label: m.accuracy_curve for m in metrics if m.accuracy_curve is not None and not m.accuracy_curve.empty}


def _sets_targets(m) -> bool:
    """Whether a run sets the level targets: a reference baseline (DDP) is measured, it does not set them
    (the summary's target rule, :func:`rog.analysis.metrics.compute_metrics`)."""
    cfg = getattr(getattr(m, "run", None), "config", None)
    return not (isinstance(cfg, dict) and cfg.get("library") in reference_systems())


def iterations_to_levels(metrics, levels: Sequence[float] = LEVELS) -> dict[float, dict[str, Any]]:
    """Per level: its target (%) and each run's crossing iteration (None: never reached); the targets
    are set by the paper's systems' curves (a reference baseline is measured against them)."""
    curves = _curves(metrics)
    basis = _curves([m for m in metrics if _sets_targets(m)]) or curves
    out = {}
    for level in levels:
        target, _ = select_target(list(basis.values()), level, list(basis))
        out[level] = {"target_pct": target, "iterations": {
            label: crossing_iteration(c, time_to_target_s(c, target)) for label, c in curves.items()}}
    return out


def level_ratios(levels_table: dict[float, dict[str, Any]], subject: str = SUBJECT,
                 baselines: Sequence[str] = BASELINES) -> dict[float, dict[str, float | None]]:
    """``subject``'s crossing iteration over each baseline's, per level (None where either never crossed)."""
    out = {}
    for level, row in levels_table.items():
        its = row["iterations"]
        a = its.get(subject)
        out[level] = {b: (a / its[b] if a is not None and its.get(b) not in (None, 0) else None) for b in baselines}
    return out


def target_position(metrics, target_pct: float | None, first_fade_s: float | None) -> dict[str, dict[str, Any]]:
    """Per run: its crossing time of ``target_pct``, that as a share of its training time, and the first fade's share."""
    out = {}
    for m in metrics:
        t = time_to_target_s(m.accuracy_curve, target_pct) if m.accuracy_curve is not None else None
        span = m.train_s
        share = (t / span) if t is not None and span else None
        fade = (first_fade_s / span) if first_fade_s is not None and span else None
        out[m.label] = {"crossing_s": t, "crossing_share": share, "first_fade_share": fade, "train_s": span}
    return out


def time_to_final_of(metrics, subject: str = SUBJECT) -> dict[str, dict[str, Any]]:
    """Seconds ``subject`` takes to first reach each other run's final smoothed accuracy, and over that run's time."""
    by = {m.label: m for m in metrics}
    s = by.get(subject)
    if s is None or s.accuracy_curve is None or s.accuracy_curve.empty:
        return {}
    out = {}
    for label, m in by.items():
        if label == subject or m.accuracy_curve is None or m.accuracy_curve.empty:
            continue
        final = float(m.accuracy_curve.sort_values("time_s")["accuracy_pct"].iloc[-1])
        t = time_to_target_s(s.accuracy_curve, final)
        out[label] = {"final_pct": final, "subject_s": t, "its_train_s": m.train_s,
                      "share": (t / m.train_s) if t is not None and m.train_s else None}
    return out


def stale_tensors(run, top: int = TOP_TENSORS) -> list[dict[str, Any]]:
    """The ``top`` tensors with the largest mean per-record maximum staleness over every worker's log."""
    rows = []
    for rank in getattr(run, "worker_ranks", []):
        df = run.events.get(rank)
        if df is None or "tensor_max" not in df.columns:
            continue
        rows += [list(v) for v in df.loc[df["kind"] == "staleness", "tensor_max"] if isinstance(v, list)]
    if not rows or len({len(r) for r in rows}) != 1:
        return []
    mean = np.asarray(rows, dtype=float).mean(axis=0)
    names = _tensor_names(run, len(mean))
    order = np.argsort(-mean, kind="stable")[:top]
    return [{"tensor": names[i], "index": int(i), "mean_max_staleness": float(mean[i])} for i in order]


def _tensor_names(run, n: int) -> list[str]:
    path = Path(getattr(run, "run_dir", "")) / "layout.json"
    try:
        names = json.loads(path.read_text())["names"]
        if len(names) == n:
            return [str(x) for x in names]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return [f"tensor {i}" for i in range(n)]


def efficiency(metrics, runs, first_fade_s: float | None, target_pct: float | None) -> dict[str, Any]:
    """The three readings and the stale tensors of ``subject`` and the baselines (JSON-ready)."""
    table = iterations_to_levels(metrics)
    by_label = {getattr(r, "label", None): r for r in runs}
    return {
        "levels": {str(k): v for k, v in table.items()},
        "ratios": {str(k): v for k, v in level_ratios(table).items()},
        "target_position": target_position(metrics, target_pct, first_fade_s),
        "to_final_of": time_to_final_of(metrics),
        "stale_tensors": {lab: stale_tensors(by_label[lab]) for lab in (SUBJECT,) + BASELINES if lab in by_label},
    }


def efficiency_markdown(doc: dict[str, Any]) -> str:
    """The section: iterations to each level, where the target falls, time to the baselines' finals, stale tensors."""
    lines = ["## Statistical efficiency: iterations to each level, where the target falls", "",
             f"Iterations at which each run's smoothed curve crosses each level of the rise (the summary's target "
             f"rule at that fraction), and {SUBJECT}'s count over each baseline's (above 1: more iterations needed).", "",
             *markdown_table(["level", "target %", *(f"{SUBJECT} / {b}" for b in BASELINES)])]
    for level, row in doc["levels"].items():
        r = doc["ratios"][level]
        lines.append(f"| {float(level):g} | {fmt(row['target_pct'])} | " + " | ".join(fmt(r.get(b)) for b in BASELINES) + " |")
    lines += ["", "Where the 0.8 target falls, as a share of each run's training time, and the first fade's share:", "",
              *markdown_table(["run", "crossing (s)", "crossing share", "first fade share"])]
    for label, p in doc["target_position"].items():
        lines.append(f"| {label} | {fmt(p['crossing_s'], 1)} | {fmt(p['crossing_share'])} | {fmt(p['first_fade_share'])} |")
    if doc["to_final_of"]:
        lines += ["", f"{SUBJECT}'s time to each run's final accuracy (a second reading, not the rule):", "",
                  *markdown_table(["run", "its final %", f"{SUBJECT} reaches it at (s)", "over that run's time"])]
        for label, p in doc["to_final_of"].items():
            lines.append(f"| {label} | {fmt(p['final_pct'])} | {fmt(p['subject_s'], 1)} | {fmt(p['share'])} |")
    stale = {k: v for k, v in doc["stale_tensors"].items() if v}
    if stale:
        lines += ["", "Tensors whose stalest row trails the push count longest (mean over the staleness records):", ""]
        for label, rows in stale.items():
            lines.append(f"- {label}: " + ", ".join(f"{r['tensor']} {r['mean_max_staleness']:.2f}" for r in rows))
    return "\n".join(lines) + "\n"


def efficiency_section(runs, target_fraction: float, power: str = "auto",
                       smooth_tests: int | None = None) -> tuple[dict[str, Any], str] | None:
    """``(summary.json entry, markdown)`` for one comparison's runs, or None without a ROG-4 run to read."""
    metrics, target, _, _ = compute_metrics(runs, target_fraction, power, smooth_tests or SMOOTH_TESTS)
    if not any(m.label == SUBJECT for m in metrics):
        return None
    fades = [f for f in (run_fades(m)[0] for m in metrics) if f is not None]
    doc = efficiency(metrics, runs, min(fades) if fades else None, target)
    return doc, efficiency_markdown(doc)
