"""The plan-space comparisons of the paper's LOSS planners, on a profile measured here (or given).

``python -m rog.inference.compare loss --model vgg19 --rates 10,50`` prints, per rate, the one-segment
planner's fastest plan next to the per-layer plan space's (:func:`compare`: the exhaustive search over
resolution stages and a local search grown from the one-segment plan, :mod:`rog.inference.loss`).

``python -m rog.inference.compare de --model vgg19 --rates 5,10,20,50,100 [--times P.json]`` prints, per rate,
the one-segment planner's latency, the fixed candidate searches' and differential evolution's
(:func:`compare_de`, :mod:`rog.inference.loss_de`), with DE's planning seconds, and the one-segment and DE
plans' latencies under the row-band bound (``*_streamed_s``: rows sent as they finish, optimistically).

These drive the whole stack (profiling through :func:`rog.inference.runner.prepare`, the planners of
:mod:`rog.inference.planners`), so they live above it rather than beside the plan spaces they compare.
"""

from __future__ import annotations

from typing import Sequence

from rog.inference.costmodel import DeviceTimes
from rog.inference.graph import Graph
from rog.inference.loss import MultiPlan, PlanCosts, best_multi, loss_candidates, multi_flows, refine, simulate_multi
from rog.inference.loss_de import DE_MAXITER, DE_POPULATION, DEEncoding, de_search
from rog.inference.planners import Candidates, choose
from rog.inference.runner import prepare

__all__ = ["compare", "compare_de", "parse_rates", "main"]


def compare(model: str, rates_mbit: Sequence[float], split_costs: str = "measured", repeats: int = 7) -> dict:
    """Per rate, the cost model's fastest one-segment plan (the ``intra-dp`` planner) next to the fastest
    plan of this plan space (which holds the one-segment plans at its boundaries and shares), on a
    profile measured here."""
    prep = prepare(model, ["local"], [1.0], repeats=repeats, split_costs=split_costs)
    cands = Candidates(prep.graph)
    rows, costs = [], PlanCosts(prep.graph, prep.times)
    for r in rates_mbit:
        one, sim = choose("intra-dp", cands, prep.times, r)
        multi, lat = best_multi(prep.graph, prep.times, r, costs=costs)
        if 0.0 < one.x < 1.0:  # also grow the one-segment plan itself
            grown, g_lat = refine(prep.graph, prep.times, r, MultiPlan((one.i, one.j), (one.x,), one.merge), costs=costs)
            if g_lat < lat:
                multi, lat = grown, g_lat
        best = min(lat, sim.latency_s)
        rows.append({"rate_mbit": r, "one_segment": one.label(), "one_segment_s": sim.latency_s,
                     "multi_search": multi.label(), "multi_search_s": lat,
                     "loss": multi.label() if lat < sim.latency_s else one.label(), "loss_s": best,
                     "reduction_pct": 100.0 * (1.0 - best / sim.latency_s)})
    return {"model": model, "split_costs": prep.times.split_costs,
            "robot_local_s": sum(prep.times.robot_s(u) for u in range(len(prep.graph))), "rates": rows}


def _streamed(g: Graph, t: DeviceTimes, plan: MultiPlan | None, rate_mbit: float, unsplit_s: float) -> float:
    """``plan``'s latency under the row-band bound (:func:`rog.inference.loss.multi_timeline`, ``stream``); a plan
    that is not split (None) keeps ``unsplit_s``."""
    return unsplit_s if plan is None else simulate_multi(g, t, multi_flows(g, plan), rate_mbit, stream=True)


def compare_de(model: str, rates_mbit: Sequence[float], times: DeviceTimes | None = None, repeats: int = 7,
               maxiter: int = DE_MAXITER, population: int = DE_POPULATION) -> dict:
    """Per rate, the modelled latency of the one-segment planner, the ``intra-dp-loss`` planner's fixed
    candidates, :func:`compare`'s search (up to 3 segments over the resolution stages
    and a local search from the one-segment plan) and DE started from the best of those, with DE's
    planning seconds (``times``: a profile made before, else one measured here)."""
    prep = prepare(model, [], [1.0], repeats=repeats, times=times)
    g, t = prep.graph, prep.times
    cands, enc = Candidates(g), DEEncoding(g)
    rows = []
    for r in rates_mbit:
        costs = PlanCosts(g, t)
        one, sim = choose("intra-dp", cands, t, r)
        fixed = costs.fastest(loss_candidates(g, [one]), r)
        search = best_multi(g, t, r, costs=costs)
        if 0.0 < one.x < 1.0:
            grown = refine(g, t, r, MultiPlan((one.i, one.j), (one.x,), one.merge), costs=costs)
            search = min(search, grown, key=lambda pl: pl[1])
        start = min([p for p in (fixed, search) if p is not None], key=lambda pl: pl[1])
        de = de_search(g, t, r, [start[0]], maxiter=maxiter, population=population, costs=PlanCosts(g, t),
                       encoding=enc)
        one_multi = MultiPlan((one.i, one.j), (one.x,), one.merge) if 0.0 < one.x < 1.0 else None
        rows.append({"rate_mbit": r, "one_segment": one.label(), "one_segment_s": sim.latency_s,
                     "one_segment_streamed_s": _streamed(g, t, one_multi, r, sim.latency_s),
                     "de_streamed_s": _streamed(g, t, de.plan, r, de.latency_s),
                     "loss_fixed": fixed[0].label() if fixed else None,
                     "loss_fixed_s": min(sim.latency_s, fixed[1]) if fixed else sim.latency_s,
                     "loss_search": search[0].label(), "loss_search_s": search[1],
                     "de": de.plan.label() if de.plan else "local", "de_s": de.latency_s,
                     "de_evaluations": de.evaluations, "de_generations": de.generations, "de_planning_s": de.planning_s})
    return {"model": model, "split_costs": t.split_costs, "de_maxiter": maxiter, "de_population": population,
            "de_genes": enc.size, "rates": rows}


def parse_rates(ap, text: str) -> list[float]:
    """``--rates`` as positive Mbit/s values; a bad value ends the command through ``ap.error`` naming the flag."""
    try:
        rates = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        ap.error(f"--rates {text!r}: give Mbit/s values, e.g. --rates 10,50")
    if not rates or min(rates) <= 0:
        ap.error(f"--rates {text!r}: give positive Mbit/s values, e.g. --rates 10,50")
    return rates


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m rog.inference.compare", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    lo = sub.add_parser("loss", help="the one-segment planner next to the per-layer plan space's searches")
    lo.add_argument("--model", default="vgg19")
    lo.add_argument("--rates", default="10,20,50,100,200", help="link rates in Mbit/s, comma-separated")
    de = sub.add_parser("de", help="the fixed candidate searches next to differential evolution")
    de.add_argument("--model", default="vgg19")
    de.add_argument("--rates", default="5,10,20,50,100", help="link rates in Mbit/s, comma-separated")
    de.add_argument("--times", default=None, help="a profile of python -m rog.inference.profiler --out (else profiled here)")
    de.add_argument("--maxiter", type=int, default=DE_MAXITER, help="DE generations per rate")
    de.add_argument("--population", type=int, default=DE_POPULATION, help="DE members")
    a = ap.parse_args(argv)
    sp = lo if a.what == "loss" else de
    rates = parse_rates(sp, a.rates)
    if a.what == "loss":
        print(json.dumps(compare(a.model, rates)))
        return 0
    if a.maxiter < 1 or a.population < 5:
        sp.error("--maxiter must be >= 1 and --population >= 5")
    times = None
    if a.times:
        from rog.inference.profiler import load_times

        try:
            times = load_times(a.times, a.model)
        except ValueError as e:
            sp.error(str(e))
    print(json.dumps(compare_de(a.model, rates, times, maxiter=a.maxiter, population=a.population)))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
