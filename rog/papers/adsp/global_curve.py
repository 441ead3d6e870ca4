"""ADSP's Figs. 1 and 4 read from the global model (``global_eval`` records of the PS, one time grid for
every system; :mod:`rog.runtime.global_eval`), over seeds.

* :func:`global_curve`: a run's global-model loss and accuracy at grid times ``time_s`` (seconds since
  every worker joined: the same origin for every system).
* :func:`fig4_rows`: per seed, one common target loss for the seed's systems (the toolkit's rule on the
  negated loss, curves smoothed over 3 samples, as Fig. 3a), each system's time to it, and ADSP's time
  reduction ``1 - T_ADSP / T_sys`` over each baseline; then per baseline the median and range over
  seeds next to the paper's 80 / 53 / 33 % (Fig. 4).  The verdict rule (fixed before the runs) is in
  docs/adsp.md: agreement needs the median within 15 points of the paper's number.
* :func:`fig1_seed_rows`: per system, the waiting share per seed, median and range; the verdict (paper:
  more than 50 % for BSP and SSP) is taken on the median.
* :func:`eval_cost`: what the evaluations cost the PS (CPU seconds per evaluation, share of one core).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from rog.analysis.load import RunData
from rog.analysis.metrics import TARGET_FRACTION, composition, select_target, smooth_accuracy, time_to_target_s
from rog.analysis.tables import markdown_table, pct

PAPER_REDUCTION = {"BSP": 0.80, "SSP": 0.53, "ADACOMM": 0.33}  # Fig. 4: ADSP's "faster" vs each (Fixed ADACOMM)
FIG4_TOLERANCE = 0.15  # agreement: the median reduction within 15 points of the paper's
WAITING_SHARE_MIN = 0.5  # Fig. 1: "more than 50 %" (strictly)


def _system(run: RunData) -> str:
    return str(run.library or "?").upper()


def global_eval_records(run: RunData) -> pd.DataFrame | None:
    """The PS's ``global_eval`` records as they were logged (None without any)."""
    ps = run.events.get("ps")
    if ps is None or ps.empty or "kind" not in ps.columns:
        return None
    g = ps[ps["kind"] == "global_eval"]
    return None if g.empty else g


def global_curve(run: RunData) -> pd.DataFrame | None:
    """``time_s`` (grid time), ``loss``, ``accuracy_pct``, ``cpu_s``, ``duration_s``; None without records."""
    g = global_eval_records(run)
    if g is None:
        return None
    return pd.DataFrame({"time_s": g["t_grid_s"].astype(float).to_numpy(), "loss": g["loss"].astype(float).to_numpy(),
                         "accuracy_pct": g["accuracy"].astype(float).to_numpy(),
                         "cpu_s": g["cpu_s"].astype(float).to_numpy(),
                         "duration_s": g["duration_s"].astype(float).to_numpy()}).sort_values("time_s")


def _neg_loss(curve: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"time_s": curve["time_s"].to_numpy(), "iteration": 0.0,
                         "accuracy_pct": -curve["loss"].to_numpy()})


def _spread(values: list[float]) -> dict[str, Any]:
    v = [x for x in values if x is not None]
    if not v:
        return dict(median=None, lo=None, hi=None, n=0)
    return dict(median=float(np.median(v)), lo=float(min(v)), hi=float(max(v)), n=len(v))


def fig4_rows(runs: Sequence[RunData], tag: str = "fig1", fraction: float = TARGET_FRACTION) -> dict[str, Any]:
    """Per seed: the target loss and each system's time to it; per baseline: ADSP's reduction over seeds."""
    by_seed: dict[int, dict[str, RunData]] = {}
    for r in runs:
        if r.note == tag:
            by_seed.setdefault(r.seed or 0, {})[_system(r)] = r
    seeds = []
    for seed, systems in sorted(by_seed.items()):
        curves = {s: global_curve(r) for s, r in systems.items()}
        curves = {s: c for s, c in curves.items() if c is not None and len(c) > 1}
        if "ADSP" not in curves:
            continue
        names = sorted(curves)
        smoothed = [smooth_accuracy(_neg_loss(curves[s])) for s in names]
        neg_target, rule = select_target(smoothed, fraction, names)
        times = {s: time_to_target_s(a, neg_target) for s, a in zip(names, smoothed)}
        ta = times.get("ADSP")
        red = {s: (None if not (t and ta) else 1.0 - ta / t) for s, t in times.items() if s != "ADSP"}
        seeds.append(dict(seed=seed, target_loss=None if neg_target is None else -neg_target, rule=rule,
                          time_to_target_s=times, adsp_time_reduction=red))
    per_base = {}
    for base, paper in PAPER_REDUCTION.items():
        vals = [s["adsp_time_reduction"].get(base) for s in seeds if base in s["adsp_time_reduction"]]
        sp = _spread(vals)
        missing = sum(1 for v in vals if v is None)
        verdict = ("not decidable" if sp["median"] is None or missing
                   else "agrees" if abs(sp["median"] - paper) <= FIG4_TOLERANCE else "does not agree")
        # the other reading of "X % faster": a speed-up T_base / T_ADSP - 1 = X (monotone in the reduction)
        ups = _spread([None if v is None or v >= 1 else 1.0 / (1.0 - v) - 1.0 for v in vals])
        up_verdict = ("not decidable" if ups["median"] is None or missing
                      else "agrees" if abs(ups["median"] - paper) <= FIG4_TOLERANCE else "does not agree")
        per_base[base] = dict(paper=paper, **sp, missing=missing, verdict=verdict, speedup_median=ups["median"],
                              speedup_lo=ups["lo"], speedup_hi=ups["hi"], speedup_verdict=up_verdict)
    return dict(seeds=seeds, per_baseline=per_base)


def fig1_seed_rows(runs: Sequence[RunData], tag: str = "fig1") -> dict[str, Any]:
    """Per system: waiting share (communication + stall over step time) per seed, median, range."""
    shares: dict[str, list[float]] = {}
    for r in runs:
        if r.note != tag:
            continue
        c = composition(r)
        if c["iter_s"]:
            shares.setdefault(_system(r), []).append((c["comm_s"] + c["stall_s"]) / c["iter_s"])
    rows = {s: _spread(v) for s, v in shares.items()}
    base = [rows.get(s) for s in ("BSP", "SSP")]
    decidable = all(b is not None and b["median"] is not None for b in base)
    verdict = ("not decidable" if not decidable
               else "agrees" if all(b["median"] > WAITING_SHARE_MIN for b in base) else "does not agree")
    return dict(systems=rows, verdict=verdict)


def eval_cost(runs: Sequence[RunData]) -> dict[str, Any]:
    """CPU seconds per global evaluation (median over every record) and the share of one core it takes
    at the runs' grid step (median CPU per evaluation / grid step)."""
    cpu, steps = [], []
    for r in runs:
        c = global_curve(r)
        if c is None:
            continue
        cpu += c["cpu_s"].tolist()
        if len(c) > 1:
            steps.append(float(np.median(np.diff(c["time_s"].to_numpy()))))
    if not cpu:
        return dict(evaluations=0, cpu_s_median=None, core_share=None)
    med = float(np.median(cpu))
    step = float(np.median(steps)) if steps else None
    return dict(evaluations=len(cpu), cpu_s_median=med, cpu_s_max=float(max(cpu)), grid_step_s=step,
                core_share=None if not step else med / step)


def global_markdown(d: dict[str, Any]) -> list[str]:
    """Lines of summary.md for Figs. 1 and 4 over seeds, read from the global model, and the evaluations' cost."""
    out: list[str] = []
    f1 = d.get("fig1_seeds") or {}
    if f1.get("systems"):
        out += ["### Fig. 1 over seeds: waiting share of a step", "", *markdown_table(["system", "median", "range",
                                                                                       "seeds"])]
        out += [f"| {s} | {pct(x['median'])} | {pct(x['lo'])} to {pct(x['hi'])} | {x['n']} |"
                for s, x in sorted(f1["systems"].items())]
        out += ["", f"Paper: more than 50 % for BSP and SSP. Measured (medians): {f1['verdict']}.", ""]
    f4 = d.get("fig4") or {}
    if f4.get("seeds"):
        out += ["### Fig. 4 at this scale: time to the global model's target loss", "",
                *markdown_table(["baseline", "paper", "reading: time reduction, median", "range", "verdict",
                                 "reading: speed-up, median", "range", "verdict", "seeds"])]
        out += [f"| {b} | {pct(x['paper'])} | {pct(x['median'])} | {pct(x['lo'])} to {pct(x['hi'])} | {x['verdict']} | "
                f"{pct(x.get('speedup_median'))} | {pct(x.get('speedup_lo'))} to {pct(x.get('speedup_hi'))} | "
                f"{x.get('speedup_verdict', 'n/a')} | {x['n']} (+{x['missing']} not reached) |"
                for b, x in f4["per_baseline"].items()]
        out += ["", "The paper's \"X % faster\" read two ways, each with its own verdict: time reduction "
                "1 - T_ADSP / T_baseline and speed-up T_baseline / T_ADSP - 1, to a common target loss per seed (the "
                f"toolkit's rule on the negated global loss); agreement: median within {FIG4_TOLERANCE * 100:.0f} "
                "points of the paper's. "
                "3 workers over a short budget, not the paper's 18 workers to convergence.", ""]
        for s in f4["seeds"]:
            t = ", ".join(f"{k} {'n/a' if v is None else f'{v:.1f} s'}"
                          for k, v in sorted(s["time_to_target_s"].items()))
            target = "n/a" if s["target_loss"] is None else f"{s['target_loss']:.4f}"
            out.append(f"- seed {s['seed']}: target loss {target}; {t}")
        out.append("")
    c = d.get("eval_cost") or {}
    if c.get("evaluations"):
        out += [f"Global evaluations at the PS: {c['evaluations']}, median {c['cpu_s_median']:.3f} CPU s each (max "
                f"{c['cpu_s_max']:.3f}), every {c['grid_step_s']} s: {pct(c['core_share'])} of one core.", ""]
    return out
