"""The paper's plan space (LOSS, Sec. 4.2), offline: several split segments, each with its own row share,
and exchanges of halo rows between them.  Cost model, an in-process executor and a search; not run live.

``python -m rog.inference.loss --model vgg19 --rates 10,50`` prints, per rate, the one-segment planner's
fastest plan and this plan space's (:func:`compare`): the exhaustive search over resolution stages
(:func:`best_multi`) and a local search grown from the one-segment plan (:func:`refine`).

A :class:`MultiPlan` has boundaries ``b_0 < b_1 < ... < b_K`` (local units, transfers only at the
paper's set Pi: tensors no larger than the image) and robot shares ``x_1 .. x_K``: units
``0 .. b_0-1`` on the robot, segment ``k`` (units ``b_{k-1} .. b_k-1``) with the robot computing
the first ``round(x_k * H)`` rows of boundary ``b_k`` and the server the rest, then ``merge`` as in
:class:`rog.inference.costmodel.Plan`.  Between segments each side receives the rows its next part
needs and does not hold (the paper's M_i and N_i): the robot's part grows downwards, the server's
upwards.  ``K = 1`` is the one-segment plan of :mod:`rog.inference.costmodel` (tested equal).

The timeline (:func:`simulate_multi`): two compute clocks, one FIFO link per direction; at every
exchange each side sends as soon as it finished its part and waits for what it receives.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import torch

from rog.inference.costmodel import DeviceTimes, _row_bytes, xmit_s
from rog.inference.graph import Graph

__all__ = ["MultiPlan", "MultiFlows", "multi_flows", "simulate_multi", "run_multi", "stage_boundaries", "best_multi", "refine",
           "compare"]


@dataclass(frozen=True)
class MultiPlan:
    """Boundaries ``b_0 .. b_K``, robot row shares ``x_1 .. x_K`` and the merge side."""

    bounds: tuple[int, ...]
    xs: tuple[float, ...]
    merge: str

    def label(self) -> str:
        return "loss[" + ",".join(map(str, self.bounds)) + "]x" + "/".join(f"{x:g}" for x in self.xs) + f"->{self.merge}"


@dataclass(frozen=True)
class MultiFlows:
    """Per segment: rows each side computes at every level, the exchange before it (rows each way)."""

    plan: MultiPlan
    a: tuple[int, ...]  # robot rows of boundary b_k, k = 1..K
    robot_rows: tuple[tuple[tuple[int, int], ...], ...]  # per segment: Chain.ranges of the robot's part
    server_rows: tuple[tuple[tuple[int, int], ...], ...]
    up_rows: tuple[tuple[int, int], ...]  # per segment: rows of its first boundary the robot sends (first: the input)
    down_rows: tuple[tuple[int, int], ...]  # per segment: rows the server sends the robot before it
    merge_bytes: int  # robot -> server (merge server: the robot's rows) or server -> robot (merge robot)
    out_bytes: int  # the output, server -> robot, when the merge is on the server


def multi_flows(graph: Graph, plan: MultiPlan) -> MultiFlows:
    """Rows and exchanges of ``plan`` (exact halos), or ValueError for an impossible plan."""
    b, xs = plan.bounds, plan.xs
    if len(b) != len(xs) + 1 or not xs or list(b) != sorted(set(b)) or b[0] < 0 or b[-1] > graph.first_global:
        raise ValueError(f"a plan needs increasing local boundaries, one share per segment, got {plan}")
    if plan.merge not in ("robot", "server"):
        raise ValueError(f"merge must be 'robot' or 'server', got {plan.merge!r}")
    a_list, rr, sr, ups, downs = [], [], [], [], []
    have_r = (0, graph.h_at(b[0]))  # rows of the current boundary each side holds
    have_s = (0, 0)
    for k, x in enumerate(xs):
        p, q = b[k], b[k + 1]
        hq = graph.h_at(q)
        a = int(round(x * hq))
        if not 0 < a < hq:
            raise ValueError(f"x={x} gives {a} of {hq} rows at boundary {q}: nothing to split")
        seg = graph.segment(p, q)
        r, s = seg.ranges(0, a, graph.h_at(p)), seg.ranges(a, hq, graph.h_at(p))
        need_r, need_s = r[0], s[0]
        downs.append((have_r[1], need_r[1]) if need_r[1] > have_r[1] else (0, 0))
        if k == 0:  # the robot holds the whole boundary b_0: it sends the server all rows it needs
            ups.append(need_s)
        else:  # the robot holds [0, a_prev), the server [a_prev, H): the rows above a_prev the server lacks
            ups.append((need_s[0], have_s[0]) if need_s[0] < have_s[0] else (0, 0))
        a_list.append(a)
        rr.append(tuple(r))
        sr.append(tuple(s))
        have_r, have_s = (0, a), (a, hq)
    a_k, h_k = a_list[-1], graph.h_at(b[-1])
    rb = _row_bytes(graph, b[-1])
    merge = a_k * rb if plan.merge == "server" else (h_k - a_k) * rb
    return MultiFlows(plan, tuple(a_list), tuple(rr), tuple(sr), tuple(ups), tuple(downs), merge,
                      graph.bytes_at(len(graph)) if plan.merge == "server" else 0)


def _seg_s(graph: Graph, times: DeviceTimes, start: int, rows, side: str) -> float:
    f = times.robot_s if side == "robot" else times.server_s
    return sum(f(start + k, (hi - lo) / graph.units[start + k].out_h) for k, (lo, hi) in enumerate(rows[1:]))


def simulate_multi(graph: Graph, times: DeviceTimes, fl: MultiFlows, rate_mbit: float) -> float:
    """Modelled latency of ``fl.plan`` at ``rate_mbit`` (both directions)."""
    b, ser, ov = fl.plan.bounds, times.ser_s_per_byte, times.msg_overhead_s
    n = len(graph)
    up_free = down_free = 0.0

    def send(t_ready: float, nbytes: int, free: float) -> tuple[float, float]:  # (arrival usable, link free)
        start = max(t_ready, free) + 0.5 * ser * nbytes
        end = start + ov + xmit_s(nbytes, rate_mbit)
        return end + 0.5 * ser * nbytes, end

    robot = sum(times.robot_s(u) for u in range(b[0]))
    server = 0.0
    for k in range(len(fl.plan.xs)):
        p = b[k]
        rb = _row_bytes(graph, p)
        up, down = fl.up_rows[k], fl.down_rows[k]
        if up[1] > up[0]:
            arr, up_free = send(robot, (up[1] - up[0]) * rb, up_free)
            server = max(server, arr)
        if down[1] > down[0]:
            arr, down_free = send(server, (down[1] - down[0]) * rb, down_free)
            robot = max(robot, arr)
        robot += _seg_s(graph, times, p, fl.robot_rows[k], "robot")
        server += _seg_s(graph, times, p, fl.server_rows[k], "server")
    tail = range(b[-1], n)
    if fl.plan.merge == "robot":
        arr, _ = send(server, fl.merge_bytes, down_free)
        return max(robot, arr) + sum(times.robot_s(u) for u in tail)
    arr, _ = send(robot, fl.merge_bytes, up_free)
    server = max(server, arr) + sum(times.server_s(u) for u in tail)
    arr, _ = send(server, fl.out_bytes, down_free)
    return arr


def run_multi(graph: Graph, plan: MultiPlan, image: torch.Tensor) -> torch.Tensor:
    """The output of ``plan`` with each side computing only from the rows it holds or received."""
    from rog.inference.split import run_units

    fl, b = multi_flows(graph, plan), plan.bounds
    with torch.no_grad():
        rob = run_units(graph, 0, b[0], image, 0)  # rows [0, H) of b_0
        r_lo, srv, s_lo = 0, None, 0
        for k in range(len(plan.xs)):
            p, q = b[k], b[k + 1]
            up, down = fl.up_rows[k], fl.down_rows[k]
            if k == 0:
                srv, s_lo = rob[:, :, up[0]:].clone(), up[0]
            elif up[1] > up[0]:  # the robot's rows [up0, up1) go before the server's
                srv, s_lo = torch.cat([rob[:, :, up[0] - r_lo:up[1] - r_lo], srv], 2), up[0]
            if down[1] > down[0]:  # the server's rows [down0, down1) go after the robot's
                rob = torch.cat([rob, srv[:, :, down[0] - s_lo:down[1] - s_lo]], 2)
            rob_new = run_units(graph, p, q, rob, r_lo, list(fl.robot_rows[k][1:]))
            srv = run_units(graph, p, q, srv, s_lo, list(fl.server_rows[k][1:]))
            rob, r_lo, s_lo = rob_new, 0, fl.a[k]
        t_j = torch.cat([rob, srv], 2)
        return run_units(graph, b[-1], len(graph), t_j, 0)


def stage_boundaries(graph: Graph) -> list[int]:
    """Exchange points searched: boundary 0 and the last boundary of every height among the local units
    whose tensor is no larger than the image (a share per resolution stage, as per-layer splits)."""
    last: dict[int, int] = {}
    for u in _transfer_points(graph):
        last[graph.h_at(u)] = u
    return sorted({0, *last.values()})


def best_multi(graph: Graph, times: DeviceTimes, rate_mbit: float, max_segments: int = 3,
               shares: Sequence[float] = tuple(k / 10 for k in range(1, 10))) -> tuple[MultiPlan, float]:
    """The fastest plan by :func:`simulate_multi` over boundaries of :func:`stage_boundaries`, 1 to
    ``max_segments`` segments, every share in ``shares`` per segment, either merge side."""
    cands = stage_boundaries(graph)
    best: tuple[float, MultiPlan] | None = None
    for k in range(1, max_segments + 1):
        for bounds in itertools.combinations(cands, k + 1):
            for xs in itertools.product(shares, repeat=k):
                for merge in ("robot", "server"):
                    plan = MultiPlan(bounds, xs, merge)
                    try:
                        fl = multi_flows(graph, plan)
                    except ValueError:
                        continue
                    lat = simulate_multi(graph, times, fl, rate_mbit)
                    if best is None or lat < best[0]:
                        best = (lat, plan)
    if best is None:
        raise ValueError("no split plan exists for this graph")
    return best[1], best[0]


def _transfer_points(graph: Graph) -> list[int]:
    """Boundaries of local units whose tensor is no larger than the image (the paper's set Pi)."""
    limit = graph.bytes_at(0)
    return [u for u in range(graph.first_global + 1) if graph.bytes_at(u) <= limit]


def refine(graph: Graph, times: DeviceTimes, rate_mbit: float, plan: MultiPlan, rounds: int = 2,
           shares: Sequence[float] = tuple(k / 20 for k in range(1, 20))) -> tuple[MultiPlan, float]:
    """Local search from ``plan``: each round tries every extra exchange point (any boundary of the set
    Pi inside a segment, splitting it in two, or after the last one, adding a segment) with every share
    in ``shares`` for the new part and either merge side, and keeps the fastest; stops when nothing helps."""
    best = (simulate_multi(graph, times, multi_flows(graph, plan), rate_mbit), plan)
    points = _transfer_points(graph)
    for _ in range(rounds):
        start = best
        b, xs = start[1].bounds, start[1].xs
        tries = []
        for m in points:
            if m in b or m < b[0]:
                continue
            k = sum(1 for u in b if u < m)  # m lies inside segment k-1 (between b[k-1] and b[k]), or after the last
            for x in shares:
                if k < len(b):
                    tries.append((b[:k] + (m,) + b[k:], xs[:k - 1] + (x,) + xs[k - 1:]))
                else:
                    tries.append((b + (m,), xs + (x,)))
        for bounds, new_xs in tries:
            for merge in ("robot", "server"):
                cand = MultiPlan(bounds, new_xs, merge)
                try:
                    lat = simulate_multi(graph, times, multi_flows(graph, cand), rate_mbit)
                except ValueError:
                    continue
                if lat < best[0]:
                    best = (lat, cand)
        if best is start:
            break
    return best[1], best[0]


def compare(model: str, rates_mbit: Sequence[float], split_costs: str = "measured", repeats: int = 7) -> dict:
    """Per rate, the cost model's fastest one-segment plan (the ``intra-dp`` planner) next to the fastest
    plan of this plan space (which holds the one-segment plans at its boundaries and shares), on a
    profile measured here."""
    from rog.inference.planners import Candidates, choose
    from rog.inference.runner import prepare

    prep = prepare(model, ["local"], [1.0], repeats=repeats, split_costs=split_costs)
    cands = Candidates(prep.graph)
    rows = []
    for r in rates_mbit:
        one, sim = choose("intra-dp", cands, prep.times, r)
        multi, lat = best_multi(prep.graph, prep.times, r)
        if 0.0 < one.x < 1.0:  # also grow the one-segment plan itself
            grown, g_lat = refine(prep.graph, prep.times, r, MultiPlan((one.i, one.j), (one.x,), one.merge))
            if g_lat < lat:
                multi, lat = grown, g_lat
        best = min(lat, sim.latency_s)
        rows.append({"rate_mbit": r, "one_segment": one.label(), "one_segment_s": sim.latency_s,
                     "multi_search": multi.label(), "multi_search_s": lat,
                     "loss": multi.label() if lat < sim.latency_s else one.label(), "loss_s": best,
                     "reduction_pct": 100.0 * (1.0 - best / sim.latency_s)})
    return {"model": model, "split_costs": prep.times.split_costs,
            "robot_local_s": sum(prep.times.robot_s(u) for u in range(len(prep.graph))), "rates": rows}


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m rog.inference.loss", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vgg19")
    ap.add_argument("--rates", default="10,20,50,100,200", help="link rates in Mbit/s, comma-separated")
    a = ap.parse_args(argv)
    try:
        rates = [float(v) for v in a.rates.split(",") if v.strip()]
    except ValueError:
        ap.error(f"--rates {a.rates!r}: give Mbit/s values, e.g. --rates 10,50")
    if not rates or min(rates) <= 0:
        ap.error(f"--rates {a.rates!r}: give positive Mbit/s values, e.g. --rates 10,50")
    print(json.dumps(compare(a.model, rates)))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
