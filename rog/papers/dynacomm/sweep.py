"""The DynaComm sweep: iteration time / Sequential of Sequential, LBL, iBatch and DynaComm per
communication-to-compute ratio and per-transfer latency, one table per model, and the rules fixed
before the runs (``docs/dynacomm.md``, "The sweep"): DynaComm's lead over LBL grows with Δt (rule 1)
and with depth (rule 2, per pair of :data:`DEPTH_PAIRS`); DynaComm <= 1.03 x the best baseline at each
point (rule 3); on the GoogLeNet-like model the layer-wise schedules are similar (rule 4, the paper's
"GoogLeNet similar to VGG-19"); on the deepest model, in the paper's setting, DynaComm leads LBL (rule 5).

Reads ``result/dynacomm/sweep-<model>-r<ratio>-d<delay_ms>/result.json``
(:mod:`rog.papers.dynacomm.item`), each a paired run (:mod:`rog.papers.dynacomm.bench`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["load_sweep", "sweep_point", "sweep_rules", "sweep_lines", "DEPTH_PAIRS"]

BASELINES = ("sequential", "lbl", "ibatch")
MARGIN, DT_RISE, DEPTH_SLACK = 1.03, 0.02, 0.02
# (shallower, deeper) in DynaComm layers: vgg_mini 9, resnet_mini 23, resnet152_mini 155
DEPTH_PAIRS = (("vgg_mini", "resnet_mini"), ("resnet_mini", "resnet152_mini"))
SIMILAR_MODEL, SIMILAR_SPREAD, SIMILAR_DELAY_MS = "inception_mini", 0.10, 10.0  # rule 4
DEEPEST, PAPER_POINT, DEEP_LEAD = "resnet152_mini", (1.0, 10.0), 0.10  # rule 5: ratio 1, 10 ms
LAYERWISE = ("lbl", "ibatch", "dynacomm")
_NAME = re.compile(r"^sweep-(?P<model>.+)-r(?P<ratio>[0-9.]+)-d(?P<delay>[0-9.]+)$")


def load_sweep(result_dir: str | Path) -> dict[str, dict[tuple[float, float], dict]]:
    """``{model: {(ratio, delay_ms): paired result}}``."""
    out: dict[str, dict] = {}
    base = Path(result_dir) / "dynacomm"
    for p in sorted(base.glob("sweep-*/result.json")) if base.is_dir() else []:
        m = _NAME.match(p.parent.name)
        if not m:
            continue
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if "per_schedule" in d:
            out.setdefault(m["model"], {})[(float(m["ratio"]), float(m["delay"]))] = d
    return out


def sweep_point(d: dict) -> dict | None:
    """One point: median iteration seconds per schedule, each / Sequential, DynaComm's lead over LBL
    (``(LBL - DynaComm) / Sequential``), the Δt DynaComm's plans measured, the check, the load."""
    ps = d["per_schedule"]
    it = {s: ps.get(s, {}).get("median_iteration_s") for s in (*BASELINES, "dynacomm")}
    if any(v is None for v in it.values()):
        return None
    seq = it["sequential"]
    best = min(it[s] for s in BASELINES)
    return dict(iteration_s=it, norm={s: v / seq for s, v in it.items()}, lead=(it["lbl"] - it["dynacomm"]) / seq,
                dt_s=ps["dynacomm"].get("median_dt_s"), check=it["dynacomm"] <= MARGIN * best,
                check_ratio=it["dynacomm"] / best, other_busy_cores=d.get("other_busy_cores"),
                rate_mbit=d.get("rate_mbit"), fwd_segments=ps["dynacomm"].get("median_fwd_segments"),
                bwd_segments=ps["dynacomm"].get("median_bwd_segments"))


def sweep_rules(sweep: dict) -> list[tuple[str, bool | None, str]]:
    """``(rule, holds, evidence)`` for rules 1-5, each where its points were measured."""
    out = []
    pts = {m: {k: sweep_point(v) for k, v in pts.items()} for m, pts in sweep.items()}
    for model, p in sorted(pts.items()):
        for ratio in sorted({r for r, _ in p}):
            delays = sorted(d for r, d in p if r == ratio and p[(r, d)] is not None)
            if len(delays) < 2:
                continue
            lo, hi = p[(ratio, delays[0])]["lead"], p[(ratio, delays[-1])]["lead"]
            out.append((f"1 Δt: {model}, ratio {ratio:g}: lead at {delays[-1]:g} ms > lead at {delays[0]:g} ms + {DT_RISE}",
                        hi > lo + DT_RISE, f"{lo:+.3f} -> {hi:+.3f}"))
    for lo_m, hi_m in DEPTH_PAIRS:
        shallow, deep = pts.get(lo_m, {}), pts.get(hi_m, {})
        for key in sorted(set(shallow) & set(deep)):
            if key[1] <= 0 or shallow[key] is None or deep[key] is None:
                continue
            a, b = shallow[key]["lead"], deep[key]["lead"]
            out.append((f"2 depth: ratio {key[0]:g}, {key[1]:g} ms: lead on {hi_m} >= on {lo_m} - {DEPTH_SLACK}",
                        b >= a - DEPTH_SLACK, f"{a:+.3f} ({lo_m}) vs {b:+.3f} ({hi_m})"))
    for model, p in sorted(pts.items()):
        for key, q in sorted(p.items()):
            if q is not None:
                out.append((f"3 check: {model}, ratio {key[0]:g}, {key[1]:g} ms: DynaComm <= {MARGIN} x best baseline",
                            q["check"], f"{q['check_ratio']:.3f}"))
    for key, q in sorted(pts.get(SIMILAR_MODEL, {}).items()):
        if q is not None and key[1] == SIMILAR_DELAY_MS:
            spread = max(q["norm"][s] for s in LAYERWISE) - min(q["norm"][s] for s in LAYERWISE)
            out.append((f"4 similar: {SIMILAR_MODEL}, ratio {key[0]:g}, {key[1]:g} ms: LBL, iBatch, DynaComm within "
                        f"{SIMILAR_SPREAD} of Sequential", spread <= SIMILAR_SPREAD, f"spread {spread:.3f}"))
    q = pts.get(DEEPEST, {}).get(PAPER_POINT)
    if q is not None:
        out.append((f"5 deepest: {DEEPEST}, ratio {PAPER_POINT[0]:g}, {PAPER_POINT[1]:g} ms: lead over LBL > {DEEP_LEAD}",
                    q["lead"] > DEEP_LEAD, f"{q['lead']:+.3f}"))
    return out


def sweep_lines(result_dir: str | Path) -> list[str]:
    """The sweep's markdown section (empty when there are no sweep runs)."""
    sweep = load_sweep(result_dir)
    if not sweep:
        return []
    lines = ["## The sweep (paired runs; iteration time / Sequential's, medians of the measured iterations)", ""]
    for model, pts in sorted(sweep.items()):
        lines += [f"### {model}", "",
                  "| ratio | latency ms | Δt measured ms | link Mbit/s | Sequential s | LBL | iBatch | DynaComm | "
                  "lead over LBL | DynaComm / best | other busy cores |", "|" + "---|" * 11]
        for (ratio, delay), d in sorted(pts.items()):
            q = sweep_point(d)
            if q is None:
                continue
            n = q["norm"]
            dt = "–" if q["dt_s"] is None else f"{q['dt_s'] * 1e3:.1f}"
            load = "–" if q["other_busy_cores"] is None else f"{q['other_busy_cores']:.2f}"
            lines.append(f"| {ratio:g} | {delay:g} | {dt} | {q['rate_mbit']:.2f} | {q['iteration_s']['sequential']:.3f} | "
                         f"{n['lbl']:.3f} | {n['ibatch']:.3f} | {n['dynacomm']:.3f} | {q['lead']:+.3f} | "
                         f"{q['check_ratio']:.3f} | {load} |")
        lines.append("")
    lines += ["Rules (fixed before the runs):", ""]
    lines += [f"- {r}: {'holds' if ok else 'FAILS'} ({ev})" for r, ok, ev in sweep_rules(sweep)]
    return lines + [""]
