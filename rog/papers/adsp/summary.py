"""The ADSP items' tables (rog.papers.adsp.item) next to the paper's claims, one sentence each.

* Fig. 1: per system, the time per step split into compute, communication and stall (means over
  the workers, :func:`rog.analysis.metrics.composition`); waiting = communication + stall (the
  paper's definition: training time minus computation); time to the item's common accuracy target
  (the toolkit's rule: :func:`rog.analysis.metrics.select_target`) and ADSP's speed-up over each.
* Fig. 3a: time to a common target *loss* of the PS's global model (the ``loss`` records of its
  scheduler) for each fixed commit rate; the same rule on the loss (target = start - 0.8 x (start -
  the highest of the runs' lowest losses), curves smoothed over 3 samples); whether the minimum is
  interior; where each online search landed (its last decision, or the rate in force at the end
  when the search had not decided) and its verdict against the grid's best rate: ``agrees`` only on
  exactly that rate; ``neighbour`` (reported separately, not agreement) on an adjacent grid rate or
  between the best and an adjacent one; ``disagrees`` elsewhere; ``not decided`` when it never decided.
* outdoors: ADSP next to the outdoors item's ROG, SSP and BSP runs found in the same result folder.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from rog.analysis.load import RunData
from rog.analysis.metrics import TARGET_FRACTION, composition, select_target, smooth_accuracy, time_to_target_s
from rog.analysis.tables import fmt, markdown_table, pct

PAPER = {  # the paper's claims (text only; figures lost in conversion)
    "waiting": "waiting > 50 % of training time for BSP and SSP, close to half for ADACOMM, 'negligible' for ADSP",
    "speedup": "ADSP converges 80 % / 53 % / 33 % faster than BSP / SSP / Fixed ADACOMM (Fig. 4, 18 workers)",
    "ushape": "convergence time first falls, then rises with the commit rate (Fig. 3a, 3 workers at 1:1:3)",
}
FIG1_ORDER = ("BSP", "SSP", "ADACOMM", "ADSP")
WAITING_SHARE_MIN = 0.5  # Fig. 1: the paper's "more than 50 %" waiting for BSP and SSP (strictly above)
USHAPE_SEEDS_NEEDED = 3  # Fig. 3a's U is judged over this many seeds' grids (docs/adsp.md, written before them)


def landing_verdict(k: int | None, decided: bool, grid: Sequence[int], best_k: int | None) -> str:
    """The search's landing ``k`` against the grid's best rate: ``agrees`` (k == best), ``neighbour`` (k on
    or inside the interval to a grid rate adjacent to the best), ``disagrees``, ``not decided``, or
    ``no grid``."""
    if best_k is None or k is None:
        return "no grid"
    if not decided:
        return "not decided"
    if k == best_k:
        return "agrees"
    ks = sorted(grid)
    i = ks.index(best_k)
    lo = ks[i - 1] if i > 0 else best_k
    hi = ks[i + 1] if i + 1 < len(ks) else best_k
    return "neighbour" if lo <= k <= hi else "disagrees"


def _tag(run: RunData) -> str:
    return run.note


def _label(run: RunData) -> str:
    lib = str(run.library or "?").upper()
    return lib if lib in ("BSP", "ADSP", "DDP") else f"{lib}-{run.threshold}"


def _schedule(run: RunData) -> pd.DataFrame:
    ps = run.events.get("ps")
    if ps is None or ps.empty or "kind" not in ps.columns:
        return pd.DataFrame(columns=["kind", "t_s", "event"])
    return ps[ps["kind"] == "schedule"]


def loss_curve(run: RunData) -> pd.DataFrame | None:
    """The PS's global loss over time (``time_s``, ``loss``): its ``global_eval`` grid when the run has one,
    else the scheduler's samples (seconds since the run start); None without samples."""
    from .global_curve import global_curve

    g = global_curve(run)
    if g is not None:
        return g[["time_s", "loss"]].reset_index(drop=True)
    s = _schedule(run)
    if s.empty or "loss" not in s.columns:
        return None
    s = s[s["event"].isin(["loss", "checkpoint"]) & s["loss"].notna()]
    if s.empty:
        return None
    out = pd.DataFrame({"time_s": s["t_s"].astype(float) - run.t0_s, "loss": s["loss"].astype(float)})
    return out.sort_values("time_s").drop_duplicates("time_s").reset_index(drop=True)


def search_landing(run: RunData) -> tuple[int | None, bool]:
    """(commit rate the online search chose last, True) or (the rate in force at the end, False)."""
    s = _schedule(run)
    if s.empty or "k" not in s.columns:
        return None, False
    dec = s[s["event"] == "decision"]
    if not dec.empty:
        return int(dec["k"].iloc[-1]), True
    ks = s["k"].dropna()
    return (int(ks.iloc[-1]), False) if not ks.empty else (None, False)


def _as_acc(curve: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"time_s": curve["time_s"], "iteration": 0.0, "accuracy_pct": -curve["loss"]})


def _accuracies(rs: Sequence[RunData]) -> list[pd.DataFrame | None]:
    """The global model's accuracy on the PS's grid when every run has it (``--global-eval-every-s``), else
    each run's own test curve (worker models)."""
    from .global_curve import global_curve

    curves = [global_curve(r) for r in rs]
    if rs and all(c is not None for c in curves):
        return [pd.DataFrame({"time_s": c["time_s"], "iteration": 0.0, "accuracy_pct": c["accuracy_pct"]}) for c in curves]
    return [r.accuracy for r in rs]


def fig1_rows(runs: Sequence[RunData], fraction: float = TARGET_FRACTION) -> tuple[list[dict], dict]:
    """Fig. 1 rows (one per system, seed 0) and the accuracy-target rule used for the speed-ups."""
    chosen = {(_label(r).split("-")[0]): r for r in runs if _tag(r) == "fig1" and (r.seed or 0) == 0}
    rs = [chosen[k] for k in FIG1_ORDER if k in chosen]
    accs = [smooth_accuracy(a) for a in _accuracies(rs)]
    target, rule = select_target(accs, fraction, [_label(r) for r in rs]) if rs else (None, "no runs")
    rows = []
    for r, acc in zip(rs, accs):
        c = composition(r)
        it = c["iter_s"]
        wait = None if it is None else c["comm_s"] + c["stall_s"]
        rows.append(dict(system=_label(r), run_id=r.run_id, iter_s=it, compute_s=c["compute_s"], comm_s=c["comm_s"],
                         stall_s=c["stall_s"], waiting_share=None if not it else wait / it,
                         stall_share=None if not it else c["stall_s"] / it, steps=c["iterations"],
                         time_to_target_s=time_to_target_s(acc, target)))
    adsp = next((x for x in rows if x["system"] == "ADSP"), None)
    for x in rows:
        t, ta = x["time_to_target_s"], adsp and adsp["time_to_target_s"]
        x["adsp_time_reduction"] = None if not (t and ta) else 1.0 - ta / t
        x["adsp_speedup"] = None if not (t and ta) else t / ta - 1.0
    return rows, dict(target_acc=target, rule=rule)


def _grid_rows(grid: Sequence[tuple[int, RunData]], fraction: float) -> dict[str, Any]:
    """One seed's fixed-rate grid ``[(k, run)]``: the common target loss, each rate's time to it, the best rate
    and whether it is interior (a U)."""
    curves = [loss_curve(r) for _, r in grid]
    ok = [(k, r, c) for (k, r), c in zip(grid, curves) if c is not None and len(c) > 1]
    smoothed = [smooth_accuracy(_as_acc(c)) for _, _, c in ok]
    neg_target, rule = select_target(smoothed, fraction, [f"k={k}" for k, _, _ in ok]) if ok else (None, "no runs")
    rows = [dict(k=k, run_id=r.run_id, time_to_target_s=time_to_target_s(a, neg_target),
                 final_loss=float(c["loss"].iloc[-1])) for (k, r, c), a in zip(ok, smoothed)]
    timed = [x for x in rows if x["time_to_target_s"] is not None]
    best = min(timed, key=lambda x: x["time_to_target_s"]) if timed else None
    ks = [x["k"] for x in rows]
    return dict(target_loss=None if neg_target is None else -neg_target,
                rule=rule.replace("accuracy in %", "negated loss"), rows=rows,
                best_k=None if best is None else best["k"],
                interior_minimum=best is not None and len(ks) >= 3 and ks[0] < best["k"] < ks[-1])


def ushape_verdict(by_seed: Sequence[dict], seeds_needed: int = USHAPE_SEEDS_NEEDED) -> str:
    """Fig. 3a's U over seeds (rule in docs/adsp.md): ``agrees`` when every one of at least ``seeds_needed``
    seeds' grids has an interior minimum, ``does not agree (U in k of n seeds)`` otherwise, ``not decidable
    (n of N seeds)`` with fewer seeds."""
    n = len(by_seed)
    if n < seeds_needed:
        return f"not decidable ({n} of {seeds_needed} seeds)"
    k = sum(1 for g in by_seed if g["interior_minimum"])
    return "agrees" if k == n else f"does not agree (U in {k} of {n} seeds)"


def ushape_rows(runs: Sequence[RunData], fraction: float = TARGET_FRACTION) -> dict[str, Any]:
    """Fig. 3a per seed: each seed's grid (its own common target loss, times, best rate, U or not), and where
    each search landed against its own seed's best rate (the lowest seed's grid where its seed has none).
    The top-level ``rows`` / ``best_k`` / ``target_loss`` are the lowest seed's grid (the figure draws it)."""
    grids: dict[int, list[tuple[int, RunData]]] = {}
    for r in runs:
        if _tag(r).startswith("ushape-k") and r.policy_options:
            grids.setdefault(r.seed or 0, []).append((int(r.policy_options["fixed_rate"]), r))
    by_seed = [dict(seed=s, **_grid_rows(sorted(g, key=lambda kr: kr[0]), fraction)) for s, g in sorted(grids.items())]
    first = by_seed[0] if by_seed else _grid_rows([], fraction)
    searches = []
    for r in runs:
        if _tag(r) != "ushape-search":
            continue
        k, decided = search_landing(r)
        seed = r.seed or 0
        g = next((x for x in by_seed if x["seed"] == seed), by_seed[0] if by_seed else None)
        searches.append(dict(run_id=r.run_id, seed=seed, k=k, decided=decided, grid_seed=g and g["seed"],
                             verdict=landing_verdict(k, decided, [x["k"] for x in g["rows"]] if g else [],
                                                     g and g["best_k"])))
    return dict(target_loss=first["target_loss"], rule=first["rule"], rows=first["rows"], best_k=first["best_k"],
                interior_minimum=first["interior_minimum"], by_seed=by_seed, verdict=ushape_verdict(by_seed),
                searches=sorted(searches, key=lambda s: s["seed"]))


def outdoors_rows(runs: Sequence[RunData]) -> list[dict]:
    """ADSP beside ROG, SSP and BSP in the outdoors setting (4 workers, artifact mode, no tag), per seed (seed 0, or
    each seed of ``run_all.sh --seeds``)."""
    rows = []
    for r in runs:
        if (r.control != "outdoors" or r.replay_mode != "artifact" or r.workers != 4 or _tag(r)
                or r.batch_multiple != 1):
            continue
        if str(r.library).upper() not in ("ADSP", "ROG", "SSP", "BSP"):
            continue
        comp = composition(r)
        acc = r.accuracy
        rows.append(dict(system=_label(r), seed=r.seed, run_id=r.run_id, iter_s=comp["iter_s"], compute_s=comp["compute_s"],
                         comm_s=comp["comm_s"], stall_s=comp["stall_s"],
                         acc_final=None if acc is None or acc.empty else float(acc["accuracy_pct"].iloc[-1])))
    return sorted(rows, key=lambda x: (x["seed"] if isinstance(x["seed"], int) else -1, x["system"]))


def adsp_summary(runs: Sequence[RunData]) -> dict[str, Any] | None:
    """Everything above as one dict (None when no ADSP item run is present)."""
    if not any(_tag(r) == "fig1" or _tag(r).startswith("ushape") or str(r.library).upper() == "ADSP"
               for r in runs):
        return None
    fig1, fig1_target = fig1_rows(runs)
    from .fig3bc import fig3bc_rows
    from .fig4_steps import fig4cd_rows
    from .fig56 import fig56_summary
    from .global_curve import eval_cost, fig1_seed_rows, fig4_rows

    ushape, fig4 = ushape_rows(runs), fig4_rows(runs)
    return dict(fig1=fig1, fig1_target=fig1_target, ushape=ushape, fig3bc=fig3bc_rows(ushape, runs),
                outdoors=outdoors_rows(runs), theorem2=theorem2_rows(runs), fig1_seeds=fig1_seed_rows(runs),
                fig4=fig4, fig4cd=fig4cd_rows(runs, f4=fig4), eval_cost=eval_cost(runs), fig56=fig56_summary(runs))


def theorem2_rows(runs: Sequence[RunData]) -> list[dict]:
    """Per ADSP run: commit counts per worker at every checkpoint and their spread (Theorem 2's precondition),
    and how its rate pushes reached the workers (:func:`~rog.papers.adsp.delivery.rate_delivery`)."""
    from .delivery import rate_delivery
    from .theorem2 import commit_spread

    rows = []
    for r in runs:
        if str(r.library).upper() == "ADSP":
            sp = commit_spread(r.events.get("ps"))
            rows.append(dict(run_id=r.run_id, tag=_tag(r), seed=r.seed,
                             checkpoints=len(sp["checkpoints"]), max_spread=sp["max_spread"], median_spread=sp["median_spread"],
                             final_commits=sp["final_commits"], delivery=rate_delivery(r)))
    return rows


def adsp_markdown(d: dict[str, Any] | None) -> str:
    """The ADSP section of summary.md."""
    if not d:
        return ""
    out = ["## ADSP's own claims (items `adsp`, `adsp_outdoors`, `adsp_fig56`, `adsp_fig6_fresh`, `adsp_fig6_guard`)", ""]
    rows = d["fig1"]
    if rows:
        out += ["### Fig. 1: time per step at 1:1:3 (3 workers)", "",
                *markdown_table(["system", "s / step", "compute", "communication", "stall", "waiting share",
                                 "stall share", "steps", "time to target (s)", "ADSP time reduction"])]
        for x in rows:
            out.append(f"| {x['system']} | {fmt(x['iter_s'], 3, none='n/a')} | {fmt(x['compute_s'], 3, none='n/a')} | {fmt(x['comm_s'], 3, none='n/a')} | "
                       f"{fmt(x['stall_s'], 3, none='n/a')} | {pct(x['waiting_share'])} | {pct(x['stall_share'])} | "
                       f"{x['steps']} | {fmt(x['time_to_target_s'], 1, none='n/a')} | {pct(x['adsp_time_reduction'])} |")
        by = {x["system"].split("-")[0]: x for x in rows}
        base = [by[s] for s in ("BSP", "SSP") if s in by and by[s]["waiting_share"] is not None]
        adsp = by.get("ADSP")
        out += ["", f"Paper: {PAPER['waiting']}."]
        if base and adsp and adsp["stall_share"] is not None:
            w = ", ".join(f"{x['system']} {pct(x['waiting_share'])}" for x in base)
            bsp = by.get("BSP")
            rel = None if not bsp or not bsp["stall_s"] else adsp["stall_s"] / bsp["stall_s"]
            agree = (all(x["waiting_share"] > WAITING_SHARE_MIN for x in base) and adsp["stall_share"] <= 0.10
                     and rel is not None and rel <= 0.2)
            verdict = (f"{'agrees' if agree else 'does not agree'} with the paper's picture" if rel is not None else
                       f"not decidable: {'no BSP run' if not bsp else 'no BSP stall to compare with'}")  # missing is not met
            out.append(f"Measured: waiting {w}; ADSP stalls {pct(adsp['stall_share'])} of its step time "
                       f"({fmt(rel, 3, none='n/a')} x BSP's stall) and waits {pct(adsp['waiting_share'])} in all: "
                       f"{verdict} (acceptance: BSP/SSP "
                       f"waiting > 50 %, ADSP stall <= 10 % and <= 0.2 x BSP's).")
        red = [(x["system"], x["adsp_time_reduction"]) for x in rows if x["system"] != "ADSP"]
        faster = [n for n, v in red if v is not None and v > 0]
        meas = ", ".join(f"{n} {pct(v)}" for n, v in red)
        out += ["", f"Measured ADSP time reduction to the common target: {meas}: "
                f"{'faster than ' + ', '.join(faster) if faster else 'faster than none'}"
                f"{' only' if faster and len(faster) < len(red) else ''} "
                f"({'agrees' if len(faster) == len(red) else 'does not agree'} with the paper's ordering)."]
        out += ["", f"Paper: {PAPER['speedup']}. Common accuracy target here: {d['fig1_target']['rule']}. "
                "The 'ADSP time reduction' column is 1 - T_ADSP / T_system (the paper's 80 % may also mean "
                "T_system / T_ADSP - 1; both are in summary.json). This is 3 workers over one short budget, "
                "not the paper's 18 workers to convergence: a direction, not a reproduction of the numbers.", ""]
    u = d["ushape"]
    if u["rows"]:
        by_seed = u["by_seed"]
        ks = sorted({x["k"] for g in by_seed for x in g["rows"]})
        out += ["### Fig. 3a: time to a common target loss against the commit rate", "",
                "Each seed's grid has its own common target loss (the toolkit's rule on the negated loss). "
                "Time to target (s) per commits per check period:", "",
                *markdown_table(["seed", "target loss", *(f"k = {k}" for k in ks), "fastest", "a U"])]
        for g in by_seed:
            t = {x["k"]: x["time_to_target_s"] for x in g["rows"]}
            out.append(f"| {g['seed']} | {fmt(g['target_loss'], 4, none='n/a')} | " + " | ".join(fmt(t.get(k), 1, none='n/a') for k in ks)
                       + f" | {g['best_k']} | {'yes' if g['interior_minimum'] else 'no'} |")
        out += ["", f"Over seeds: {u['verdict']} (rule: an interior minimum in every "
                f"one of at least {USHAPE_SEEDS_NEEDED} seeds).", "",
                *markdown_table(["search run", "seed", "landed at", "decided",
                                 "against the grid's best (grid of seed)"])]
        out += [f"| {s['run_id']} | {s['seed']} | {s['k']} | {s['decided']} | {s['verdict']} "
                f"({s.get('grid_seed', 0)}) |" for s in u["searches"]]
        n = {v: sum(1 for s in u["searches"] if s["verdict"] == v) for v in ("agrees", "neighbour")}
        out += ["", f"Paper: {PAPER['ushape']}. Measured (seed {by_seed[0]['seed']}): the fastest fixed rate is "
                f"{u['best_k']} commits per check "
                f"period, {'an interior minimum (a U)' if u['interior_minimum'] else 'at an end of the grid (no U here)'}; "
                f"the online search landed exactly on its seed's fastest rate in {n['agrees']} of {len(u['searches'])} seeds "
                f"(agrees), on a neighbouring rate in {n['neighbour']} (reported, not counted as agreement).", ""]
    from .fig3bc import fig3bc_markdown
    from .fig4_steps import fig4cd_markdown
    from .fig56 import fig56_markdown
    from .global_curve import global_markdown

    out += fig3bc_markdown(d.get("fig3bc") or [])
    out += global_markdown(d)
    out += fig4cd_markdown(d.get("fig4cd"))
    out += fig56_markdown(d.get("fig56"))  # item adsp_fig56: Figs. 5 and 6
    if d.get("theorem2"):
        out += ["### Theorem 2's precondition: commit counts per checkpoint", "",
                *markdown_table(["run", "tag", "checkpoints", "spread max", "spread median", "commits at the last",
                                 "rate latency median / max (s)", "windows (measured again)"])]
        for x in d["theorem2"]:
            dl = x.get("delivery") or {}
            out.append(f"| {x['run_id']} | {x['tag']} | {x['checkpoints']} | {x['max_spread']} | "
                       f"{fmt(x['median_spread'], 1, none='n/a')} | {x['final_commits']} | {fmt(dl.get('median_s'), 3, none='n/a')} / "
                       f"{fmt(dl.get('max_s'), 3, none='n/a')} | {dl.get('windows', 'n/a')} ({dl.get('remeasured', 'n/a')}) |")
        out += ["", "Spread = max_i c_i - min_i c_i over the workers at each checkpoint (before the first flush). "
                "The paper assumes it stays small; tests/test_adsp_theorem2.py derives <= 2 for a fixed rate of 2.", ""]
    if d["outdoors"]:
        out += ["### ADSP on the replayed outdoors traces (4 workers, artifact mode)", "",
                *markdown_table(["seed", "system", "s / iteration", "compute", "communication", "stall",
                                 "final accuracy (%)"])]
        out += [f"| {x['seed']} | {x['system']} | {fmt(x['iter_s'], 3, none='n/a')} | {fmt(x['compute_s'], 3, none='n/a')} | {fmt(x['comm_s'], 3, none='n/a')} | "
                f"{fmt(x['stall_s'], 3, none='n/a')} | {fmt(x['acc_final'], 2, none='n/a')} |" for x in d["outdoors"]]
        out += ["", "No expected winner: ROG equalises compute, so ADSP's lever (compute heterogeneity) is absent; "
                "ADSP's iterations are local steps (most without communication), so its s / iteration is not "
                "comparable with the others' and accuracy at equal time is the fair reading.", ""]
    return "\n".join(out) + "\n"


def _num(v):
    return None if v is None or (isinstance(v, float) and not np.isfinite(v)) else v
