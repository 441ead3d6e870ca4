"""The ``outdoors_long`` item read at the paper's horizons: ``summary.json`` ``long_horizon``.

Rules (fixed before any long run was made):

* Horizons: the paper's 30 and 60 minutes, as wall seconds here through the runs' trace time scale
  (``horizon_s = 60 x minutes x time_scale``; :func:`rog.paper_horizons.paper_horizon_s`).
  At each horizon every run of the item is read over its first ``horizon_s`` seconds
  (:func:`rog.analysis.load.clip_run`: what a run of that length measures) and the claims table is
  computed on those clipped runs, with the summary's target rule applied to them.
* Accuracy at equal time: each system's accuracy (the team's smoothed curve) at 1/4, 1/2, 3/4 and
  all of the longest horizon, and ROG-4's gain over the best of BSP, SSP-4 and FLOWN there.
* Over replicas (``outdoors_long:<trace>:seed<n>``): per horizon, "holds on k of n", median and
  range of every claim (:func:`rog.analysis.robustness.aggregate`).
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from rog.paper_horizons import HORIZONS_MIN, LONG_ITEM

from .load import RunData, clip_run
from .metrics import SMOOTH_TESTS, TARGET_FRACTION, accuracy_at_time, compute_metrics

__all__ = ["EQUAL_TIME_FRACTIONS", "time_scale_of", "read_horizons", "long_horizon", "long_horizon_markdown"]

EQUAL_TIME_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
SYSTEMS = ("BSP", "SSP-4", "SSP-20", "FLOWN", "ROG-4", "ROG-20")
BASELINES = ("BSP", "SSP-4", "FLOWN")


def time_scale_of(runs: Sequence[RunData]) -> float | None:
    """The runs' trace time scale (wall s per trace s; the median of their configs'), None if none says."""
    vals = []
    for r in runs:
        v = r.config.get("time_scale") if isinstance(r.config, dict) else None
        if isinstance(v, (int, float)) and v > 0:
            vals.append(float(v))
    return float(statistics.median(vals)) if vals else None


def read_horizons(runs: Sequence[RunData], target_fraction: float = TARGET_FRACTION, power: str = "auto",
                  smooth_tests: int = SMOOTH_TESTS) -> dict[str, Any] | None:
    """One replica's ``{"time_scale", "horizons": [{"paper_min", "horizon_s", "claims"}], "equal_time": [...]}``
    (None without a time scale)."""
    from .summary import claim_rows

    ts = time_scale_of(runs)
    if ts is None or not runs:
        return None
    horizons, claims_at = [], {}
    for minutes in HORIZONS_MIN:
        h = 60.0 * minutes * ts
        ms = compute_metrics([clip_run(r, h) for r in runs], target_fraction, power, smooth_tests)[0]
        cs = claim_rows(ms)
        claims_at[minutes] = cs
        horizons.append({"paper_min": minutes, "horizon_s": h, "claims": [
            {"claim": c.name, "ours": c.ours, "unit": c.unit, "verdict": c.verdict(),
             "bound": None if c.bound is None else [c.bound[0], float(c.bound[1])]} for c in cs]})
    full = compute_metrics(list(runs), target_fraction, power, smooth_tests)[0]
    h_max = 60.0 * max(HORIZONS_MIN) * ts
    eq = []
    for f in EQUAL_TIME_FRACTIONS:
        t = f * h_max
        acc: dict[str, float | None] = {}
        for lab in SYSTEMS:
            vals = [accuracy_at_time(m.accuracy_curve, t) for m in full if m.label == lab]
            vals = [v for v in vals if v is not None]
            acc[lab] = float(statistics.mean(vals)) if vals else None
        base = [acc[b] for b in BASELINES if acc.get(b) is not None]
        gain = acc["ROG-4"] - max(base) if acc.get("ROG-4") is not None and base else None
        eq.append({"fraction": f, "time_s": t, "paper_min": f * max(HORIZONS_MIN), "accuracy_pct": acc,
                   "rog4_minus_best": gain})
    return {"time_scale": ts, "horizons": horizons, "equal_time": eq, "_claims": claims_at}


def long_horizon(runs: Sequence[RunData], items: dict[str, Sequence[str]], **kw) -> dict[str, Any] | None:
    """``long_horizon`` of summary.json: per replica of ``outdoors_long`` its :func:`read_horizons`, and
    per horizon the claims over the replicas; None when the plan has no ``outdoors_long`` item."""
    from .robustness import aggregate, replica_of

    by_id = {r.run_id: r for r in runs}
    reps: dict[str, dict[str, Any]] = {}
    for name, ids in items.items():
        if name.split(":", 1)[0] != LONG_ITEM:
            continue
        got = read_horizons([by_id[i] for i in ids if i in by_id], **kw)
        if got is not None:
            reps[replica_of(name)] = got
    if not reps:
        return None
    over = []
    for k, minutes in enumerate(HORIZONS_MIN):
        over.append({"paper_min": minutes, "robustness": aggregate({r: d["_claims"][minutes] for r, d in reps.items()})})
    for d in reps.values():
        d.pop("_claims")
    return {"replicas": reps, "over_replicas": over, "equal_time_fractions": list(EQUAL_TIME_FRACTIONS)}


def _f(x: float | None, unit: str = "x") -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if unit == "x" else f"{x:+.2f} pts"


def long_horizon_markdown(d: dict[str, Any] | None) -> str:
    """summary.md's section (empty without the item)."""
    if not d:
        return ""
    from .robustness import holds_text

    lines = ["## At the paper's horizons (30 and 60 minutes)", "",
             "The `outdoors_long` runs read over their first 30 and 60 paper-minutes (wall seconds = minutes x 60 x "
             "the trace time scale), each horizon with its own target by the summary's rule "
             "(`rog/analysis/horizons.py`).", ""]
    for o in d["over_replicas"]:
        lines += [f"### {o['paper_min']:g} minutes", "", "| claim | holds | median | range (min-max) | bound |",
                  "|---|---|---|---|---|"]
        for e in o["robustness"]:
            unit = "points" if e["claim"].startswith(("accuracy", "final accuracy")) else "x"
            holds = holds_text(e)
            b = "-" if e["bound"] is None else f"{e['bound'][0]} {_f(e['bound'][1], unit)}"
            lines.append(f"| {e['claim']} | {holds} | {_f(e['median'], unit)} | {_f(e['min'], unit)} to "
                         f"{_f(e['max'], unit)} | {b} |")
        lines.append("")
    lines += ["### Accuracy at equal time", "",
              "| replica | paper min | wall s | " + " | ".join(SYSTEMS) + " | ROG-4 - best of BSP / SSP-4 / FLOWN |",
              "|---|---|---|" + "---|" * len(SYSTEMS) + "---|"]
    for rep, r in d["replicas"].items():
        for e in r["equal_time"]:
            accs = " | ".join("-" if e["accuracy_pct"].get(s) is None else f"{e['accuracy_pct'][s]:.2f}" for s in SYSTEMS)
            lines.append(f"| {rep or 'all'} | {e['paper_min']:g} | {e['time_s']:.0f} | {accs} | {_f(e['rog4_minus_best'], 'points')} |")
    return "\n".join(lines) + "\n"
