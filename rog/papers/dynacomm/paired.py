"""The paired DynaComm run: every schedule in turn inside one run (``result/dynacomm/<model>-paired``,
:mod:`rog.schedules.paired`), normalised to Sequential, and the iteration-time check read on it.

Why a paired run: separate runs of each schedule carry their own processes and their own moment's
load, and on a machine whose per-iteration compute varies by 10-20 % that difference is larger than
the 3 % the check allows.  In the paired run the schedules share processes, profile and link estimate,
and alternate every ``block`` iterations, so slow phases of the machine fall on all of them.

The rule (fixed before the paired runs were made): DynaComm's median measured iteration time is at
most 1.03 x the smallest of Sequential's, LBL's and iBatch's medians; beside it, in how many
rotations (cycles) the same holds for that cycle's iteration times.
"""

from __future__ import annotations

import json
from pathlib import Path

from rog.analysis.tables import markdown_table

__all__ = ["MARGIN", "BASELINES", "load_paired", "paired_checks", "paired_lines"]

MARGIN = 1.03
BASELINES = ("sequential", "lbl", "ibatch")


def load_paired(result_dir: str | Path) -> dict[str, dict]:
    """``{model: result}`` of every ``result/dynacomm/<model>-paired/result.json``."""
    out = {}
    base = Path(result_dir) / "dynacomm"
    for p in sorted(base.glob("*-paired/result.json")) if base.is_dir() else []:
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if "per_schedule" in d:
            out[d["model"]] = d
    return out


def paired_checks(d: dict) -> dict:
    """For one paired result: per planned schedule (``dynacomm``, ``dynacomm-iter``), the ratio of its
    median iteration to the best baseline's, whether it is <= :data:`MARGIN`, and (k, n) cycles that hold."""
    ps = d["per_schedule"]
    base = {s: ps[s]["median_iteration_s"] for s in BASELINES if ps.get(s, {}).get("median_iteration_s")}
    out = {}
    if not base:
        return out
    best = min(base.values())
    for sch in ("dynacomm", "dynacomm-iter"):
        mine = ps.get(sch, {}).get("median_iteration_s")
        if mine is None:
            continue
        cyc = [c for c in d.get("cycles", []) if sch in c and all(b in c for b in base)]
        holds = sum(c[sch] <= MARGIN * min(c[b] for b in base) for c in cyc)
        out[sch] = dict(ratio=mine / best, met=mine <= MARGIN * best, cycles=(holds, len(cyc)),
                        best=min(base, key=base.get))
    return out


def paired_lines(result_dir: str | Path, model: str) -> list[str]:
    """The markdown section of ``model``'s paired run (empty when there is none)."""
    d = load_paired(result_dir).get(model)
    if d is None:
        return []
    ps = d["per_schedule"]
    seq = ps.get("sequential", {})
    lines = [f"### Paired run: the schedules in turn inside one run ({d.get('paired_block')} iterations per turn, "
             f"the last measured; {len(d.get('cycles', []))} full rotations)", "",
             *markdown_table(["schedule", "samples", "fwd", "bwd", "iteration", "iteration s",
                              "predicted fwd / bwd s (measured)"])]
    for sch, r in ps.items():
        if not r.get("samples"):
            continue

        def norm(k):
            a, b = r.get(f"median_{k}"), seq.get(f"median_{k}")
            return "–" if a is None or not b else f"{a / b:.2f}"

        pf, pb = r.get("median_predicted_fwd_s"), r.get("median_predicted_bwd_s")
        pred = "–" if pf is None or pb is None else f"{pf:.3f} / {pb:.3f}"
        lines.append(f"| {sch} | {r['samples']} | {norm('fwd_s')} | {norm('bwd_s')} | {norm('iteration_s')} | "
                     f"{r['median_iteration_s']:.3f} | {pred} ({r['median_fwd_s'] or 0:.3f} / {r['median_bwd_s']:.3f}) |")
    lines.append("")
    for sch, c in paired_checks(d).items():
        lines.append(f"- {sch}_le_min_x{MARGIN:g} (paired): {'met' if c['met'] else 'NOT met'}: {c['ratio']:.3f} x "
                     f"the best baseline ({c['best']}); holds in {c['cycles'][0]} of {c['cycles'][1]} rotations")
    return lines + [""]
