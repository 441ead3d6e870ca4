"""summary.md's section on the ``outdoors_long`` item, from :func:`rog.papers.rog.horizons.long_horizon`.

In order: the claims at every horizon side by side (150 s, the paper's 30 and 60 minutes), the claims
whose verdict changes with the horizon, ROG-4's time and energy to target over each baseline's, where each system crosses each horizon's target (and the first
fade), ROG-4's time to each baseline's final accuracy, iterations to each level of the rise over the
whole run, the tensors that stay stale longest, and the accuracy at equal time.
"""

from __future__ import annotations

from typing import Any

from rog.analysis.tables import fmt, markdown_table

from .horizons import SYSTEMS

__all__ = ["long_horizon_markdown"]

SUBJECT = "ROG-4"
BASELINES = ("BSP", "SSP-4")


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
        systems: list[str] = []
        for h in hs:
            systems += [s for s in h["efficiency"]["target_position"] if s not in systems]
        for s in systems:
            cells = []
            for h in hs:
                p = h["efficiency"]["target_position"].get(s)
                cells.append("-" if p is None or p["crossing_s"] is None
                             else f"{p['crossing_s']:.1f} s ({fmt(p['crossing_share'])})")
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _target(h: dict[str, Any]) -> float | None:
    return h.get("target_pct")


def _to_final(d: dict[str, Any]) -> list[str]:
    lines = [f"### {SUBJECT}'s time to each run's final accuracy", "",
             f"A second reading, not the rule: the time {SUBJECT}'s curve first reaches each other run's final accuracy "
             "at that horizon, and in brackets that time over the other run's training time.", ""]
    for rep, r in d["replicas"].items():
        hs = r["horizons"]
        lines += [f"Replica `{rep or 'all'}`:", "", *markdown_table(["run", *(h["label"] for h in hs)])]
        systems: list[str] = []
        for h in hs:
            systems += [s for s in h["efficiency"]["to_final_of"] if s not in systems]
        for s in systems:
            cells = []
            for h in hs:
                p = h["efficiency"]["to_final_of"].get(s)
                cells.append("-" if p is None else f"{fmt(p['final_pct'])} %: "
                             + ("not reached" if p["subject_s"] is None else f"{p['subject_s']:.1f} s ({fmt(p['share'])})"))
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
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
                  *markdown_table(["level", "target %", *systems, *(f"{SUBJECT} / {b}" for b in BASELINES)])]
        for level, row in eff["levels"].items():
            its = " | ".join(fmt(row["iterations"].get(s), 0) for s in systems)
            rat = " | ".join(fmt(eff["ratios"][level].get(b)) for b in BASELINES)
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
