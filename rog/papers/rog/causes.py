"""Why a claim fails on some replicas: a rule-based cause, with evidence from the runs' replay logs.

For every claim of the ``robustness`` list with a bound that holds on fewer replicas than measured
it (``holds < of``), every replica where it fails gets one cause (:func:`explain`).  The rules were
fixed before any multi-trace outcome was looked at:

*Fade* (:func:`fades`): an interval in which a worker link's replayed rate stays below
:data:`FADE_FRACTION` of that link's median rate (over the run's replay samples) for at least
:data:`FADE_MIN_TRACE_S` trace seconds (x the run's trace time scale on the wall clock).  The
*first fade* of a run is the earliest start of a fade on any worker link; the *fade share* is the
share of the run's replayed time in which at least one worker link is in a fade.

*Time and energy to target* claims (:func:`classify_target`):

1. ``no fade``: no link of the replica's runs has a fade: the claim is not about fades there;
2. ``target before the first fade``: every compared system crossed the target no later than the
   first fade: the verdict was decided while every link was good (ROG has nothing to overcome);
3. otherwise the ratio's factors decide (:mod:`rog.papers.rog.crossing_split`): *slow iterations before
   the crossing*, *more iterations to the target* or *higher power before the crossing*, with the
   crossing iterations and seconds per iteration as evidence (``not explained by fade timing`` when a
   crossing is missing).  For causes 1 and 2 the factors are added to the evidence.

*Every other claim* (stall, time per iteration, accuracy at equal iterations; :func:`classify_share`):

1. ``fewer fades``: the failing replica's fade share is below the median fade share of the
   replicas where the claim holds;
2. ``not explained by the fade share`` otherwise (or no replica holds: nothing to compare with);

and an *accuracy difference* claim (``..., A - B`` in points) whose difference lies within
:data:`SWING_FACTOR` x the larger of the two runs' test-to-test swing (:func:`swing_pts`, the
median absolute change between consecutive tests) is ``within the test-to-test swing`` instead.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

import numpy as np
import pandas as pd

from rog.analysis.tables import markdown_table

from .crossing_split import best_base, claim_parties, classify_split, split_ratio

__all__ = ["FADE_FRACTION", "FADE_MIN_TRACE_S", "fades", "first_fade_s", "fade_share", "classify_target",
           "classify_share", "classify_swing", "swing_pts", "explain", "causes_markdown"]

FADE_FRACTION = 0.5  # a link is in a fade below this share of its median rate ...
FADE_MIN_TRACE_S = 5.0  # ... for at least this many trace seconds (about 4.5 of the paper's iterations)
TARGET_CLAIMS = ("time to target", "energy to target")
SWING_FACTOR = 2.0  # an accuracy difference within 2x the runs' test-to-test swing is not decided by one replica


def fades(replay: pd.DataFrame, time_scale: float = 1.0, end_s: float | None = None) -> list[tuple[str, float, float]]:
    """``(link, start_s, end_s)`` of every fade of every worker link (``worker >= 0``) in a replay table
    (``worker``, ``link``, ``time_s``, ``rate_mbit``: each rate holds until the link's next sample; the
    last until ``end_s``, default the table's last time)."""
    if replay is None or replay.empty:
        return []
    rp = replay[replay["worker"] >= 0]
    end_all = float(replay["time_s"].max()) if end_s is None else float(end_s)
    min_s = FADE_MIN_TRACE_S * float(time_scale)
    out = []
    for link, g in rp.groupby("link", sort=True):
        g = g.sort_values("time_s")
        t = g["time_s"].to_numpy(dtype=float)
        r = g["rate_mbit"].to_numpy(dtype=float)
        ends = np.append(t[1:], max(end_all, t[-1]))
        low = r < FADE_FRACTION * float(np.median(r))
        k = 0
        while k < len(t):
            if not low[k]:
                k += 1
                continue
            j = k
            while j + 1 < len(t) and low[j + 1]:
                j += 1
            if ends[j] - t[k] >= min_s - 1e-9:
                out.append((str(link), float(t[k]), float(ends[j])))
            k = j + 1
    return out


def first_fade_s(replay: pd.DataFrame, time_scale: float = 1.0, end_s: float | None = None) -> float | None:
    """Start of the earliest fade on any worker link, 0 when a link starts the run in one (None: no fade)."""
    fs = fades(replay, time_scale, end_s)
    return max(0.0, min(f[1] for f in fs)) if fs else None


def fade_share(replay: pd.DataFrame, time_scale: float = 1.0, end_s: float | None = None) -> float | None:
    """Share of the replayed time (first sample to ``end_s``) in which at least one worker link is in
    a fade (None without replay samples)."""
    if replay is None or replay.empty or not (replay["worker"] >= 0).any():
        return None
    t0 = float(replay["time_s"].min())
    t1 = float(replay["time_s"].max()) if end_s is None else float(end_s)
    if t1 <= t0:
        return None
    spans = sorted((max(s, t0), min(e, t1)) for _, s, e in fades(replay, time_scale, t1))
    covered, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                covered += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        covered += cur_e - cur_s
    return covered / (t1 - t0)


def classify_target(first_fade: float | None, crossings_s: dict[str, float | None]) -> tuple[str, str]:
    """``(cause, evidence)`` for a time or energy to target claim (see the module docstring)."""
    xs = {k: v for k, v in crossings_s.items() if v is not None}
    cross = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(xs.items(), key=lambda kv: kv[1]))
    if first_fade is None:
        return "no fade", f"no worker link below {FADE_FRACTION:g}x its median for {FADE_MIN_TRACE_S:g} trace s; crossings: {cross or 'none'}"
    if xs and max(xs.values()) <= first_fade:
        return ("target before the first fade",
                f"every system crossed the target ({cross}) before the first fade at {first_fade:.1f} s")
    late = ", ".join(k for k, v in xs.items() if v > first_fade)
    return ("not explained by fade timing",
            f"first fade at {first_fade:.1f} s, before the crossing of {late or 'no system'} ({cross or 'none'})")


def classify_share(share: float | None, shares_where_holds: Sequence[float]) -> tuple[str, str]:
    """``(cause, evidence)`` for any other claim: the replica's fade share against the median of the
    replicas where the claim holds."""
    if share is None:
        return "no replay log", "the runs have no replay samples to read fades from"
    if not shares_where_holds:
        return "not explained by the fade share", f"fades cover {100 * share:.0f} % of the run; no replica holds to compare with"
    med = float(statistics.median(shares_where_holds))
    if share < med:
        return "fewer fades", f"fades cover {100 * share:.0f} % of the run, {100 * med:.0f} % (median) where the claim holds"
    return "not explained by the fade share", f"fades cover {100 * share:.0f} % of the run, {100 * med:.0f} % (median) where the claim holds"


def run_fades(m) -> tuple[float | None, float | None]:
    """A measured run's (first fade, fade share) over its replay, on its trace time scale (None: no replay)."""
    run = m.run
    ts = run.time_scale if run.time_scale is not None else 1.0
    try:
        ts = float(ts)
    except (TypeError, ValueError):
        ts = 1.0
    end = float(run.accuracy["time_s"].max()) if run.accuracy is not None and not run.accuracy.empty else None
    if end is not None and not run.replay.empty:
        end = max(end, float(run.replay["time_s"].max()))
    return first_fade_s(run.replay, ts, end), fade_share(run.replay, ts, end)


def explain(entries: Sequence[dict[str, Any]], per_replica: dict[str, Sequence[Any]], metrics: Sequence[Any]
            ) -> list[dict[str, Any]]:
    """One ``{"claim", "replica", "value", "cause", "evidence", "first_fade_s", "fade_share"}`` per failing
    replica of every claim with ``holds < of`` (``per_replica``: replica -> its claims; ``metrics``:
    every run's metrics, the first of a run id counts)."""
    from .claims import claim_key
    from .robustness import _holds

    by_id: dict[str, Any] = {}
    for m in metrics:
        by_id.setdefault(m.run.run_id, m)
    cache: dict[str, tuple[float | None, float | None]] = {}

    def fade_of(ids) -> tuple[float | None, float | None]:
        firsts, shares = [], []
        for i in ids:
            if i not in by_id:
                continue
            if i not in cache:
                cache[i] = run_fades(by_id[i])
            f, s = cache[i]
            if f is not None:
                firsts.append(f)
            if s is not None:
                shares.append(s)
        return (min(firsts) if firsts else None), (float(np.mean(shares)) if shares else None)

    out = []
    for e in entries:
        if e.get("bound") is None or e.get("holds") is None or e["holds"] >= e["of"]:
            continue
        bound = (e["bound"][0], float(e["bound"][1]))
        rows = [(rep, c) for rep, cs in per_replica.items() for c in cs
                if claim_key(c.name) == e["claim"] and c.ours is not None]
        held = [fade_of(c.run_ids)[1] for _, c in rows if _holds(c.ours, bound)]
        held = [s for s in held if s is not None]
        for rep, c in rows:
            if _holds(c.ours, bound):
                continue
            first, share = fade_of(c.run_ids)
            if e["claim"].startswith(TARGET_CLAIMS):
                cross = {by_id[i].label: by_id[i].time_to_target_s for i in c.run_ids if i in by_id}
                cause, ev = classify_target(first, cross)
                sp = _split(e["claim"], [by_id[i] for i in c.run_ids if i in by_id])
                if sp is not None:  # the fade came before a crossing: the ratio's own factors say why
                    s_cause, s_ev = classify_split(sp, bound[1], energy=e["claim"].startswith("energy"))
                    if cause == "not explained by fade timing":
                        cause, ev = s_cause, f"{s_ev}; {ev}"
                    else:
                        ev = f"{ev}; {s_ev}"
            else:
                cause, ev = classify_share(share, held)
                sw = _swing_of(e["claim"], [by_id[i] for i in c.run_ids if i in by_id])
                if sw is not None:
                    cause, ev = classify_swing(c.ours, sw, cause, ev)
            out.append(dict(claim=e["claim"], replica=rep, value=c.ours, cause=cause, evidence=ev,
                            first_fade_s=first, fade_share=share))
    return out


def swing_pts(acc: pd.DataFrame | None) -> float | None:
    """The median absolute change (points) between consecutive tests of a raw accuracy curve
    (``iteration``, ``accuracy_pct``; tests of one iteration averaged); None with fewer than 3 tests."""
    if acc is None or acc.empty:
        return None
    y = acc.groupby("iteration")["accuracy_pct"].mean().sort_index().to_numpy(float)
    return float(np.median(np.abs(np.diff(y)))) if len(y) >= 3 else None


def classify_swing(value: float, swings: dict[str, float], cause: str, evidence: str) -> tuple[str, str]:
    """An accuracy difference (points) against the two runs' test-to-test swing: within
    ``SWING_FACTOR`` x the larger swing it is ``within the test-to-test swing``; otherwise the fade-share
    ``cause`` stands.  The swings are added to the evidence either way."""
    ev = ", ".join(f"{k} {v:.2f} pts" for k, v in swings.items())
    ev = f"the difference is {value:+.2f} pts; consecutive tests move by a median of {ev}"
    if abs(value) <= SWING_FACTOR * max(swings.values()):
        return "within the test-to-test swing", f"{ev} (rule: within {SWING_FACTOR:g}x the larger); {evidence}"
    return cause, f"{evidence}; {ev}"


def _swing_of(claim: str, ms: Sequence[Any]) -> dict[str, float] | None:
    """``{label: swing}`` of both sides of an accuracy difference claim (``"..., A - B"``), else None."""
    if "accuracy" not in claim.split(",")[0]:
        return None
    sides = [x.strip() for x in claim.split(",", 1)[1].split(" - ")] if "," in claim else []
    if len(sides) != 2:
        return None
    out = {}
    for side in sides:
        m = next((m for m in ms if m.label == side), None)
        sw = None if m is None else swing_pts(m.run.accuracy)
        if sw is None:
            return None
        out[side] = sw
    return out


def _split(claim: str, ms: Sequence[Any]) -> dict[str, Any] | None:
    parties = claim_parties(claim)
    if parties is None:
        return None
    ours = next((m for m in ms if m.label == parties[0]), None)
    base = best_base(ms, parties[1])
    return None if ours is None or base is None else split_ratio(ours, base)


def causes_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """summary.md's section: the cause of every failing replica (empty when no claim fails anywhere)."""
    if not rows:
        return ""
    lines = ["## Why a claim fails on some replicas", "",
             f"Rules fixed in advance (`rog/papers/rog/causes.py`): a fade is a worker link below {FADE_FRACTION:g}x its "
             f"median rate for at least {FADE_MIN_TRACE_S:g} trace seconds. Time and energy to target: when the "
             "first fade falls relative to every system's target crossing, and when a fade came first, the ratio "
             "split into iterations to the target x seconds per iteration before the crossing (x mean power for "
             "energy). Other claims: the share of run time in fades against the median where the claim holds.", "",
             *markdown_table(["claim", "replica", "value", "cause", "evidence"])]
    for r in rows:
        lines.append(f"| {r['claim']} | {r['replica'] or 'all'} | {r['value']:.2f} | {r['cause']} | {r['evidence']} |")
    return "\n".join(lines) + "\n"
