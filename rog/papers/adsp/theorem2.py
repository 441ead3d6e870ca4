"""ADSP's Theorem 2 precondition, measured: every worker commits about equally often.

The PS's scheduler logs, at every checkpoint (every check period Gamma), each worker's cumulative
commit count ``c_i`` (a ``schedule`` record with ``event="checkpoint"``).  :func:`commit_spread`
reads them back: per checkpoint the counts and the spread ``max_i c_i - min_i c_i`` over the workers
that were still training (checkpoints after the first worker began its final flush are left out: a
flushed worker commits no more, so its count stops by design).
"""

from __future__ import annotations

from typing import Any

import pandas as pd


def commit_spread(ps_events: pd.DataFrame | None) -> dict[str, Any]:
    """``{"checkpoints": [{t_s, commits, spread}], "max_spread", "median_spread", "final_commits"}`` from a
    PS event table (the ``events-ps.jsonl`` records); empty lists and None without checkpoints."""
    empty = dict(checkpoints=[], max_spread=None, median_spread=None, final_commits=None)
    if ps_events is None or ps_events.empty or "kind" not in ps_events.columns:
        return empty
    flushes = ps_events[ps_events["kind"] == "flush"]
    cutoff = float(flushes["t_s"].min()) if not flushes.empty else float("inf")
    s = ps_events[ps_events["kind"] == "schedule"]
    if s.empty or "event" not in s.columns:
        return empty
    ck = s[(s["event"] == "checkpoint") & (s["t_s"].astype(float) < cutoff)]
    rows = []
    for _, r in ck.sort_values("t_s").iterrows():
        counts = [int(c) for c in r["commits"]]
        rows.append(dict(t_s=float(r["t_s"]), commits=counts, spread=max(counts) - min(counts)))
    if not rows:
        return empty
    spreads = sorted(x["spread"] for x in rows)
    return dict(checkpoints=rows, max_spread=spreads[-1], median_spread=float(pd.Series(spreads).median()),
                final_commits=rows[-1]["commits"])
