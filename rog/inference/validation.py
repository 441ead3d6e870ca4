"""Checks of the cost model against measurements it did not use.

* :func:`sweep_plans`: the plans of the fixed-rate sweep at one rate: the Fig. 1 layer cuts and split
  plans (Intra-DP's choice at that exact rate, and the same split segment at robot row shares
  :data:`HOLDOUT_X`, odd multiples of 0.05: between the row shares the unit curves were measured at).
* :func:`loss_sweep_plans`: per-layer (LOSS) plans at one rate: the fastest and its boundaries at held-out shares.
* :func:`stream_sweep_plans`: the plan the streamed timeline calls fastest among those sending rows in bands,
  with 1 (not streamed), 2 and 4 bands: streaming's measured effect on one plan.
* :func:`error_distribution`: the spread of modelled / measured - 1 over points.
* :func:`profile_holdout`: the unit curves and the linear model at held-out row shares, both sides.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from rog.inference.costmodel import Plan, cut_plan, local_plan

__all__ = ["HOLDOUT_X", "SWEEP_KINDS", "sweep_plans", "loss_sweep_plans", "stream_sweep_plans", "error_distribution", "profile_holdout"]

HOLDOUT_X = (0.15, 0.35, 0.55, 0.75)
SWEEP_KINDS = ("cuts", "splits", "loss", "stream")


def sweep_plans(prep, rate_mbit: float, kinds: Sequence[str] = SWEEP_KINDS) -> list[tuple[str, int | None, Plan]]:
    """``(kind, cut or None, plan)`` to run at ``rate_mbit``: ``cut`` for every Fig. 1 cut point, ``split``
    for Intra-DP's choice (when it is a split) and its segment at :data:`HOLDOUT_X` (the fastest split
    by the cost model when Intra-DP chose no split)."""
    from rog.inference.planners import _fastest, choose
    from rog.inference.runner import fig1_cuts

    g, out = prep.graph, []
    if "cuts" in kinds:
        n = len(g)
        out += [("cut", c, local_plan(g) if c >= n else cut_plan(c)) for c in fig1_cuts(g)]
    if "splits" in kinds:
        chosen, _ = choose("intra-dp", prep.cands, prep.times, rate_mbit)
        base = chosen if 0.0 < chosen.x < 1.0 else _fastest(prep.cands.splits, prep.cands, prep.times, rate_mbit)[0].plan
        plans = [base] + [Plan(base.i, base.j, x, base.merge) for x in HOLDOUT_X if abs(x - base.x) > 1e-9]
        for p in plans:
            try:
                from rog.inference.costmodel import flows

                flows(g, p)
            except ValueError:
                continue  # x rounds to no rows of boundary j
            out.append(("split", None, p))
    if "loss" in kinds:
        out += [("loss", None, p) for p in loss_sweep_plans(prep, rate_mbit)]
    if "stream" in kinds:
        out += [("stream", None, p) for p in stream_sweep_plans(prep, rate_mbit)]
    return out


def stream_sweep_plans(prep, rate_mbit: float) -> list:
    """The streamed plan run at ``rate_mbit``: of the ``intra-dp-stream`` planner's candidates in 2 or 4 bands,
    the one :func:`rog.inference.stream.stream_timeline` calls fastest (whether or not it beats the plans
    in one band), with 1, 2 and 4 bands."""
    from rog.inference.loss import MultiPlan, PlanCosts, loss_candidates
    from rog.inference.planners import choose
    from rog.inference.stream import stream_choice

    one, _ = choose("intra-dp", prep.cands, prep.times, rate_mbit)
    best, _ = stream_choice(PlanCosts(prep.graph, prep.times), loss_candidates(prep.graph, [one]), one, None, rate_mbit,
                            bands=(2, 4))
    return [MultiPlan(best.bounds, best.xs, best.merge, n) for n in (1, 2, 4)]


def loss_sweep_plans(prep, rate_mbit: float) -> list:
    """The per-layer plans run at ``rate_mbit``: the fastest of the ``intra-dp-loss`` candidates
    (:func:`rog.inference.loss.loss_candidates`, whether or not it beats the one-segment plan) and its
    boundaries with every segment at each share of :data:`HOLDOUT_X` (where that leaves rows to split)."""
    from rog.inference.loss import MultiPlan, PlanCosts, loss_candidates, multi_flows
    from rog.inference.planners import choose

    one, _ = choose("intra-dp", prep.cands, prep.times, rate_mbit)
    best, _ = PlanCosts(prep.graph, prep.times).fastest(loss_candidates(prep.graph, [one]), rate_mbit)
    out = [best]
    for x in HOLDOUT_X:
        p = MultiPlan(best.bounds, (x,) * len(best.xs), best.merge)
        try:
            multi_flows(prep.graph, p)
        except ValueError:
            continue
        if p != best:
            out.append(p)
    return out


def error_distribution(errors: Sequence[float], within: float = 0.15) -> dict | None:
    """Of signed relative errors (model / measured - 1): count, median and 90th percentile of the
    absolute error, the largest, the signed median and how many are within ``within``."""
    e = [float(x) for x in errors]
    if not e:
        return None
    a = sorted(abs(x) for x in e)
    return {"n": len(e), "median_abs": statistics.median(a), "p90_abs": a[min(len(a) - 1, int(round(0.9 * (len(a) - 1))))],
            "max_abs": a[-1], "median_signed": statistics.median(e), "within": within,
            "n_within": sum(x <= within for x in a)}


def profile_holdout(prep, repeats: int = 5) -> dict:
    """The unit curves (and the linear share of the whole) against units measured at held-out row shares:
    per side, the error distribution and that of the time-weighted error of each share's sum."""
    from rog.inference.profiler import HOLDOUT_SHARES, holdout_errors

    out = {"shares": list(HOLDOUT_SHARES)}
    for side in ("robot", "server"):
        if side == "server" and prep.times.server_device == "cuda":
            prep.graph.to("cuda")
        pts = holdout_errors(prep.graph, prep.times, side, repeats, device=prep.times.server_device if side == "server" else "cpu")
        prep.graph.to("cpu")
        sums = {}
        for p in pts:  # per held-out share: all local units at that share (rounded to rows), modelled vs measured
            m = sums.setdefault(min(HOLDOUT_SHARES, key=lambda s: abs(s - p["share"])), [0.0, 0.0, 0.0])
            m[0] += p["model_s"]
            m[1] += p["linear_s"]
            m[2] += p["measured_s"]
        out[side] = {"units": error_distribution([p["error"] for p in pts]),
                     "units_linear": error_distribution([p["linear_error"] for p in pts]),
                     "share_sums": error_distribution([m / t - 1 for m, _, t in sums.values()]),
                     "share_sums_linear": error_distribution([lin / t - 1 for _, lin, t in sums.values()])}
    return out
