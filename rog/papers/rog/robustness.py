"""How often each claim holds over the replicas of a plan (trace x seed): ``summary.json`` ``robustness``.

A replica is one trace and one seed of every item (``scripts/run_items.py --traces DIR --seeds 0,1,2``
names the items ``<item>:<trace stem>:seed<n>``; the default plan is one replica).  Every replica's
claims are computed as the claims table computes them (:func:`rog.papers.rog.claims.claim_rows`, its
own target per item), then each claim is aggregated over the replicas that measured it
(:func:`aggregate`): ``{"claim", "bound", "holds", "of", "median", "min", "max", "run_ids"}`` with
``of`` the replicas that measured it (a replica whose value is missing, e.g. a system that never
reached the target, is left out of ``of`` and of the statistics), ``holds`` how many of them meet the
acceptance bound (None for a claim without one), ``run_ids`` the runs behind it and ``replicas`` every
replica that has the claim, so ``of`` of ``replicas`` says how many reached a target ("reached k of n":
a mean or median over the replicas that reached it is read beside that count, never alone).

Crossing split: a ratio's factors
---------------------------------

A time (or energy) to target ratio split into its factors, read from the runs' own curves.

``t_R / t_B = (i_R / i_B) x (s_R / s_B)``, where ``i`` is the iteration at which a run's accuracy
curve crosses the target (interpolated in time) and ``s = t / i`` its seconds per iteration until
then; energy adds the mean team power until the crossing, ``E / t``.  The factors say whether a
system lost on the number of iterations it needed (staler models) or on the speed of its
iterations before the crossing (good links leave little to gain), with the numbers.

The rule (fixed before any multi-trace outcome was read): a failing ratio is blamed on *slow
iterations before the crossing* when ``s_R / s_B`` alone exceeds the bound, else on *more iterations
to the target* when ``i_R / i_B > 1``; an energy ratio whose time ratio meets the bound is blamed on
*higher power before the crossing*.

Causes: why a claim fails on some replicas
------------------------------------------

Why a claim fails on some replicas: a rule-based cause, with evidence from the runs' replay logs.

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
3. otherwise the ratio's factors decide (*Crossing split* above): *slow iterations before
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

Decidability of the sensitivity items' accuracy claims
------------------------------------------------------

Whether a sensitivity item's accuracy claim can be decided at the length its runs had.

The rule, fixed before reading any outcome:

1. Length.  An accuracy claim (time or energy to a target, final accuracy, accuracy at equal
   iterations or time) of the worker, batch or threshold items is decidable only when its item's runs
   are at least :data:`MIN_ACCURACY_HORIZON_S` long.  That is the end-to-end item's budget, the
   shortest at which this project reads accuracy claims at all: at 70 s the whole rise of the curves
   was about two standard errors of the test set (``rog.experiment.items``), and at the sensitivity
   items' 40 s the accuracy panels swing by 2-4 points between tests.
2. Spread.  Where the claim was measured on two or more replicas (traces x seeds), it is decidable
   only when its spread over them (max - min) is no larger than the median's distance from parity
   (1x for a ratio, 0 points for a difference): otherwise the replicas disagree by more than the
   effect.

Stall and time-composition claims are means over iterations and are never marked.
"""

from __future__ import annotations

import re
import statistics
from typing import Any, Sequence

import numpy as np
import pandas as pd

from rog.analysis.claim_table import Claim
from rog.analysis.metrics import RunMetrics
from rog.analysis.plan_file import replica_of
from rog.analysis.tables import fmt, markdown_table

from .claims import claim_key, claim_rows

__all__ = ["ROBUSTNESS_KEYS", "replica_of", "replica_claims", "aggregate", "robustness", "robustness_markdown",
           "holds_text", "crossing_iteration", "split_ratio", "classify_split", "claim_parties",
           "FADE_FRACTION", "FADE_MIN_TRACE_S", "fades", "first_fade_s", "fade_share", "classify_target",
           "classify_share", "classify_swing", "swing_pts", "explain", "causes_markdown",
           "MIN_ACCURACY_HORIZON_S", "ACCURACY_PREFIXES", "is_sensitivity_accuracy", "horizon_s", "reasons",
           "not_decidable_reason", "NOT_DECIDABLE"]


def crossing_iteration(curve, t_s: float | None) -> float | None:
    """The iteration at ``t_s`` seconds on an accuracy curve (``time_s``, ``iteration``), interpolated."""
    if curve is None or t_s is None or getattr(curve, "empty", True):
        return None
    a = curve.sort_values("time_s")
    return float(np.interp(t_s, a["time_s"].to_numpy(float), a["iteration"].to_numpy(float)))


def split_ratio(ours, base) -> dict[str, Any] | None:
    """``ours`` against ``base`` (run metrics with ``time_to_target_s``, ``energy_to_target_j``,
    ``accuracy_curve``, ``label``): the factors of the time and energy ratios (None: a crossing is missing)."""
    t_r, t_b = ours.time_to_target_s, base.time_to_target_s
    i_r = crossing_iteration(getattr(ours, "accuracy_curve", None), t_r)
    i_b = crossing_iteration(getattr(base, "accuracy_curve", None), t_b)
    if None in (t_r, t_b, i_r, i_b) or min(t_r, t_b, i_r, i_b) <= 0:
        return None
    out = dict(ours=ours.label, base=base.label, t_ours_s=t_r, t_base_s=t_b, i_ours=i_r, i_base=i_b,
               iter_ratio=i_r / i_b, spi_ratio=(t_r / i_r) / (t_b / i_b), time_ratio=t_r / t_b, power_ratio=None)
    e_r, e_b = getattr(ours, "energy_to_target_j", None), getattr(base, "energy_to_target_j", None)
    if e_r is not None and e_b is not None and e_b > 0:
        out["power_ratio"] = (e_r / t_r) / (e_b / t_b)
        out["energy_ratio"] = e_r / e_b
    return out


def classify_split(sp: dict[str, Any], bound: float, energy: bool = False) -> tuple[str, str]:
    """``(cause, evidence)`` for a failing time (or ``energy``) to target ratio from its factors."""
    ev = (f"{sp['ours']} crossed at iteration {sp['i_ours']:.0f} ({sp['t_ours_s']:.1f} s, "
          f"{sp['t_ours_s'] / sp['i_ours']:.2f} s/iteration), {sp['base']} at {sp['i_base']:.0f} "
          f"({sp['t_base_s']:.1f} s, {sp['t_base_s'] / sp['i_base']:.2f} s/iteration): {sp['iter_ratio']:.2f}x the "
          f"iterations x {sp['spi_ratio']:.2f}x the seconds per iteration = {sp['time_ratio']:.2f}x the time")
    if energy and sp.get("power_ratio") is not None:
        ev += f", x {sp['power_ratio']:.2f}x the mean power = {sp['energy_ratio']:.2f}x the energy"
        if sp["time_ratio"] <= bound and sp["power_ratio"] > 1:
            return "higher power before the crossing", ev
    if sp["spi_ratio"] > bound:
        return "slow iterations before the crossing", ev
    if sp["iter_ratio"] > 1:
        return "more iterations to the target", ev
    return "not explained by the split", ev


def claim_parties(claim: str) -> tuple[str, list[str]] | None:
    """``("ROG-4", ["BSP", "SSP-4", "FLOWN"])`` from ``"time to target, ROG-4 / min(BSP, SSP-4, FLOWN)"``
    (one baseline for ``"... , ROG-4 / BSP"``); None for another shape."""
    m = re.match(r"^[^,]+,\s*(\S+)\s*/\s*(?:min\((.+)\)|(\S+))\s*$", claim)
    if not m:
        return None
    bases = [b.strip() for b in (m.group(2) or m.group(3)).split(",")]
    return m.group(1), bases


def best_base(metrics: Sequence[Any], bases: Sequence[str]):
    """The baseline among ``bases`` (labels) that crossed first; None when none crossed."""
    got = [m for m in metrics if m.label in bases and m.time_to_target_s is not None]
    return min(got, key=lambda m: m.time_to_target_s) if got else None


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
             f"Rules fixed in advance (`rog/papers/rog/robustness.py`): a fade is a worker link below {FADE_FRACTION:g}x its "
             f"median rate for at least {FADE_MIN_TRACE_S:g} trace seconds. Time and energy to target: when the "
             "first fade falls relative to every system's target crossing, and when a fade came first, the ratio "
             "split into iterations to the target x seconds per iteration before the crossing (x mean power for "
             "energy). Other claims: the share of run time in fades against the median where the claim holds.", "",
             *markdown_table(["claim", "replica", "value", "cause", "evidence"])]
    for r in rows:
        lines.append(f"| {r['claim']} | {r['replica'] or 'all'} | {r['value']:.2f} | {r['cause']} | {r['evidence']} |")
    return "\n".join(lines) + "\n"


MIN_ACCURACY_HORIZON_S = 150.0
ACCURACY_PREFIXES = ("time to target", "energy to target", "final accuracy", "accuracy at")
NOT_DECIDABLE = "not decidable at this length"
_ITEMS = {"sensitivity": ("batch", "workers"), "threshold": ("threshold",)}


def is_sensitivity_accuracy(claim: Claim) -> bool:
    """An accuracy claim read from the worker / batch or threshold items."""
    return claim.source in _ITEMS and claim.name.startswith(ACCURACY_PREFIXES)


def horizon_s(claim: Claim, budgets_s: dict[str, float] | None) -> float | None:
    """The shortest budget of the items the claim's runs come from (plan.json's ``budgets_s``); None unknown."""
    if not budgets_s or claim.source not in _ITEMS:
        return None
    vals = [b for name, b in budgets_s.items() if name.split(":", 1)[0] in _ITEMS[claim.source]]
    return min(vals) if vals else None


def not_decidable_reason(claim: Claim, horizon: float | None, entry: dict[str, Any] | None = None) -> str | None:
    """Why ``claim`` cannot be decided (None: it can, or the rule does not apply); ``entry``: its
    robustness entry (:mod:`rog.papers.rog.robustness`), for the spread rule."""
    if not is_sensitivity_accuracy(claim):
        return None
    if horizon is not None and horizon < MIN_ACCURACY_HORIZON_S:
        return (f"{NOT_DECIDABLE}: its runs are {horizon:g} s long, under the {MIN_ACCURACY_HORIZON_S:g} s "
                "at which accuracy claims are read")
    if entry is not None and entry.get("of", 0) >= 2 and entry.get("median") is not None:
        parity = 1.0 if claim.unit == "x" else 0.0
        spread = entry["max"] - entry["min"]
        effect = abs(entry["median"] - parity)
        if spread > effect:
            return (f"{NOT_DECIDABLE}: its spread over {entry['of']} replicas ({spread:.2f}) is larger than "
                    f"the median's distance from parity ({effect:.2f})")
    return None


def reasons(claims: Sequence[Claim], budgets_s: dict[str, float] | None,
            entries: Sequence[dict[str, Any]] | None = None) -> dict[str, str]:
    """Claim name -> why it is not decidable, for every claim the rule marks."""
    by_key = {e["claim"]: e for e in entries or ()}
    out = {}
    for c in claims:
        why = not_decidable_reason(c, horizon_s(c, budgets_s), by_key.get(claim_key(c.name)))
        if why:
            out[c.name] = why
    return out


ROBUSTNESS_KEYS = ("claim", "bound", "holds", "of", "median", "min", "max", "run_ids", "replicas")
_SENSITIVITY_ITEMS = ("batch", "workers")
def _union(groups: Sequence[Sequence[RunMetrics]]) -> list[RunMetrics]:
    seen: dict[str, RunMetrics] = {}
    for ms in groups:
        for m in ms:
            seen.setdefault(m.run.run_id, m)
    return list(seen.values())


def replica_claims(item_sets: dict[str, Sequence[RunMetrics]]) -> dict[str, list[Claim]]:
    """Replica -> its claims table, from item name -> that item's metrics (each over its own budget and
    target), as the summary's claims table reads the items of one replica."""
    by_replica: dict[str, dict[str, Sequence[RunMetrics]]] = {}
    for name, ms in item_sets.items():
        by_replica.setdefault(replica_of(name), {})[name] = ms
    out: dict[str, list[Claim]] = {}
    for rep, sets in by_replica.items():
        primary = _union(list(sets.values()))
        if not primary:
            continue
        sens = _union([ms for n, ms in sets.items() if n.split(":", 1)[0] in _SENSITIVITY_ITEMS]) or None
        thr = _union([ms for n, ms in sets.items() if n.split(":", 1)[0] == "threshold"]) or None
        out[rep] = claim_rows(primary, None, sens, thr)
    return out


def _holds(value: float, bound: tuple[str, float]) -> bool:
    op, b = bound
    return value <= b if op == "<=" else value >= b


def aggregate(per_replica: dict[str, Sequence[Claim]]) -> list[dict[str, Any]]:
    """One entry per claim (first-seen order) over the replicas: see the module docstring."""
    order: list[str] = []
    rows: dict[str, list[tuple[str, Claim]]] = {}
    for rep, claims in per_replica.items():
        for c in claims:
            k = claim_key(c.name)
            if k not in rows:
                order.append(k)
                rows[k] = []
            rows[k].append((rep, c))
    out = []
    for k in order:
        cs = [c for _, c in rows[k]]
        bound = next((c.bound for c in cs if c.bound is not None), None)
        vals = [c.ours for c in cs if c.ours is not None]
        ids = sorted({i for c in cs for i in c.run_ids})
        out.append(dict(claim=k, bound=None if bound is None else [bound[0], float(bound[1])],
                        holds=None if bound is None else sum(_holds(v, bound) for v in vals), of=len(vals),
                        median=float(statistics.median(vals)) if vals else None,
                        min=float(min(vals)) if vals else None, max=float(max(vals)) if vals else None,
                        run_ids=ids, replicas=len(cs)))
    return out


def robustness(item_sets: dict[str, Sequence[RunMetrics]] | None, metrics: Sequence[RunMetrics]
               ) -> tuple[list[dict[str, Any]], dict[str, list[Claim]]]:
    """The ``robustness`` list and the per-replica claims; without items (no plan) the runs are one replica."""
    per = replica_claims(item_sets) if item_sets else {"": claim_rows(metrics)}
    return aggregate(per), per


def holds_text(e: dict[str, Any]) -> str:
    """A robustness entry's "holds" cell: ``on 2 of 3; reached 3 of 4``, or ``not decidable: ...`` when no
    replica has a value."""
    n_all = e.get("replicas", e["of"])
    word = "reached" if "to target" in e["claim"] else "measured"
    if e["of"] == 0:
        return f"not decidable: no replica has a value ({word} 0 of {n_all})"
    holds = f"on {e['holds']} of {e['of']}" if e["holds"] is not None else f"no bound (n = {e['of']})"
    shown = n_all > e["of"] or (word == "reached" and n_all > 1)  # a mean over seeds names how many reached it
    return holds + (f"; {word} {e['of']} of {n_all}" if shown else "")


def robustness_markdown(entries: Sequence[dict[str, Any]], per_replica: dict[str, Sequence[Claim]],
                        budgets_s: dict[str, float] | None = None) -> str:
    """summary.md's section: per claim "holds on k of n", median and range, and every replica's value;
    claims that the decidability rule (above) marks say so (``budgets_s``: plan.json's item budgets)."""
    undecided = {claim_key(n) for cs in per_replica.values() for n in reasons(cs, budgets_s, entries)}
    units = {claim_key(c.name): c.unit for cs in per_replica.values() for c in cs}
    reps = list(per_replica)
    lines = ["## Robustness over traces and seeds", "",
             f"Every claim read per replica ({len(reps)} replica(s): "
             + (", ".join(f"`{r}`" for r in reps) if any(reps) else "the one trace and seed of this plan")
             + "), each with its own target per item. n counts the replicas that measured the claim "
             "(a missing value, e.g. a target never reached, is not counted; 'reached k of n' says how many of all "
             "replicas had a value).", "",
             *markdown_table(["claim", "holds", "median", "range (min-max)", "bound", "per replica"])]
    for e in entries:
        u = units.get(e["claim"], "x")
        kw = {"unit": "x"} if u == "x" else {"unit": " pts", "sign": True}  # a ratio, or a signed difference
        holds = holds_text(e)
        if e["claim"] in undecided:
            holds += f" ({NOT_DECIDABLE})"
        b = "-" if e["bound"] is None else f"{e['bound'][0]} {fmt(e['bound'][1], **kw)}"
        per = []
        for r, cs in per_replica.items():
            c = next((c for c in cs if claim_key(c.name) == e["claim"]), None)
            if c is not None:
                per.append(f"{r or 'all'}: {fmt(c.ours, **kw)}")
        lines.append(f"| {e['claim']} | {holds} | {fmt(e['median'], **kw)} | {fmt(e['min'], **kw)} to {fmt(e['max'], **kw)} "
                     f"| {b} | {'; '.join(per)} |")
    return "\n".join(lines) + "\n"
