"""ADSP's Fig. 5 (heterogeneity) and Fig. 6 (network delay) read from the global model, over seeds, beside the
paper's statements (items ``adsp_fig56`` and ``adsp_fig6_fresh``, :mod:`rog.papers.adsp.item`).

* :func:`heterogeneity_degree`: the paper's ``H = (sum_i v_i / M) / min_i v_i`` from a run's compute ratios
  (``v_i = 1 / ratio_i``).
* :func:`figure_times`: per seed, one common target loss and each run's time to it.  A seed counts only when the
  figure's every planned run of it is present and has a global-model curve.  Fig. 5: the target is common to
  every run of the seed (every H and system: Fig. 4's rule, :func:`rog.papers.adsp.global_curve.fig4_rows`, on
  the negated global loss smoothed over 3 samples); a run whose loss never falls below the start within its
  budget is set aside from the target's choice and its budget stands as its time (a lower bound); when that run
  is ADSP's, the figure's verdicts are not decidable.  Fig. 6: the target comes from the seed's 0 ms runs, with
  a depth guard, and a run that does not reach it gets its budget as a lower bound (:mod:`rog.papers.adsp.fig6`).
* :func:`fig5_rows`: medians and ranges over the counted seeds and the verdicts whose rules docs/adsp.md fixed
  before the runs; :func:`fig6_rows`: Fig. 6's, under the rules of :mod:`rog.papers.adsp.fig6`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .fig6 import (FIG6_DELAYS_MS, FIG6_FRESH_SEEDS, FIG6_GUARD_SEEDS, FIG6_SYSTEMS, depth_check, fig6_markdown,
                   summarise_seeds)
from .global_curve import _neg_loss, _spread, global_curve
from rog.analysis.load import RunData
from rog.analysis.metrics import TARGET_FRACTION, select_target, smooth_accuracy, time_to_target_s
from rog.analysis.tables import fmt, markdown_table, pct

# The figures' settings, as the item adsp_fig56 (rog.papers.adsp.item) runs them (a test keeps the two equal;
# the analysis layer does not import the experiment layer)
FIG5_H = (1.0, 1.6, 2.4, 3.2)  # heterogeneity degrees (the paper's Fig. 5e)
FIG5_SYSTEMS = ("ADSP", "ADACOMM")  # ADSP against Fixed ADACOMM, as the paper's Fig. 5
MIN_SEEDS = 3  # a verdict needs this many complete seeds (issue 33: at least 3 seeds for every figure)
FLAT_MAX = 0.15  # Fig. 5: ADSP's median times over H vary by at most this share of the smallest
GAIN_AT_MAX_H = 0.40  # Fig. 5: ADSP's median time reduction over Fixed ADACOMM at the largest H, at least
GAIN_STEP_TOL = 0.05  # Fig. 5: no step to a larger H lowers the median gain by more than this
PAPER_GAIN = 0.624  # Fig. 5: "62.4 % convergence speedup" over Fixed ADACOMM at H = 3.2


def heterogeneity_degree(ratios: Sequence[float] | None, workers: int = 1) -> float:
    """``H = mean_i(v_i) / min_i(v_i)`` with ``v_i = 1 / ratio_i`` (a ratio multiplies the mini-batch time);
    ``None`` (no ratios given): every worker alike, H = 1."""
    if ratios is None:
        return 1.0
    v = 1.0 / np.asarray([float(x) for x in ratios], dtype=float)
    return float(v.mean() / v.min())


def _system(run: RunData) -> str:
    return str(run.library or "?").upper()


def _tag(run: RunData) -> str:
    return run.note


def _setting(run: RunData, figure: int) -> float | None:
    """The figure's variable for ``run`` (H rounded to 0.01, or the delay in ms); None when not in the figure."""
    tag = _tag(run)
    if figure == 5 and tag.startswith("fig5-"):
        return round(heterogeneity_degree(run.compute_ratios), 2)
    if figure == 6 and (tag.startswith("fig6-") or tag == "fig1"):  # 0 ms: the adsp item's fig1 runs
        return run.link_delay_ms
    return None


def _planned(figure: int) -> tuple[tuple[float, ...], tuple[str, ...]]:
    if figure == 5:
        return tuple(round(h, 2) for h in FIG5_H), FIG5_SYSTEMS
    return tuple(float(d) for d in FIG6_DELAYS_MS), FIG6_SYSTEMS


def _target(smoothed: list, names: list[str], fraction: float) -> tuple[float | None, str, set[int]]:
    """The toolkit's common target over the runs; when some run never rose above the start (no common target),
    those runs are set aside (``censored``, by index) and the target is chosen from the others."""
    keep = list(range(len(smoothed)))
    while True:
        neg_target, rule = select_target([smoothed[i] for i in keep], fraction, [names[i] for i in keep])
        if neg_target is not None or not keep:
            return neg_target, rule, set(range(len(smoothed))) - set(keep)
        start = float(np.mean([smoothed[i].sort_values("time_s")["accuracy_pct"].iloc[0] for i in keep]))
        rose = [i for i in keep if float(smoothed[i]["accuracy_pct"].max()) > start]
        if len(rose) == len(keep) or not rose:
            return None, rule, set()
        keep = rose


def figure_times(runs: Sequence[RunData], figure: int, fraction: float = TARGET_FRACTION) -> dict[str, Any]:
    """``seeds``: per complete seed its target loss, rule, ``times`` (``{setting: {system: s or None}}``) and
    ``censored`` (runs whose loss never fell below the start: their budget stands as a lower bound of their time);
    ``incomplete``: ``{seed: missing "setting/system" names}``."""
    settings, systems = _planned(figure)
    by_seed: dict[int, dict[tuple[float, str], RunData]] = {}
    for r in runs:
        x = _setting(r, figure)
        if r.status == "done" and x is not None and x in settings and _system(r) in systems:  # complete runs only
            by_seed.setdefault(r.seed or 0, {})[(x, _system(r))] = r
    seeds, incomplete = [], {}
    for seed, got in sorted(by_seed.items()):
        curves = {key: global_curve(r) for key, r in got.items()}
        missing = [f"{x:g}/{s}" for x in settings for s in systems
                   if curves.get((x, s)) is None or len(curves[(x, s)]) < 2]
        if missing:
            incomplete[seed] = missing
            continue
        keys = [(x, s) for x in settings for s in systems]
        names = [f"{x:g}/{s}" for x, s in keys]
        smoothed = [smooth_accuracy(_neg_loss(curves[k])) for k in keys]
        chosen = [i for i, (x, _) in enumerate(keys) if figure != 6 or x == 0.0]  # Fig. 6: the 0 ms runs set it
        neg_target, rule, aside = _target([smoothed[i] for i in chosen], [names[i] for i in chosen], fraction)
        censored = {chosen[i] for i in aside}
        times: dict[float, dict[str, float | None]] = {x: {} for x in settings}
        lower = []
        for i, ((x, s), a) in enumerate(zip(keys, smoothed)):
            budget = float(got[(x, s)].time_budget_s or curves[(x, s)]["time_s"].iloc[-1])
            t = None if i in censored else time_to_target_s(a, neg_target)
            if neg_target is not None and (i in censored or (figure == 6 and t is None)):
                t = budget  # a lower bound: set aside, or (Fig. 6) not reached within the budget
                lower.append(names[i])
            times[x][s] = t
        seed_row = dict(seed=seed, target_loss=None if neg_target is None else -neg_target,
                        rule=rule.replace("accuracy in %", "negated loss"), times=times,
                        censored=[names[i] for i in sorted(censored)], lower=lower)
        if figure == 6:
            start = -float(np.mean([smoothed[i].sort_values("time_s")["accuracy_pct"].iloc[0] for i in chosen]))
            seed_row["depth"] = depth_check(start, seed_row["target_loss"], [curves[keys[i]] for i in chosen],
                                            seed=seed)
        seeds.append(seed_row)
    return dict(seeds=seeds, incomplete=incomplete)


def _adsp_censored(ft: dict) -> bool:
    return any(c.endswith("/ADSP") for s in ft["seeds"] for c in s["censored"])


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if not (num and den) else num / den


def _seed_gate(n: int) -> str | None:
    return None if n >= MIN_SEEDS else f"not decidable ({n} of {MIN_SEEDS} seeds)"


def fig5_rows(runs: Sequence[RunData], fraction: float = TARGET_FRACTION) -> dict[str, Any]:
    """Per H: ADSP's and Fixed ADACOMM's time to the common target and ADSP's gain (both readings), median and
    range over seeds; the verdicts ``flat`` and ``gain_grows`` (docs/adsp.md)."""
    ft = figure_times(runs, 5, fraction)
    rows = []
    for h in _planned(5)[0]:
        ta = [s["times"][h]["ADSP"] for s in ft["seeds"]]
        tb = [s["times"][h]["ADACOMM"] for s in ft["seeds"]]
        red = [None if q is None else 1.0 - q for q in (_ratio(a, b) for a, b in zip(ta, tb))]
        up = [None if q is None else q - 1.0 for q in (_ratio(b, a) for a, b in zip(ta, tb))]
        rows.append(dict(h=h, adsp_s=_spread(ta), adacomm_s=_spread(tb), gain=_spread(red), speedup=_spread(up),
                         missing=sum(v is None for v in ta + tb)))
    n = len(ft["seeds"])
    gate = (_seed_gate(n) or ("not decidable (a time is missing)" if any(r["missing"] for r in rows) else None)
            or ("not decidable (ADSP never fell below the start)" if _adsp_censored(ft) else None))
    med_t = [r["adsp_s"]["median"] for r in rows]
    gains = [r["gain"]["median"] for r in rows]
    spread = None if None in med_t or not rows else (max(med_t) - min(med_t)) / min(med_t)  # shown with any verdict
    flat = gate or ("agrees" if spread <= FLAT_MAX else "does not agree")
    if gate:
        grows = gate
    else:
        steps_ok = all(b >= a - GAIN_STEP_TOL for a, b in zip(gains, gains[1:]))
        grows = "agrees" if gains[-1] >= GAIN_AT_MAX_H and gains[-1] > gains[0] and steps_ok else "does not agree"
    return dict(rows=rows, seeds=ft["seeds"], incomplete=ft["incomplete"], n_seeds=n, adsp_time_spread=spread,
                flat=flat, gain_grows=grows)


def fig6_rows(runs: Sequence[RunData]) -> dict[str, Any]:
    """The fresh seeds' table and verdicts (``delays_ms``, ``times``, ``ratios``, ``ratio_grows``, ``adsp_fastest``,
    ...), ``seen``: the other complete seeds under the same rule (reported, no verdict; None without any), and
    ``incomplete``: ``{seed: missing runs}``."""
    ft = figure_times(runs, 6)
    fresh = [s for s in ft["seeds"] if s["seed"] in FIG6_FRESH_SEEDS]
    guard = [s for s in ft["seeds"] if s["seed"] in FIG6_GUARD_SEEDS]
    seen = [s for s in ft["seeds"] if s["seed"] not in FIG6_FRESH_SEEDS + FIG6_GUARD_SEEDS]
    return dict(delays_ms=[float(d) for d in FIG6_DELAYS_MS], fresh_seeds=list(FIG6_FRESH_SEEDS),
                incomplete=ft["incomplete"], **summarise_seeds(fresh), seen=summarise_seeds(seen) if seen else None,
                guard_seeds=list(FIG6_GUARD_SEEDS), guard=summarise_seeds(guard) if guard else None)


def fig56_summary(runs: Sequence[RunData]) -> dict[str, Any] | None:
    """Both figures (None when no ``fig5-``/``fig6-`` run is present)."""
    if not any(_tag(r).startswith(("fig5-", "fig6-")) for r in runs):
        return None
    return dict(fig5=fig5_rows(runs), fig6=fig6_rows(runs))


def _mr(sp: dict, scale: float = 1.0, unit: str = "") -> str:
    """``median (lo to hi)``, one decimal of ``x * scale`` and ``unit``."""
    def cell(x):
        return fmt(x, 1, scale, none="n/a", unit=unit)
    return "n/a" if sp["median"] is None else f"{cell(sp['median'])} ({cell(sp['lo'])} to {cell(sp['hi'])})"


def _seeds_line(f: dict) -> list[str]:
    out = [f"Seeds counted: {f['n_seeds']} (a verdict needs {MIN_SEEDS})."]
    for seed, miss in sorted(f["incomplete"].items()):
        out.append(f"Seed {seed} left out, runs missing: {', '.join(miss)}.")
    for s in f["seeds"]:
        tl = "n/a" if s["target_loss"] is None else f"{s['target_loss']:.4f}"
        out.append(f"Seed {s['seed']}: common target loss {tl} ({s['rule']}).")
        if s["censored"]:
            out.append(f"Seed {s['seed']}: never below the start within the budget (the budget stands as the time, "
                       f"a lower bound): {', '.join(s['censored'])}.")
    return out


def fig56_markdown(d: dict[str, Any] | None) -> list[str]:
    """Lines of summary.md: Fig. 5's and Fig. 6's tables beside the paper's statements, with the verdicts."""
    if not d:
        return []
    f5, f6 = d["fig5"], d["fig6"]
    out = ["### Fig. 5 at this scale: heterogeneity (ADSP vs Fixed ADACOMM-40)", "",
           *markdown_table(["H", "paper", "ADSP time to target (s)", "Fixed ADACOMM (s)", "ADSP time reduction",
                            "as speed-up"])]
    for r in f5["rows"]:
        paper = (f"{PAPER_GAIN * 100:.1f} % faster" if r["h"] == max(FIG5_H)
                 else "ADSP faster; gap grows with H")
        out.append(f"| {r['h']:g} | {paper} | {_mr(r['adsp_s'])} | {_mr(r['adacomm_s'])} | {_mr(r['gain'], 100, ' %')} | "
                   f"{_mr(r['speedup'], 100, ' %')} |")
    out += ["", "Median (range) over seeds; times to one common target loss per seed (every H, both systems).",
            f"Paper: ADSP's convergence time hardly depends on H. Measured: ADSP's median times vary by "
            f"{pct(f5['adsp_time_spread'])} across H (rule: at most {FLAT_MAX * 100:.0f} %): {f5['flat']}.",
            f"Paper: the gap over Fixed ADACOMM grows with H, 62.4 % at H = 3.2. Rule: median reduction at "
            f"H = {max(FIG5_H):g} at least {GAIN_AT_MAX_H * 100:.0f} %, above H = 1's, no step down by more than "
            f"{GAIN_STEP_TOL * 100:.0f} points: {f5['gain_grows']}."]
    out += _seeds_line(f5) + [""]
    return out + fig6_markdown(f6)
