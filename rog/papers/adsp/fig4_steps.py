"""ADSP's Figs. 4a, 4c and 4d from the ``adsp`` item's ``fig1`` runs: the global loss against time, the steps
trained, and the loss decrease per step (rules in docs/adsp.md, "Figs. 4a, 4c and 4d").

A step is one mini-batch at one worker (a ``compute`` record, done at ``t_s + duration_s``).  The global
model's grid time is put on the run clock by the PS's own ``global_eval`` records (the median of
``t_s - t_grid_s``: the moment every worker had joined), so :func:`steps_at` counts the steps done at all
workers by any grid time.  Fig. 4's common target loss and each system's time to it come from
:func:`rog.papers.adsp.global_curve.fig4_rows`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rog.analysis.load import RunData
from rog.analysis.tables import fmt, markdown_table

from .global_curve import _spread, _system, fig4_rows, global_curve, global_eval_records

STEP_RATE_MIN_RATIO = 1.2  # (c): ADSP's median step rate at least this times every other system's ("many more")
SLIGHTLY_BELOW_MAX_RATIO = 1.5  # (d): ADSP needs at most this times Fixed ADACOMM's steps ("slightly lower")


def grid_origin_s(run: RunData) -> float | None:
    """The run-clock time of grid time 0 (every worker joined), from the PS's ``global_eval`` records."""
    g = global_eval_records(run)
    if g is None:
        return None
    return float(np.median(g["t_s"].astype(float).to_numpy() - g["t_grid_s"].astype(float).to_numpy()))


def step_done_times(run: RunData) -> np.ndarray:
    """Sorted run-clock times at which every mini-batch of every worker was done."""
    done = []
    for rank, ev in run.events.items():
        if not rank.startswith("w") or ev is None or ev.empty or "kind" not in ev.columns:
            continue
        c = ev[ev["kind"] == "compute"]
        if not c.empty:
            done.append(c["t_s"].astype(float).to_numpy() + c["duration_s"].astype(float).to_numpy())
    return np.sort(np.concatenate(done)) if done else np.zeros(0)


def steps_at(run: RunData, grid_times_s) -> np.ndarray | None:
    """Steps done at all workers by each grid time (None without the PS's grid records)."""
    origin = grid_origin_s(run)
    if origin is None:
        return None
    return np.searchsorted(step_done_times(run), origin + np.asarray(grid_times_s, dtype=float), side="right")


def fig4cd_rows(runs: Sequence[RunData], tag: str = "fig1", f4: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per seed: each system's step rate, steps to the common target, steps by ADSP's time to it; over seeds:
    medians and the verdicts of (c) and (d).  ``f4``: :func:`fig4_rows` of the same runs, when already made."""
    f4 = fig4_rows(runs, tag) if f4 is None else f4
    by_key = {((r.seed or 0), _system(r)): r for r in runs if r.note == tag}
    seeds = []
    for s in f4["seeds"]:
        seed, times = s["seed"], s["time_to_target_s"]
        rate, to_target, by_adsp = {}, {}, {}
        for system, t in times.items():
            run = by_key.get((seed, system))
            curve = global_curve(run) if run is not None else None
            if curve is None or curve.empty:
                continue
            t_end = float(curve["time_s"].max())
            at = steps_at(run, [t_end] + [x for x in (t, times.get("ADSP")) if x is not None])
            if at is None or t_end <= 0:
                continue
            rate[system] = float(at[0]) / t_end
            to_target[system] = None if t is None else int(at[1])
            if times.get("ADSP") is not None:
                by_adsp[system] = int(at[-1])
        seeds.append(dict(seed=seed, target_loss=s["target_loss"], step_rate_per_s=rate, steps_to_target=to_target,
                          steps_by_adsp_time=by_adsp))
    systems = sorted({k for s in seeds for k in s["step_rate_per_s"]})
    rate = {k: _spread([s["step_rate_per_s"].get(k) for s in seeds]) for k in systems}
    steps = {}
    for k in systems:
        vals = [s["steps_to_target"].get(k) for s in seeds if k in s["steps_to_target"]]
        steps[k] = dict(**_spread(vals), missing=sum(v is None for v in vals))
    return dict(seeds=seeds, step_rate=rate, steps_to_target=steps, verdicts=_verdicts(rate, steps))


def _verdicts(rate: dict, steps: dict) -> dict[str, str]:
    out = {}
    a = rate.get("ADSP", {}).get("median")
    others = [v["median"] for k, v in rate.items() if k != "ADSP"]
    out["c_step_rate"] = ("not decidable" if a is None or not others or None in others
                          else "agrees" if all(a >= STEP_RATE_MIN_RATIO * o for o in others) else "does not agree")

    def med(k):
        v = steps.get(k)
        return None if v is None or v["missing"] or v["median"] is None else v["median"]

    sa, bsp, ssp, fixed = med("ADSP"), med("BSP"), med("SSP"), med("ADACOMM")
    out["d_better_than_bsp_ssp"] = ("not decidable" if None in (sa, bsp, ssp)
                                    else "agrees" if sa < bsp and sa < ssp else "does not agree")
    out["d_slightly_below_fixed_adacomm"] = (
        "not decidable" if None in (sa, fixed)
        else "agrees" if fixed <= sa <= SLIGHTLY_BELOW_MAX_RATIO * fixed else "does not agree")
    return out


def fig4cd_markdown(d: dict[str, Any] | None) -> list[str]:
    """Lines of summary.md for Figs. 4c and 4d."""
    if not d or not d.get("seeds"):
        return []
    v = d["verdicts"]
    out = ["### Fig. 4c and 4d at this scale: steps trained and steps to the target", "",
           *markdown_table(["system", "steps per second, median", "range", "steps to the target, median", "range",
                            "seeds"])]
    for k, r in sorted(d["step_rate"].items()):
        s = d["steps_to_target"].get(k, {})
        miss = f" (+{s['missing']} not reached)" if s.get("missing") else ""
        out.append(f"| {k} | {fmt(r['median'], 1, none='n/a')} | {fmt(r['lo'], 1, none='n/a')} to {fmt(r['hi'], 1, none='n/a')} | {fmt(s.get('median'), 0, none='n/a')} | "
                   f"{fmt(s.get('lo'), 0, none='n/a')} to {fmt(s.get('hi'), 0, none='n/a')} | {r['n']}{miss} |")
    out += ["", "A step is one mini-batch at one worker, counted at all workers (the paper's Fig. 4c/d). "
            f"(c) Paper: ADSP \"carries out many more training steps\"; rule: ADSP's median step rate >= "
            f"{STEP_RATE_MIN_RATIO:g} x every other system's: **{v['c_step_rate']}**. "
            "(d) Paper: ADSP's loss decrease per step is \"slightly lower than that of Fixed ADACOMM, and better than "
            f"other baselines\"; fewer steps to the common target = more decrease per step. Better than BSP and SSP "
            f"(ADSP's median steps below both): **{v['d_better_than_bsp_ssp']}**; slightly below Fixed ADACOMM "
            f"(Fixed ADACOMM's median <= ADSP's <= {SLIGHTLY_BELOW_MAX_RATIO:g} x it): "
            f"**{v['d_slightly_below_fixed_adacomm']}**.", ""]
    for s in d["seeds"]:
        by = ", ".join(f"{k} {n}" for k, n in sorted(s["steps_by_adsp_time"].items()))
        out.append(f"- seed {s['seed']}: steps done by ADSP's time to the target: {by or 'n/a'}")
    out.append("")
    return out
