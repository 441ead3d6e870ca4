"""The ``outdoors_long`` item read at 150 s and at the paper's horizons: ``summary.json`` ``long_horizon``.

Rules (the horizons, equal-time fractions and claims were fixed before any long run was made; the
150 s reading, the per-horizon efficiency readings and the verdict-change rule were added, and fixed,
while the first long runs were under way and before any of their outcomes was read):

* Horizons: the ``outdoors`` item's budget (150 s in the quick profile: the plan's ``budgets_s`` for
  ``outdoors:<replica>`` when the plan has it, else :data:`rog.paper_horizons.QUICK_E2E_BUDGET_S`), and
  the paper's 30 and 60 minutes as wall seconds here through the runs' trace time scale
  (``horizon_s = 60 x minutes x time_scale``; :func:`rog.paper_horizons.paper_horizon_s`).
  At each horizon every run of the item is read over its first ``horizon_s`` seconds
  (:func:`rog.analysis.load.clip_run`: what a run of that length measures) and the claims table is
  computed on those clipped runs, with the summary's target rule applied to them.
* Per horizon, the readings of :mod:`rog.papers.rog.efficiency` on the same clipped runs: where each
  system crosses that horizon's target (seconds and share of the run), ROG-4's time to each baseline's
  final accuracy, iterations to each level of the rise; the first fade of the replayed links is read
  once over the whole run (a later horizon sees the same trace).
* Accuracy at equal time: each system's accuracy (the team's smoothed curve) at 1/4, 1/2, 3/4 and
  all of the longest horizon, and ROG-4's gain over the best of BSP, SSP-4 and FLOWN there.
* Over replicas (``outdoors_long:<trace>:seed<n>``): per horizon, "holds on k of n", median and
  range of every claim (:func:`rog.papers.rog.robustness.aggregate`).
* A verdict changes with the horizon when a claim's state at 150 s differs from its state at 30 or
  60 minutes, a state being *holds* (on every replica that measured it), *fails* (on none) or *mixed*.

The markdown of the long horizons
---------------------------------

summary.md's section on the ``outdoors_long`` item, from :func:`rog.papers.rog.horizons.long_horizon`.

In order: the claims at every horizon side by side (150 s, the paper's 30 and 60 minutes), the claims
whose verdict changes with the horizon, ROG-4's time and energy to target over each baseline's, where each system crosses each horizon's target (and the first
fade), ROG-4's time to each baseline's final accuracy, iterations to each level of the rise over the
whole run, the tensors that stay stale longest, and the accuracy at equal time.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from rog.analysis.load import RunData, clip_run, time_scale_of
from rog.analysis.metrics import SMOOTH_TESTS, TARGET_FRACTION, accuracy_at_time, compute_metrics
from rog.analysis.tables import fmt, markdown_table
from rog.paper_horizons import E2E_ITEM, HORIZONS_MIN, LONG_ITEM, QUICK_E2E_BUDGET_S

from .efficiency import BASELINES as LEVEL_BASELINES  # the baselines of the iterations-to-level ratios
from .efficiency import SUBJECT, efficiency

__all__ = ["EQUAL_TIME_FRACTIONS", "read_horizons", "pair_ratios", "long_horizon", "verdict_state", "horizon_changes",
           "long_horizon_markdown"]


def _v(x: float | None, unit: str = "x") -> str:
    """A ratio (``1.23x``) or a signed difference in points (``+1.23 pts``)."""
    return fmt(x, unit="x") if unit == "x" else fmt(x, unit=" pts", sign=True)


def _claims_table(d: dict[str, Any]) -> list[str]:
    from .robustness import holds_text

    over = d["over_replicas"]
    units = d.get("units", {})
    order: list[str] = []
    for o in over:
        order += [e["claim"] for e in o["robustness"] if e["claim"] not in order]
    lines = ["### Every claim at each horizon", "",
             "Per horizon: the median over the replicas, its range, and on how many replicas the claim meets its bound "
             "('-': no replica has a value, e.g. a target not reached by that horizon).", "",
             *markdown_table(["claim", "bound", *(o["label"] for o in over)])]
    for claim in order:
        unit = units.get(claim, "x")
        cells, bound = [], None
        for o in over:
            e = next((x for x in o["robustness"] if x["claim"] == claim), None)
            if e is None or not e["of"]:
                cells.append("-")
                continue
            bound = bound or e["bound"]
            rng = f" ({_v(e['min'], unit)} to {_v(e['max'], unit)})" if e["of"] > 1 else ""
            cells.append(f"{_v(e['median'], unit)}{rng}; {holds_text(e)}")
        if all(c == "-" for c in cells):
            continue  # measured at no horizon (a system this item does not run)
        b = "-" if bound is None else f"{bound[0]} {_v(bound[1], unit)}"
        lines.append(f"| {claim} | {b} | " + " | ".join(cells) + " |")
    return lines + [""]


def _changes(d: dict[str, Any]) -> list[str]:
    over = d["over_replicas"]
    if len(over) < 2:
        return []
    first = next((o for o in over if o.get("kind") == "item"), over[0])
    lines = ["### Verdicts that change with the horizon", "",
             "A claim's state at a horizon: holds (on every replica that measured it), fails (on none) or mixed.", ""]
    if not d["changes"]:
        return lines + [f"No claim's state at {first['label']} differs from its state at "
                        + " or ".join(o["label"] for o in over if o is not first) + ".", ""]
    return lines + [f"- {c['text']}" for c in d["changes"]] + [""]


def _pair_ratios(d: dict[str, Any]) -> list[str]:
    base = ("BSP", "SSP-4", "FLOWN", "best")
    lines = [f"### {SUBJECT}'s time and energy to target over each baseline's", "",
             "Per replica and horizon (that horizon's target); best: the baseline that crossed first (time) or used the "
             "least energy to the target (energy), named in brackets.", "",
             *markdown_table(["replica", "horizon", *(f"time / {b}" for b in base), *(f"energy / {b}" for b in base)])]
    for rep, r in d["replicas"].items():
        for h in r["horizons"]:
            q = h.get("ratios") or {}
            cells = []
            for key in ("time", "energy"):
                row = q.get(key, {})
                cells += [_v(row.get(b)) for b in base[:-1]]
                cells.append(_v(row.get("best")) + (f" ({q.get(f'best_{key}')})" if q.get(f"best_{key}") else ""))
            lines.append(f"| {rep or 'all'} | {h['label']} | " + " | ".join(cells) + " |")
    return lines + [""]


def _target_position(d: dict[str, Any]) -> list[str]:
    lines = ["### Where each horizon's target falls", "",
             "Each system's crossing of that horizon's target (the summary's rule on the clipped runs): seconds, and "
             "in brackets that time over the run's training time at that horizon.", ""]
    for rep, r in d["replicas"].items():
        hs = r["horizons"]
        fade = r.get("first_fade_s")
        lines.append(f"Replica `{rep or 'all'}`: first fade of the replayed links at "
                     + (f"{fade:.1f} s (" + ", ".join(f"{fade / h['horizon_s']:.2f} of {h['label']}" for h in hs) + ")"
                        if fade is not None else "- (no fade)") + ".")
        lines += ["", *markdown_table(["system", *(f"{h['label']} (target {fmt(_target(h))} %)" for h in hs)])]
        lines += _system_rows(hs, "target_position", lambda p: "-" if p is None or p["crossing_s"] is None
                              else f"{p['crossing_s']:.1f} s ({fmt(p['crossing_share'])})")
        lines.append("")
    return lines


def _system_rows(hs: list[dict[str, Any]], key: str, cell) -> list[str]:
    """One table row per system of any horizon's ``efficiency[key]``, one ``cell(reading or None)`` per horizon."""
    systems: list[str] = []
    for h in hs:
        systems += [s for s in h["efficiency"][key] if s not in systems]
    return [f"| {s} | " + " | ".join(cell(h["efficiency"][key].get(s)) for h in hs) + " |" for s in systems]


def _target(h: dict[str, Any]) -> float | None:
    return h.get("target_pct")


def _to_final(d: dict[str, Any]) -> list[str]:
    lines = [f"### {SUBJECT}'s time to each run's final accuracy", "",
             f"A second reading, not the rule: the time {SUBJECT}'s curve first reaches each other run's final accuracy "
             "at that horizon, and in brackets that time over the other run's training time.", ""]
    for rep, r in d["replicas"].items():
        hs = r["horizons"]
        lines += [f"Replica `{rep or 'all'}`:", "", *markdown_table(["run", *(h["label"] for h in hs)])]
        lines += _system_rows(hs, "to_final_of", lambda p: "-" if p is None else f"{fmt(p['final_pct'])} %: " + (
            "not reached" if p["subject_s"] is None else f"{p['subject_s']:.1f} s ({fmt(p['share'])})"))
        lines.append("")
    return lines


def _levels(d: dict[str, Any]) -> list[str]:
    lines = ["### Iterations to each level of the rise, over the whole run", "",
             f"The iteration at which each run's curve crosses each level (the target rule at that fraction of the rise, "
             f"over the longest horizon), and {SUBJECT}'s count over each baseline's (above 1: more iterations needed).", ""]
    for rep, r in d["replicas"].items():
        h = r["horizons"][-1]
        eff = h["efficiency"]
        systems: list[str] = []
        for row in eff["levels"].values():
            systems += [s for s in row["iterations"] if s not in systems]
        lines += [f"Replica `{rep or 'all'}` ({h['label']}):", "",
                  *markdown_table(["level", "target %", *systems, *(f"{SUBJECT} / {b}" for b in LEVEL_BASELINES)])]
        for level, row in eff["levels"].items():
            its = " | ".join(fmt(row["iterations"].get(s), 0) for s in systems)
            rat = " | ".join(fmt(eff["ratios"][level].get(b)) for b in LEVEL_BASELINES)
            lines.append(f"| {float(level):g} | {fmt(row['target_pct'])} | {its} | {rat} |")
        stale = {k: v for k, v in eff["stale_tensors"].items() if v}
        if stale:
            lines += ["", "Tensors whose stalest row trails the push count longest (iterations, mean over the run's "
                      "staleness records and workers):", ""]
            lines += [f"- {lab}: " + (", ".join(f"{x['tensor']} {x['mean_max_staleness']:.2f}" for x in rows)
                                      if any(x["mean_max_staleness"] > 0 for x in rows) else "no row ever trailed (0.00)")
                      for lab, rows in stale.items()]
        lines.append("")
    return lines


def _equal_time(d: dict[str, Any]) -> list[str]:
    lines = ["### Accuracy at equal time", "",
             *markdown_table(["replica", "paper min", "wall s", *SYSTEMS, "ROG-4 - best of BSP / SSP-4 / FLOWN"])]
    for rep, r in d["replicas"].items():
        for e in r["equal_time"]:
            accs = " | ".join(fmt(e["accuracy_pct"].get(s)) for s in SYSTEMS)
            lines.append(f"| {rep or 'all'} | {e['paper_min']:g} | {e['time_s']:.0f} | {accs} | "
                         f"{_v(e['rog4_minus_best'], 'points')} |")
    return lines


def long_horizon_markdown(d: dict[str, Any] | None) -> str:
    """summary.md's section (empty without the item)."""
    if not d:
        return ""
    labels = [o["label"] for o in d["over_replicas"]]
    lines = [f"## The end-to-end claims at each horizon ({', '.join(labels)})", "",
             "The `outdoors_long` runs read over their first seconds at each horizon: the end-to-end item's budget, and "
             "the paper's 30 and 60 minutes (wall seconds = minutes x 60 x the trace time scale), each horizon with its "
             "own target by the summary's rule (`rog/papers/rog/horizons.py`).", ""]
    lines += _claims_table(d) + _changes(d) + _pair_ratios(d) + _target_position(d) + _to_final(d) + _levels(d) + _equal_time(d)
    return "\n".join(lines) + "\n"


EQUAL_TIME_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
SYSTEMS = ("BSP", "SSP-4", "SSP-20", "FLOWN", "ROG-4", "ROG-20")
BASELINES = ("BSP", "SSP-4", "FLOWN")


def _label(minutes: float | None, horizon_s: float) -> str:
    return f"{horizon_s:g} s" if minutes is None else f"{minutes:g} min"


def read_horizons(runs: Sequence[RunData], target_fraction: float = TARGET_FRACTION, power: str = "auto",
                  smooth_tests: int = SMOOTH_TESTS, short_s: float | None = QUICK_E2E_BUDGET_S) -> dict[str, Any] | None:
    """One replica's ``{"time_scale", "first_fade_s", "horizons": [{"label", "paper_min", "horizon_s", "claims",
    "efficiency"}], "equal_time": [...]}``: ``short_s`` (the end-to-end item's budget; None: not read) and the
    paper's horizons (None without a time scale)."""
    from .robustness import run_fades
    from .claims import claim_rows

    ts = time_scale_of(runs)
    if ts is None or not runs:
        return None
    full, _, _, _ = compute_metrics(list(runs), target_fraction, power, smooth_tests)
    fades = [f for f in (run_fades(m)[0] for m in full) if f is not None]
    first_fade = min(fades) if fades else None
    points = sorted(([(None, float(short_s))] if short_s else []) + [(m, 60.0 * m * ts) for m in HORIZONS_MIN],
                    key=lambda p: p[1])
    horizons, claims_at = [], {}
    for minutes, h in points:
        clipped = [clip_run(r, h) for r in runs]
        ms, target, _, _ = compute_metrics(clipped, target_fraction, power, smooth_tests)
        cs = claim_rows(ms)
        label = _label(minutes, h)
        claims_at[label] = cs
        horizons.append({"label": label, "kind": "item" if minutes is None else "paper", "target_pct": target,
                         "paper_min": h / 60.0 / ts if minutes is None else minutes, "horizon_s": h,
                         "claims": [{"claim": c.name, "ours": c.ours, "unit": c.unit, "verdict": c.verdict(),
                                     "bound": None if c.bound is None else [c.bound[0], float(c.bound[1])]} for c in cs],
                         "efficiency": efficiency(ms, clipped, first_fade, target), "ratios": pair_ratios(ms)})
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
    return {"time_scale": ts, "first_fade_s": first_fade, "horizons": horizons, "equal_time": eq, "_claims": claims_at}


def pair_ratios(metrics) -> dict[str, dict[str, float | None]]:
    """ROG-4's time and energy to target over each baseline's (BSP, SSP-4, FLOWN) and over the best
    baseline's (the one that crossed first; for energy, the one with the least energy to target):
    ``{"time": {"BSP": r, ..., "best": r}, "energy": {...}, "best_time": label, "best_energy": label}``;
    a ratio is None where either run never reached the target."""
    by = {m.label: m for m in metrics}
    subj = by.get("ROG-4")
    out: dict[str, Any] = {}
    for key, attr in (("time", "time_to_target_s"), ("energy", "energy_to_target_j")):
        mine = getattr(subj, attr, None) if subj is not None else None
        base = {b: getattr(by[b], attr, None) for b in BASELINES if b in by}
        row = {b: (mine / v if mine is not None and v else None) for b, v in base.items()}
        got = {b: v for b, v in base.items() if v}
        best = min(got, key=got.get) if got else None
        row["best"] = mine / got[best] if mine is not None and best is not None else None
        out[key], out[f"best_{key}"] = row, best
    return out


def long_horizon(runs: Sequence[RunData], items: dict[str, Sequence[str]],
                 budgets_s: dict[str, float] | None = None, **kw) -> dict[str, Any] | None:
    """``long_horizon`` of summary.json: per replica of ``outdoors_long`` its :func:`read_horizons`, per
    horizon the claims over the replicas, and the claims whose verdict changes with the horizon
    (:func:`horizon_changes`); None when the plan has no ``outdoors_long`` item.  ``budgets_s``: the
    plan's item budgets (the short horizon is ``outdoors:<replica>``'s when there)."""
    from rog.analysis.plan_file import replica_of

    from .claims import claim_key
    from .robustness import aggregate

    by_id = {r.run_id: r for r in runs}
    reps: dict[str, dict[str, Any]] = {}
    for name, ids in items.items():
        if name.split(":", 1)[0] != LONG_ITEM:
            continue
        rep = replica_of(name)
        short = (budgets_s or {}).get(f"{E2E_ITEM}:{rep}" if rep else E2E_ITEM, QUICK_E2E_BUDGET_S)
        got = read_horizons([by_id[i] for i in ids if i in by_id], short_s=short, **kw)
        if got is not None:
            reps[rep] = got
    if not reps:
        return None
    labels: list[str] = []
    for d in reps.values():
        labels += [h["label"] for h in d["horizons"] if h["label"] not in labels]
    over = []
    for label in labels:
        per = {r: d["_claims"][label] for r, d in reps.items() if label in d["_claims"]}
        h0 = next(h for d in reps.values() for h in d["horizons"] if h["label"] == label)
        over.append({"label": label, "kind": h0["kind"], "paper_min": h0["paper_min"], "horizon_s": h0["horizon_s"],
                     "robustness": aggregate(per)})
    units = {claim_key(c.name): c.unit for d in reps.values() for cs in d["_claims"].values() for c in cs}
    for d in reps.values():
        d.pop("_claims")
    return {"replicas": reps, "over_replicas": over, "equal_time_fractions": list(EQUAL_TIME_FRACTIONS),
            "changes": horizon_changes(over), "units": units}


def verdict_state(entry: dict[str, Any]) -> str | None:
    """``"holds"`` (on every replica that measured the claim), ``"fails"`` (on none), ``"mixed"``; None
    without a bound or a value."""
    if entry.get("holds") is None or not entry.get("of"):
        return None
    return "holds" if entry["holds"] == entry["of"] else ("fails" if entry["holds"] == 0 else "mixed")


def horizon_changes(over: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims whose state at the end-to-end item's horizon (``kind`` "item"; else the first) differs
    from a paper horizon's: one ``{"claim", "from", "to", "states": {label: state}, "text"}`` per claim,
    the text with every horizon's state and median."""
    first = next((o for o in over if o.get("kind") == "item"), over[0] if over else None)
    later = [o for o in over if o is not first]
    if first is None or not later:
        return []
    out = []
    for e in first["robustness"]:
        s0 = verdict_state(e)
        rows = {o["label"]: next((x for x in o["robustness"] if x["claim"] == e["claim"]), None) for o in over}
        states = {lab: (verdict_state(x) if x is not None else None) for lab, x in rows.items()}
        diff = [o["label"] for o in later if states.get(o["label"]) not in (None, s0)]
        if s0 is None or not diff:
            continue
        parts = [f"{lab}: {states[lab]} on {x['holds']} of {x['of']} (median {x['median']:.2f})"
                 for lab, x in rows.items() if x is not None and states[lab] is not None]
        out.append({"claim": e["claim"], "from": first["label"], "to": diff, "states": states,
                    "text": f"{e['claim']}: " + "; ".join(parts)})
    return out
