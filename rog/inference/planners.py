"""The planners: which plan to run at a given bandwidth, and plan tables over a bandwidth grid.

* ``local``: everything on the robot.
* ``all``: all-offload (send the image, the server computes, the output comes back).
* ``layer-latency`` (DSCCS-like): the layer partition (cut at any boundary, local included) with
  the lowest modelled latency.
* ``layer-energy-deadline`` (SPSO-GA-like): the layer partition with the lowest modelled robot
  energy among those meeting the deadline (1 s: a 1 Hz control loop); the fastest if none does.
* ``intra-dp``: the lowest modelled latency over the layer partitions and every split plan
  (:class:`rog.inference.costmodel.Plan`): a split segment ``[i, j)`` of local units, the robot's
  row share ``x`` in {0.05, 0.10, ..., 0.95} and either merge side.  Transfers happen only at boundaries
  whose tensor is no larger than the input (the paper's set Pi, Sec. 4.2).  An exhaustive grid
  (deterministic) stands in for the paper's differential evolution (the notes' resolution 2); DE itself
  searches the per-layer space in ``intra-dp-de`` below.

* ``intra-dp-loss`` (not in the default set): Intra-DP in the paper's plan space (LOSS, Sec. 4.2): at
  every level the ``intra-dp`` plan or, where the cost model calls it faster, the fastest per-layer plan of
  :func:`rog.inference.loss.loss_candidates` (several split segments with halo exchanges: every plan of up to
  two segments at shares 0.1 .. 0.9, and every plan one exchange point longer than an ``intra-dp`` split).
  ``intra-dp`` (one segment) stays as the ablation.
* ``intra-dp-de`` (not in the default set): the same plan space searched as the paper does, by
  differential evolution (:mod:`rog.inference.loss_de`, fixed seed, 64 members x 150 generations per
  level), started from everything on the robot, the ``intra-dp-loss`` candidates' fastest plan and the
  ``intra-dp`` split; never modelled slower than ``intra-dp-loss``, a few seconds per level.
* ``intra-dp-stream`` (not in the default set): the ``intra-dp-loss`` candidates sending rows as they
  finish (:mod:`rog.inference.stream`): at every level the 16 fastest unstreamed candidates and the
  ``intra-dp`` split, each in 1, 2 or 4 row bands, the fastest by the streamed timeline (halo
  recomputation and one message overhead a band included); never modelled slower than ``intra-dp-loss``.

The "-like" baselines are re-implementations of the objectives, not the original algorithms.
A plan table (:func:`plan_table`) holds one plan per bandwidth level; at run time the estimate is
rounded down to a level (:func:`level_for`, conservative).  The default levels
(:data:`DEFAULT_GRID_MBIT`) run from 1 to 1000 Mbit/s, each at most 10 % above the one before, so
rounding down loses at most 10 % of the rate wherever a replayed trace goes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from rog.inference.costmodel import (WIRE_FACTOR, DeviceTimes, Flows, Plan, Sim, compute_sums, cut_plan, flows, local_plan,
                                     simulate)

if TYPE_CHECKING:  # annotations only: the command's --help stays torch-free
    from rog.inference.graph import Graph
    from rog.inference.loss import MultiPlan

__all__ = ["PLANNERS", "LOSS_PLANNER", "DE_PLANNER", "STREAM_PLANNER", "KNOWN_PLANNERS", "DEADLINE_S", "SPLIT_SHARES", "geometric_grid", "Candidates", "choose", "plan_table", "level_for",
           "check_grid", "DEFAULT_GRID_MBIT", "TableRow", "plan_of"]

PLANNERS = ("local", "all", "layer-latency", "layer-energy-deadline", "intra-dp")
LOSS_PLANNER = "intra-dp-loss"  # per-layer plans (LOSS); asked for by name, not in the default set
DE_PLANNER = "intra-dp-de"  # the same plan space searched by differential evolution; asked for by name
STREAM_PLANNER = "intra-dp-stream"  # LOSS plans sending rows as they finish (row bands); asked for by name
KNOWN_PLANNERS = PLANNERS + (LOSS_PLANNER, DE_PLANNER, STREAM_PLANNER)
DEADLINE_S = 1.0  # SPSO-GA's 1 Hz deadline (the released code's "fix" mode)
# The robot's row shares of a split (the paper's x is continuous; a 0.05 grid approximates it).
SPLIT_SHARES = tuple(k / 20 for k in range(1, 20))
GRID_STEP = 1.1  # each default level is at most this factor above the previous one
GRID_MAX_MBIT = 1000.0


def geometric_grid(lo_mbit: float = 1.0, hi_mbit: float = GRID_MAX_MBIT, step: float = GRID_STEP) -> tuple[float, ...]:
    """Levels from ``lo_mbit`` to ``hi_mbit`` (both included) in tenths of Mbit/s, each the largest tenth
    not above ``step`` x the previous one (so never more than ``step`` x the previous)."""
    tenths = [int(round(lo_mbit * 10))]
    top = int(round(hi_mbit * 10))
    while tenths[-1] < top:
        tenths.append(min(top, max(tenths[-1] + 1, math.floor(tenths[-1] * step + 1e-9))))
    return tuple(t / 10 for t in tenths)


# Bandwidth levels of the plan tables (Mbit/s): the released code planned for 0..30 MB/s in 1 MB/s
# steps; here 1-1000 Mbit/s in steps of at most 10 % (the replayed traces reach several hundred Mbit/s).
DEFAULT_GRID_MBIT = geometric_grid()


def check_grid(grid_mbit: Sequence[float], flag: str = "--bandwidth-grid") -> tuple[float, ...]:
    """The grid sorted, or ValueError naming ``flag`` when it is empty or has a value <= 0."""
    vals = tuple(float(v) for v in grid_mbit)
    if not vals:
        raise ValueError(f"{flag} is empty: give at least one bandwidth level in Mbit/s, e.g. {flag} 10,50,100")
    bad = [v for v in vals if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ValueError(f"{flag} has {bad[0]:g}: every bandwidth level must be a positive number of Mbit/s, "
                         f"e.g. {flag} 10,50,100")
    return tuple(sorted(set(vals)))


class Candidates:
    """Every plan a planner may choose for one graph, with its flows (computed once)."""

    def __init__(self, graph: Graph, shares: Sequence[float] = SPLIT_SHARES) -> None:
        self.graph = graph
        self._sums: dict = {}
        n, g = len(graph), graph.first_global
        self.local = flows(graph, local_plan(graph))
        self.cuts = [flows(graph, cut_plan(c)) for c in range(n)]
        limit = graph.bytes_at(0)
        ok = [u for u in range(g + 1) if graph.bytes_at(u) <= limit]
        self.splits: list[Flows] = []
        for i in ok:
            for j in ok:
                if j <= i:
                    continue
                for x in shares:
                    for merge in ("robot", "server"):
                        try:
                            self.splits.append(flows(graph, Plan(i, j, x, merge)))
                        except ValueError:
                            pass  # x rounds to no rows at boundary j


    def sums(self, times: DeviceTimes, fl: Flows) -> tuple[float, ...]:
        """:func:`compute_sums` of ``fl`` under ``times`` (cached per times)."""
        key = (id(times), id(fl))
        if key not in self._sums:
            self._sums[key] = compute_sums(self.graph, times, fl)
        return self._sums[key]

    def latencies(self, times: DeviceTimes, cands: Sequence[Flows], rate_mbit: float) -> np.ndarray:
        """The latency :func:`simulate` gives every plan of ``cands`` at ``rate_mbit``, computed for all
        of them at once (the same timeline; used to find the fastest before simulating it exactly)."""
        key = ("vec", id(times), tuple(id(f) for f in cands))
        if key not in self._sums:
            sums = np.array([self.sums(times, f) for f in cands], dtype=float).reshape(-1, 5)
            b = np.array([(f.up1_bytes, f.up2_bytes, f.down_bytes) for f in cands], dtype=float).reshape(-1, 3)
            loc = np.array([f.plan.x >= 1.0 for f in cands])
            mr = np.array([f.plan.merge == "robot" for f in cands])
            self._sums[key] = (sums, b, loc, mr)
        sums, b, loc, mr = self._sums[key]
        t, seg_r, seg_s, tail_r, tail_s = sums.T
        up1, up2, down = b.T
        ser, ov = times.ser_s_per_byte, times.msg_overhead_s
        per_byte = WIRE_FACTOR * 8.0 / (max(rate_mbit, 1e-6) * 1e6)
        x = lambda nb: np.where(nb > 0, ov + nb * per_byte, ov)  # noqa: E731  (a message: overhead + bytes / rate)
        e1 = t + 0.5 * ser * up1 + x(up1)
        server_t = e1 + 0.5 * ser * up1 + seg_s
        robot_t = t + seg_r
        lat_robot = np.maximum(robot_t, server_t + ser * down + x(down)) + tail_r
        e2 = np.maximum(robot_t, e1) + 0.5 * ser * up2 + x(up2)
        server_m = np.where(up2 > 0, np.maximum(server_t, e2 + 0.5 * ser * up2), server_t) + tail_s
        lat_server = server_m + ser * down + x(down)
        return np.where(loc, t, np.where(mr, lat_robot, lat_server))


def _best(cands: Sequence[Flows], c: "Candidates", times: DeviceTimes, rate: float, key) -> tuple[Flows, Sim]:
    best = None
    for fl in cands:
        sim = simulate(c.graph, times, fl, rate, sums=c.sums(times, fl))
        k = key(sim)
        if best is None or k < best[0]:
            best = (k, fl, sim)
    return best[1], best[2]


def _fastest(cands: Sequence[Flows], c: "Candidates", times: DeviceTimes, rate: float) -> tuple[Flows, Sim]:
    """The plan of least (latency, energy): the near-fastest found for all plans at once, then
    simulated exactly (the same choice as :func:`_best` with that key)."""
    lat = c.latencies(times, cands, rate)
    near = np.flatnonzero(lat <= lat.min() * (1 + 1e-9) + 1e-12)
    return _best([cands[k] for k in near], c, times, rate, lambda s: (s.latency_s, s.energy_j))


def choose(planner: str, cands: Candidates, times: DeviceTimes, rate_mbit: float,
           deadline_s: float = DEADLINE_S) -> tuple[Plan, Sim]:
    """The plan ``planner`` picks at ``rate_mbit`` and its modelled inference."""
    g = cands.graph
    if planner == "local":
        fl = cands.local
        return fl.plan, simulate(g, times, fl, rate_mbit)
    if planner == "all":
        fl = cands.cuts[0]
        return fl.plan, simulate(g, times, fl, rate_mbit)
    layer = [cands.local] + cands.cuts
    if planner == "layer-latency":
        fl, sim = _fastest(layer, cands, times, rate_mbit)
        return fl.plan, sim
    if planner == "layer-energy-deadline":
        fl, sim = _best(layer, cands, times, rate_mbit,
                        lambda s: (s.latency_s > deadline_s, s.energy_j if s.latency_s <= deadline_s else s.latency_s))
        return fl.plan, sim
    if planner == "intra-dp":
        fl, sim = _fastest(layer + cands.splits, cands, times, rate_mbit)
        return fl.plan, sim
    raise ValueError(f"unknown planner {planner!r}; choose one of {', '.join(KNOWN_PLANNERS)}")


@dataclass
class TableRow:
    """One bandwidth level of a plan table."""

    rate_mbit: float
    plan: "Plan | MultiPlan"
    sim: Sim

    def to_dict(self) -> dict:
        return {"rate_mbit": self.rate_mbit, **self.plan.to_dict(), "model_latency_s": self.sim.latency_s,
                "model_energy_j": self.sim.energy_j, "bytes_up": self.sim.bytes_up, "bytes_down": self.sim.bytes_down}


def plan_table(planner: str, cands: Candidates, times: DeviceTimes, grid_mbit: Sequence[float]) -> list[TableRow]:
    """One plan per bandwidth level of ``grid_mbit`` (checked with :func:`check_grid`)."""
    if planner in (LOSS_PLANNER, DE_PLANNER, STREAM_PLANNER):
        from rog.inference.loss import PlanCosts, loss_candidates, loss_choice

        one = [(r, *choose("intra-dp", cands, times, r)) for r in check_grid(grid_mbit)]
        multi = loss_candidates(cands.graph, {p for _, p, _ in one})
        costs = PlanCosts(cands.graph, times)
        if planner == LOSS_PLANNER:
            return [TableRow(r, *loss_choice(costs, multi, p, sim, r)) for r, p, sim in one]
        if planner == STREAM_PLANNER:
            from rog.inference.stream import stream_choice

            seen: dict = {}
            return [TableRow(r, *stream_choice(costs, multi, p, sim, r, seen)) for r, p, sim in one]
        from rog.inference.loss_de import DEEncoding, de_choice

        enc, rows = DEEncoding(cands.graph), []
        for r, p, sim in one:  # DE's evaluations are cached per level only (thousands of plans each)
            start = costs.fastest(multi, r)
            rows.append(TableRow(r, *de_choice(PlanCosts(cands.graph, times), p, sim, start[0] if start else None, r,
                                               encoding=enc)))
        return rows
    return [TableRow(r, *choose(planner, cands, times, r)) for r in check_grid(grid_mbit)]


def plan_of(d: dict) -> "Plan | MultiPlan":
    """A plan from its ``to_dict`` (a per-layer plan has ``bounds``)."""
    if "bounds" in d:
        from rog.inference.loss import MultiPlan

        return MultiPlan.from_dict(d)
    return Plan(int(d["i"]), int(d["j"]), float(d["x"]), d["merge"])


def level_for(table: Sequence[TableRow], estimate_mbit: float) -> TableRow:
    """The row of the highest level not above ``estimate_mbit`` (the lowest level below the grid)."""
    row = table[0]
    for r in table:
        if r.rate_mbit <= estimate_mbit:
            row = r
    return row
