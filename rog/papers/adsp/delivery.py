"""ADSP's rate pushes read back from a run: how late each rate reached its worker, and how the search's
windows went (judged, measured again, held past their nominal end for the two-commit rule).

Every push is a ``rate_push`` record of the PS (``seq``, ``worker``, send time) and a ``rate`` record of
the worker (``seq``, receipt time); both logs count time from the run's one origin, so the difference
is the delivery latency (send queue, link, and up to one mini-batch until the worker polls).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rog.analysis.load import RunData


def _kind(df: pd.DataFrame | None, kind: str) -> pd.DataFrame:
    if df is None or df.empty or "kind" not in df.columns:
        return pd.DataFrame()
    return df[df["kind"] == kind]


def rate_delivery(run: RunData) -> dict[str, Any]:
    """``pushes``, ``delivered``, latency ``median_s`` / ``max_s``; ``windows``, ``remeasured``, ``held_median_s``."""
    sent = _kind(run.events.get("ps"), "rate_push")
    if "error" in sent.columns:
        sent = sent[sent["error"].isna()]
    at = {(int(r["seq"]), int(r["worker"])): float(r["t_s"]) for _, r in sent.iterrows()}
    lat = []
    for rank, df in run.events.items():
        if not str(rank).startswith("w"):
            continue
        w = int(str(rank)[1:])
        for _, r in _kind(df, "rate").iterrows():
            t = at.get((int(r["seq"]), w))
            if t is not None:
                lat.append(float(r["t_s"]) - t)
    s = _kind(run.events.get("ps"), "schedule")
    win = s[s["event"] == "window"] if not s.empty and "event" in s.columns else pd.DataFrame()
    held = win["held_s"].dropna().astype(float).tolist() if "held_s" in win.columns else []
    remeasured = int(win["remeasure"].fillna(False).astype(bool).sum()) if "remeasure" in win.columns else 0
    return dict(pushes=len(at), delivered=len(lat), median_s=float(np.median(lat)) if lat else None,
                max_s=float(max(lat)) if lat else None, windows=int(len(win)), remeasured=remeasured,
                held_median_s=float(np.median(held)) if held else None)
