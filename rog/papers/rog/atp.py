"""Per-run statistics of ROG's Adaptive Transmission Protocol, from the event logs, next to the original's.

For one run (:func:`atp_stats`), over every training transmission in its event logs:

* budgets: the deadline of every worker push (the budget the parameter server handed out, or the
  initial one): how many, the share at 0, the median and the 90th percentile (seconds);
* delivered share: per push (workers' ``push`` records) and per pull (the parameter server's ``pull``
  records, or the workers' where it has none): the share of transmissions that delivered every row
  planned ("full") and the mean delivered share;
* row staleness at apply time: the mean over pushes of each worker's ``staleness`` record (after the
  push is applied: mean over rows of the iteration minus the iteration whose push last delivered the row);
* what decided the budgets (the parameter server's ``pull`` records of a ROG run): the share decided by
  the straggler rule, and the median lead over the slowest in the rule's unit;
* per worker: its full pushes and budgets at 0 (the original's figures come from some of its workers'
  logs, and a worker's shares depend on the link it replays).

:data:`ARTIFACT_ATP` holds the original artifact's logged figures (from its result logs, outdoors):
full pushes 36 % / 56 % / 54 % and budgets at 0 55 % / 33 % / 35 % for ROG-4 / -20 / -40.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from rog.analysis.load import RunData
from rog.analysis.tables import fmt, markdown_table, pct

__all__ = ["ARTIFACT_ATP", "atp_stats", "atp_table", "atp_markdown"]

# system label -> the original artifact's logged share of full pushes and of zero budgets (outdoors)
ARTIFACT_ATP: dict[str, dict[str, float]] = {
    "ROG-4": dict(full_push_share=0.36, zero_budget_share=0.55),
    "ROG-20": dict(full_push_share=0.56, zero_budget_share=0.33),
    "ROG-40": dict(full_push_share=0.54, zero_budget_share=0.35),
}


def _records(df: pd.DataFrame | None, kind: str) -> pd.DataFrame:
    if df is None or df.empty or "kind" not in df.columns:
        return pd.DataFrame()
    return df[df["kind"] == kind]


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    if df.empty or name not in df.columns:
        return np.zeros(0)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64)


def _transfers(frames: Sequence[pd.DataFrame]) -> dict[str, Any]:
    """n, share delivering every planned row, mean delivered share."""
    planned = np.concatenate([_col(f, "rows_planned") for f in frames]) if frames else np.zeros(0)
    delivered = np.concatenate([_col(f, "rows_delivered") for f in frames]) if frames else np.zeros(0)
    share = np.concatenate([_col(f, "delivered_share") for f in frames]) if frames else np.zeros(0)
    ok = ~np.isnan(planned) & ~np.isnan(delivered)
    if not ok.any():
        return dict(n=0, full_share=None, mean_share=None)
    return dict(n=int(ok.sum()), full_share=float(np.mean(delivered[ok] >= planned[ok])),
                mean_share=float(np.nanmean(share[ok])) if share.size else None)


def atp_stats(run: RunData) -> dict[str, Any]:
    """The run's ATP statistics (see the module docstring); values are None where the logs hold none."""
    workers = [run.events[r] for r in run.worker_ranks]
    pushes = [_records(df, "push") for df in workers]
    budgets = np.concatenate([_col(p, "deadline_s") for p in pushes]) if pushes else np.zeros(0)
    budgets = budgets[~np.isnan(budgets)]  # null: no deadline (BSP, SSP, FLOWN)
    ps_pulls = _records(run.events.get("ps"), "pull")
    pulls = [ps_pulls] if not ps_pulls.empty else [_records(df, "pull") for df in workers]
    stale = np.concatenate([_col(_records(df, "staleness"), "mean") for df in workers]) if workers else np.zeros(0)
    stale = stale[~np.isnan(stale)]
    push = _transfers(pushes)
    pull = _transfers(pulls)
    out: dict[str, Any] = dict(
        label=run.label,
        budget_rule=run.policy_options.get("budget_rule") if run.system == "ROG" else None,
        pushes=push["n"], full_push_share=push["full_share"], mean_push_share=push["mean_share"],
        pulls=pull["n"], full_pull_share=pull["full_share"], mean_pull_share=pull["mean_share"],
        budgets=int(budgets.size),
        zero_budget_share=float(np.mean(budgets == 0.0)) if budgets.size else None,
        budget_median_s=float(np.median(budgets)) if budgets.size else None,
        budget_p90_s=float(np.percentile(budgets, 90)) if budgets.size else None,
        mean_row_staleness=float(stale.mean()) if stale.size else None,
        straggler_budget_share=None, median_lead=None,
    )
    if "budget_reason" in ps_pulls.columns:
        reasons = ps_pulls["budget_reason"].dropna()
        if len(reasons):
            out["straggler_budget_share"] = float(np.mean(reasons == "straggler"))
        lead = _col(ps_pulls, "budget_lead")
        lead = lead[~np.isnan(lead)]
        if lead.size:
            out["median_lead"] = float(np.median(lead))
    per_worker = []
    for rank, p in zip(run.worker_ranks, pushes):
        b = _col(p, "deadline_s")
        b = b[~np.isnan(b)]
        one = _transfers([p])
        per_worker.append(dict(worker=int(rank[1:]), pushes=one["n"], full_push_share=one["full_share"],
                               zero_budget_share=float(np.mean(b == 0.0)) if b.size else None))
    out["per_worker"] = per_worker  # the original's figures are from some workers' logs
    art = ARTIFACT_ATP.get(run.label)
    out["artifact"] = dict(art) if art else None
    return out


def atp_table(runs: Sequence[RunData]) -> dict[str, dict[str, Any]]:
    """run id -> :func:`atp_stats` for every ROG run (the only system with a speculative budget)."""
    return {r.run_id: atp_stats(r) for r in runs if r.system == "ROG"}


def _per_worker(w: dict[str, Any]) -> str:
    f, z = w.get("full_push_share"), w.get("zero_budget_share")
    return f"w{w['worker']} {'-' if f is None else f'{100 * f:.0f}'}/{'-' if z is None else f'{100 * z:.0f}'}"


def atp_markdown(table: dict[str, dict[str, Any]]) -> str:
    """summary.md's ATP section: one row per ROG run, the original's logged figures beside."""
    if not table:
        return ""
    lines = ["## ATP: speculative budgets and delivered shares", "",
             "Every training push and pull of each ROG run (event logs). Budgets: the deadline of every worker "
             "push (the budget the parameter server handed out; the first push's is the initial 5 s). Full: the "
             "share of transmissions that delivered every row planned. Row staleness: mean over rows of the "
             "iteration minus the iteration whose push last delivered the row, right after each push. "
             "Straggler budgets: the share of budgets the straggler rule set to 0; lead: the median lead over the "
             "slowest worker (transmission steps under `artifact`, pushes under `mandatory`). The original "
             "artifact's worker logs (outdoors): full pushes 36 % / 56 % / 54 %, budgets at 0 "
             "55 % / 33 % / 35 % for ROG-4 / -20 / -40; 'per worker' gives each of our workers' full pushes / "
             "budgets at 0, since a worker's shares depend on the link it replays.", "",
             *markdown_table(["run", "system", "budget rule", "pushes", "budgets at 0", "artifact",
                              "budget median (s)", "budget p90 (s)", "full pushes", "artifact",
                              "mean push share", "full pulls", "mean pull share", "row staleness",
                              "straggler budgets", "lead", "per worker (full / at 0, %)"])]
    for rid, s in table.items():
        art = s.get("artifact") or {}
        lines.append(
            f"| {rid} | {s['label']} | {s['budget_rule'] or '-'} | {s['pushes']} | {pct(s['zero_budget_share'], 0, none='-')} "
            f"| {pct(art.get('zero_budget_share'), 0, none='-')} | {fmt(s['budget_median_s'], 3)} | {fmt(s['budget_p90_s'], 3)} "
            f"| {pct(s['full_push_share'], 0, none='-')} | {pct(art.get('full_push_share'), 0, none='-')} | {fmt(s['mean_push_share'])} "
            f"| {pct(s['full_pull_share'], 0, none='-')} | {fmt(s['mean_pull_share'])} | {fmt(s['mean_row_staleness'])} "
            f"| {pct(s['straggler_budget_share'], 0, none='-')} | {fmt(s['median_lead'], 1)} "
            f"| {', '.join(_per_worker(w) for w in s.get('per_worker', []))} |")
    return "\n".join(lines) + "\n"
