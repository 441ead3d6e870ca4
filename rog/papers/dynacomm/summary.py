"""DynaComm results next to the paper: normalised forward, backward and iteration times (Sequential =
1.0), the paper's claims with one sentence each on agreement, the acceptance checks, figures.

Reads ``result/dynacomm/<model>-<schedule>-r<round>/result.json`` and ``calibrate-<model>/result.json``
(:mod:`rog.papers.dynacomm.item`).  The machine's load drifts, so schedules are compared within a
round as well: the iteration-time check is reported on the medians over rounds and as "holds in k of
n rounds" (each round against that round's Sequential, LBL and iBatch), beside each round's load
(cores busy with other work, from ``/proc/stat``).  The rules come from the close reading (B5): a reduction
agrees when it lies within 10 percentage points of the paper's; LBL's forward on the ResNet is
"badly worse" when at least 15 points behind DynaComm's; the layer-wise methods are "close" on the
VGG when their forward reductions lie within 3 points of each other.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any, Sequence

from rog.analysis.figure_files import MODULE_FORMATS, save_figure
from rog.analysis.tables import fmt, markdown_table

from .paired import paired_lines
from .sweep import sweep_lines

__all__ = ["PAPER", "load_dynacomm", "round_checks", "model_margins", "dynacomm_summary", "dynacomm_markdown", "plot_dynacomm"]

# the paper's reductions against Sequential, percent (Section V; VGG-19 and ResNet-152 rows).  ResNet-152's claims
# are graded on the 155-layer resnet152_mini (ResNet-152's depth), not the 23-layer resnet_mini (docs/dynacomm.md,
# "How mini models are graded")
PAPER = {
    "vgg_mini": dict(paper_model="VGG-19", iteration=41.10, fwd={"lbl": 40.54, "ibatch": 42.79, "dynacomm": 42.86},
                     bwd=39.35),
    "resnet152_mini": dict(paper_model="ResNet-152", iteration=37.06,
                        fwd={"lbl": 10.56, "ibatch": 30.02, "dynacomm": 43.84}, bwd=30.29),
}
DASH = "–"  # the cell of a missing value in these tables
SCHEDULES = ("sequential", "lbl", "ibatch", "dynacomm", "dynacomm-iter")
AGREE_PP, LBL_WORSE_PP, CLOSE_PP, FIDELITY, MARGIN = 10.0, 15.0, 3.0, 0.10, 1.03


def _round_of(name: str) -> int:
    m = re.search(r"-r(\d+)$", name)
    return int(m.group(1)) if m else 0


def load_dynacomm(result_dir: str | Path, sub: str = "") -> dict[str, dict[str, dict]]:
    """``{model: {schedule or 'calibrate': result}}``; a schedule's rounds are merged: every
    ``mean_*`` field becomes the median over rounds of each round's per-iteration median, and
    ``per_round`` keeps ``{round: (that round's median iteration s, its other_busy_cores)}``."""
    base = Path(result_dir) / "dynacomm" / sub  # sub: a setting's folder (rog.papers.dynacomm.scaled_item)
    rounds: dict[tuple[str, str], list[dict]] = {}
    for p in sorted(base.glob("*/result.json")) if base.is_dir() else []:
        if p.parent.name.startswith("sweep-"):  # rog.papers.dynacomm.sweep
            continue
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        key = "calibrate" if p.parent.name.startswith("calibrate-") else d["schedule"]
        rounds.setdefault((d["model"], key), []).append(dict(d, _round=_round_of(p.parent.name)))
    out: dict[str, dict[str, dict]] = {}
    for (model, key), ds in rounds.items():
        merged = dict(ds[0], rounds=len(ds))
        for k in [k for k in ds[0] if k.startswith("mean_")]:
            vals = [d.get("median_" + k[5:], d[k]) for d in ds]
            vals = [v for v in vals if v is not None]
            merged[k] = float(statistics.median(vals)) if vals else None
        merged["per_round"] = {d["_round"]: (d.get("median_iteration_s", d["mean_iteration_s"]),
                                             d.get("other_busy_cores")) for d in ds}
        out.setdefault(model, {})[key] = merged
    return out


def round_checks(runs: dict[str, dict], schedule: str) -> dict[int, bool]:
    """Per round with every needed run: does ``schedule``'s iteration time stay within
    :data:`MARGIN` x the least of that round's Sequential, LBL and iBatch?"""
    if schedule not in runs:
        return {}
    out = {}
    for r, (it, _) in sorted(runs[schedule]["per_round"].items()):
        base = [runs[s]["per_round"][r][0] for s in ("sequential", "lbl", "ibatch")
                if s in runs and r in runs[s]["per_round"]]
        if len(base) == 3 and it is not None and None not in base:
            out[r] = it <= min(base) * MARGIN
    return out


def model_margins(result_dir: str | Path, schedule: str = "dynacomm") -> dict[str, dict[str, float]]:
    """Per model: the cost model's own forward + backward prediction for each schedule's segments on the
    profiles ``schedule`` planned from (the workers' ``plan_log``), over the DP's: medians over plans.
    Near 1.00 for LBL, the model expects no gain over LBL that the measurements could show."""
    import numpy as np

    from rog.schedules import SCHEDULES as PLANNERS
    from rog.schedules.planner import Profile

    out: dict[str, dict[str, list[float]]] = {}
    base = Path(result_dir) / "dynacomm"
    for p in sorted(base.glob(f"*-{schedule}-r*/worker-*.json")) if base.is_dir() else []:
        try:
            w = json.loads(p.read_text())
            model = json.loads((p.parent / "result.json").read_text())["model"]
        except (OSError, ValueError, KeyError):
            continue
        for pl in w.get("plan_log", []):
            prof = Profile(*(np.asarray(pl[k]) for k in ("pt", "fc", "bc", "gt")), pl["dt_s"])
            dp = pl["predicted_fwd_s"] + pl["predicted_bwd_s"]
            for sch in ("sequential", "lbl", "ibatch"):
                other = PLANNERS[sch](prof)
                out.setdefault(model, {}).setdefault(sch, []).append(
                    (other.predicted_fwd_s + other.predicted_bwd_s) / dp if dp > 0 else float("nan"))
    return {m: {k: float(statistics.median(v)) for k, v in d.items()} for m, d in out.items()}


def _red(x: float | None, ref: float | None) -> float | None:
    return None if x is None or not ref else 100.0 * (1.0 - x / ref)


def dynacomm_summary(result_dir: str | Path, sub: str = "") -> dict[str, Any]:
    """Per model: normalised times and reductions per schedule, the acceptance checks (``sub``: a setting's folder)."""
    data = load_dynacomm(result_dir, sub)
    models = {}
    for model, runs in data.items():
        seq = runs.get("sequential")
        if seq is None:
            continue
        rows = {}
        for sch in SCHEDULES:
            r = runs.get(sch)
            if r is None:
                continue
            rows[sch] = dict(
                fwd=r["mean_fwd_s"] / seq["mean_fwd_s"], bwd=r["mean_bwd_s"] / seq["mean_bwd_s"],
                iteration=r["mean_iteration_s"] / seq["mean_iteration_s"],
                fwd_red=_red(r["mean_fwd_s"], seq["mean_fwd_s"]), bwd_red=_red(r["mean_bwd_s"], seq["mean_bwd_s"]),
                it_red=_red(r["mean_iteration_s"], seq["mean_iteration_s"]),
                fwd_s=r["mean_fwd_s"], bwd_s=r["mean_bwd_s"], iteration_s=r["mean_iteration_s"],
                stall_s=r["mean_stall_s"], overlap_s=r["mean_overlap_s"], compute_only_s=r["mean_compute_only_s"],
                comm_only_s=r["mean_comm_only_s"], pred_fwd_s=r["mean_predicted_fwd_s"],
                pred_bwd_s=r["mean_predicted_bwd_s"], fwd_segments=r["mean_fwd_segments"],
                bwd_segments=r["mean_bwd_segments"], dt_s=r.get("mean_dt_s"),
                iteration_min_s=min(v[0] for v in r["per_round"].values()),
                iteration_max_s=max(v[0] for v in r["per_round"].values()), rounds=r["rounds"])
        base = [rows[s]["iteration_s"] for s in ("sequential", "lbl", "ibatch") if s in rows]
        checks = {}
        for sch in ("dynacomm", "dynacomm-iter"):
            if sch in rows and base:
                checks[f"{sch}_le_min_x1.03"] = rows[sch]["iteration_s"] <= min(base) * MARGIN
                per = round_checks(runs, sch)
                checks[f"{sch}_le_min_x1.03_rounds"] = (sum(per.values()), len(per))
            if sch in rows and rows[sch]["pred_fwd_s"]:
                checks[f"{sch}_fwd_error"] = rows[sch]["pred_fwd_s"] / rows[sch]["fwd_s"] - 1.0
                checks[f"{sch}_bwd_error"] = rows[sch]["pred_bwd_s"] / rows[sch]["bwd_s"] - 1.0
        load = {}
        for r in runs.values():
            for rnd, (_, cores) in r.get("per_round", {}).items():
                if cores is not None and r is not runs.get("calibrate"):
                    load.setdefault(rnd, []).append(cores)
        models[model] = dict(rows=rows, checks=checks, round_load={k: statistics.mean(v) for k, v in sorted(load.items())},
                             rounds_of={sch: {k: v[0] for k, v in runs[sch]["per_round"].items()}
                                        for sch in SCHEDULES if sch in runs}, rate_mbit=runs[SCHEDULES[0]].get("rate_mbit"),
                             payload_bytes=seq.get("payload_bytes"), workers=seq.get("workers"),
                             link_delay_ms=seq.get("link_delay_ms"))
    return dict(models=models)


def outdoors_rows(result_dir: str | Path) -> list[dict]:
    """Per outdoors run (``result/dynacomm/outdoors/*``): iterations, seconds per iteration and the BSP/SSP
    gate stall per iteration, averaged over workers, from the event logs (plus the overlap split when present)."""
    from rog.runtime import read_events

    out = []
    base = Path(result_dir) / "dynacomm" / "outdoors"
    for run in sorted(base.glob("*/DONE")) if base.is_dir() else []:
        d = run.parent
        per = []
        for f in sorted(d.glob("events-w*.jsonl")):
            recs = read_events(f)[1]
            pulls = [r for r in recs if r["kind"] == "pull"]
            comp = [r for r in recs if r["kind"] == "compute"]
            if not pulls or not comp:
                continue
            span = pulls[-1]["t_s"] + pulls[-1]["duration_s"] - comp[0]["t_s"]
            gate = sum(r["duration_s"] for r in recs if r["kind"] == "stall" and r["reason"] == "gate")
            ov = [r for r in recs if r["kind"] == "overlap"]
            per.append(dict(iterations=len(pulls), iteration_s=span / len(pulls), stall_s=gate / len(pulls),
                            overlap_s=sum(r["overlap_s"] for r in ov) / len(ov) if ov else 0.0))
        if per:
            name = d.name.rsplit("-", 1)[-1] if not d.name.endswith("-iter") else "dynacomm-iter"
            out.append(dict(run=d.name, name=name, **{k: sum(p[k] for p in per) / len(per) for k in per[0]}))
    return out


def _claims(model: str, m: dict) -> list[str]:
    rows, paper = m["rows"], PAPER.get(model)
    if paper is None or "dynacomm" not in rows:
        return []
    d = rows["dynacomm"]
    out = []
    agree = abs(d["it_red"] - paper["iteration"]) <= AGREE_PP
    out.append(f"| {paper['paper_model']}: iteration time -{paper['iteration']:.2f} % vs Sequential | "
               f"{-d['it_red']:+.1f} % | {'agrees' if agree else 'disagrees'}: the measured reduction is "
               f"{abs(d['it_red'] - paper['iteration']):.1f} pp from the paper's (rule: within {AGREE_PP:g} pp) |")
    if model == "resnet152_mini" and "lbl" in rows:
        gap = d["fwd_red"] - rows["lbl"]["fwd_red"]
        out.append(f"| ResNet-152: LBL's forward badly worse than DynaComm's (10.56 vs 43.84 % reduction) | "
                   f"LBL {rows['lbl']['fwd_red']:+.1f} %, DynaComm {d['fwd_red']:+.1f} % | "
                   f"{'agrees' if gap >= LBL_WORSE_PP else 'disagrees'}: DynaComm leads by {gap:.1f} pp "
                   f"(rule: at least {LBL_WORSE_PP:g} pp) |")
    if model == "vgg_mini" and all(s in rows for s in ("lbl", "ibatch")):
        reds = [rows[s]["fwd_red"] for s in ("lbl", "ibatch", "dynacomm")]
        spread = max(reds) - min(reds)
        out.append(f"| VGG-19: layer-wise methods close (forward 40.54 / 42.79 / 42.86 %) | "
                   f"{' / '.join(f'{x:.1f}' for x in reds)} % | {'agrees' if spread <= CLOSE_PP else 'disagrees'}: "
                   f"spread {spread:.1f} pp (rule: within {CLOSE_PP:g} pp) |")
    return out


def _rounds_table(m: dict) -> list[str]:
    """Per round: its load and each schedule's median iteration seconds."""
    rounds = sorted({r for v in m["rounds_of"].values() for r in v})
    if len(rounds) < 2:
        return []
    names = list(m["rounds_of"])
    out = markdown_table(["round", "other busy cores", *(f"{n} s" for n in names)])
    for r in rounds:
        cells = [fmt(m["rounds_of"][n].get(r), 3, none=DASH) for n in names]
        out.append(f"| {r} | {fmt(m['round_load'].get(r), none=DASH)} | " + " | ".join(cells) + " |")
    return out + [""]


def dynacomm_markdown(result_dir: str | Path, graded: Sequence) -> str:
    """The ``result/dynacomm/summary.md`` text; ``graded``: the claims' graded rows
    (:func:`rog.papers.dynacomm.grading.graded_rows` of the same folder), whose counts open it."""
    s = dynacomm_summary(result_dir)
    lines = ["# DynaComm: layer-segment scheduling (Figs. 6 and 7, reproduced on this machine)", "",
             "Normalised to Sequential = 1.00 (forward: pull start to forward end; backward: backward start to "
             "push end; iteration: wall time between iteration starts); per round the median over iterations, "
             "then the median over rounds (min–max of the rounds' medians beside it). "
             "BSP, compression off, synthetic inputs.", ""]
    from rog.analysis.grades import section_opening

    lines += section_opening(list(graded), "DynaComm")
    if not s["models"]:
        return "\n".join(lines + [*sweep_lines(result_dir), "No other results yet: run `bash scripts/run_all.sh dynacomm`.", ""])
    for model, m in s["models"].items():
        lines += [f"## {model} ({m['workers']} workers, link {fmt(m['rate_mbit'], 1, none=DASH)} Mbit/s per direction, "
                  f"payload {m['payload_bytes'] / 1e6:.2f} MB)", "",
                  *markdown_table(["schedule", "fwd", "bwd", "iteration", "iteration s (min–max)", "overlap s",
                                   "comm only s", "stall s", "segments fwd/bwd",
                                   "predicted fwd / bwd s"])]
        for sch, r in m["rows"].items():
            lines.append(f"| {sch} | {r['fwd']:.2f} | {r['bwd']:.2f} | {r['iteration']:.2f} | {r['iteration_s']:.3f} "
                         f"({r['iteration_min_s']:.3f}–{r['iteration_max_s']:.3f}) | "
                         f"{r['overlap_s']:.3f} | {r['comm_only_s']:.3f} | {r['stall_s']:.3f} | "
                         f"{r['fwd_segments']:.1f} / {r['bwd_segments']:.1f} | {fmt(r['pred_fwd_s'], 3, none=DASH)} / "
                         f"{fmt(r['pred_bwd_s'], 3, none=DASH)} (measured {r['fwd_s']:.3f} / {r['bwd_s']:.3f}) |")
        lines += ["", *_rounds_table(m), *paired_lines(result_dir, model),
                  *markdown_table(["paper's claim", "measured", "agreement"]), *_claims(model, m), ""]
        margins = model_margins(result_dir).get(model)
        if margins:
            lines += ["Cost model on DynaComm's own planning profiles, forward + backward over the DP's plan "
                      "(median over plans): " + ", ".join(f"{k} {v:.3f}" for k, v in margins.items()) + ".", ""]
        for k, v in m["checks"].items():
            if isinstance(v, tuple):
                lines.append(f"- {k[:-len('_rounds')]}: holds in {v[0]} of {v[1]} rounds")
            elif isinstance(v, bool):
                lines.append(f"- {k}: {'met' if v else 'NOT met'} (on the medians over rounds)")
            else:
                ok = abs(v) <= FIDELITY
                lines.append(f"- {k}: {v * 100:+.1f} % ({'within' if ok else 'outside'} {FIDELITY * 100:.0f} %)")
        lines.append("")
    rows = outdoors_rows(result_dir)
    if rows:
        lines += ["## Outdoors trace (2 workers, loopback replay, compression off, no compute pacing)", "",
                  *markdown_table(["run", "iterations", "s / iteration", "gate stall s / iteration", "stall share",
                                   "overlap s / iteration"])]
        for r in rows:
            lines.append(f"| {r['run']} | {r['iterations']:.1f} | {r['iteration_s']:.3f} | {r['stall_s']:.3f} | "
                         f"{r['stall_s'] / r['iteration_s'] * 100:.0f} % | {r['overlap_s']:.3f} |")
        lines.append("")
    return "\n".join(lines + sweep_lines(result_dir))


COMPOSITION = (("compute_only_s", "compute only"), ("overlap_s", "compute + communication"),
               ("comm_only_s", "communication only"), ("stall_s", "barrier stall"))


def plot_dynacomm(result_dir: str | Path, figure_dir: str | Path, formats: Sequence[str] = MODULE_FORMATS) -> list[Path]:
    """``dynacomm_<model>.png``: normalised forward, backward and iteration time per schedule (left) and the
    iteration's time composition in seconds (right): compute only, compute overlapped with
    communication, communication only, and the barrier stall; one file per format."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = dynacomm_summary(result_dir)
    out = []
    for model, m in s["models"].items():
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw=dict(width_ratios=[1.2, 1]))
        names = list(m["rows"])
        for i, part in enumerate(("fwd", "bwd", "iteration")):
            ax.bar([x + 0.27 * (i - 1) for x in range(len(names))], [m["rows"][n][part] for n in names], 0.27, label=part)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylabel("time / Sequential's")
        ax.set_title(f"{model}: {m['workers']} workers, {fmt(m['rate_mbit'], 0, none=DASH)} Mbit/s")
        ax.legend(fontsize=8)
        bottom = [0.0] * len(names)
        missing = [f"{n} {label}" for key, label in COMPOSITION for n in names if m["rows"][n][key] is None]
        for key, label in COMPOSITION:  # a part without a value is left out (not drawn as 0), named in the legend
            vals = [m["rows"][n][key] for n in names]
            xs = [x for x, v in enumerate(vals) if v is not None]
            ax2.bar(xs, [vals[x] for x in xs], 0.6, bottom=[bottom[x] for x in xs], label=label)
            bottom = [b + (v or 0.0) for b, v in zip(bottom, vals)]
        if missing:
            ax2.bar([0], [0], 0, color="none", label=f"not drawn, no value: {', '.join(missing)}")
        ax2.set_xticks(range(len(names)), names, fontsize=8)
        ax2.set_ylabel("seconds per iteration (mean)")
        ax2.set_title("time composition")
        ax2.legend(fontsize=7)
        fig.tight_layout()
        out += save_figure(fig, figure_dir, f"dynacomm_{model}", formats)
    return out
