"""The planners: which plan to run at a given bandwidth, and plan tables over a bandwidth grid.

* ``local``: everything on the robot.
* ``all``: all-offload (send the image, the server computes, the output comes back).
* ``layer-latency`` (DSCCS-like): the layer partition (cut at any boundary, local included) with
  the lowest modelled latency.
* ``layer-energy-deadline`` (SPSO-GA-like): the layer partition with the lowest modelled robot
  energy among those meeting the deadline (1 s: a 1 Hz control loop); the fastest if none does.
* ``intra-dp``: the lowest modelled latency over the layer partitions and every split plan
  (:class:`rog.inference.costmodel.Plan`): a split segment ``[i, j)`` of local units, the robot's
  row share ``x`` in {0.1, ..., 0.9} and either merge side.  Transfers happen only at boundaries
  whose tensor is no larger than the input (the paper's set Pi, Sec. 4.2).  An exhaustive grid
  (deterministic) stands in for the paper's differential evolution (the notes' resolution 2).

The "-like" baselines are re-implementations of the objectives, not the original algorithms.
A plan table (:func:`plan_table`) holds one plan per bandwidth level; at run time the estimate is
rounded down to a level (:func:`level_for`, conservative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from rog.inference.costmodel import DeviceTimes, Flows, Plan, Sim, compute_sums, cut_plan, flows, local_plan, simulate
from rog.inference.graph import Graph

__all__ = ["PLANNERS", "DEADLINE_S", "SPLIT_SHARES", "Candidates", "choose", "plan_table", "level_for",
           "check_grid", "DEFAULT_GRID_MBIT", "TableRow"]

PLANNERS = ("local", "all", "layer-latency", "layer-energy-deadline", "intra-dp")
DEADLINE_S = 1.0  # SPSO-GA's 1 Hz deadline (the released code's "fix" mode)
SPLIT_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# Bandwidth levels of the plan tables (Mbit/s): the released code planned for 0..30 MB/s in 1 MB/s
# steps; here 1-240 Mbit/s, denser at the low end where the best plan changes most.
DEFAULT_GRID_MBIT = (1, 2, 3, 5, 7, 10, 15, 20, 25, 30, 40, 50, 60, 70, 80, 100, 120, 140, 160, 200, 240)


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


def _best(cands: Sequence[Flows], c: "Candidates", times: DeviceTimes, rate: float, key) -> tuple[Flows, Sim]:
    best = None
    for fl in cands:
        sim = simulate(c.graph, times, fl, rate, sums=c.sums(times, fl))
        k = key(sim)
        if best is None or k < best[0]:
            best = (k, fl, sim)
    return best[1], best[2]


def choose(planner: str, cands: Candidates, times: DeviceTimes, rate_mbit: float,
           deadline_s: float = DEADLINE_S) -> tuple[Plan, Sim]:
    """The plan ``planner`` picks at ``rate_mbit`` and its modelled inference."""
    g = cands.graph
    lat = lambda s: (s.latency_s, s.energy_j)  # noqa: E731
    if planner == "local":
        fl = cands.local
        return fl.plan, simulate(g, times, fl, rate_mbit)
    if planner == "all":
        fl = cands.cuts[0]
        return fl.plan, simulate(g, times, fl, rate_mbit)
    layer = [cands.local] + cands.cuts
    if planner == "layer-latency":
        fl, sim = _best(layer, cands, times, rate_mbit, lat)
        return fl.plan, sim
    if planner == "layer-energy-deadline":
        fl, sim = _best(layer, cands, times, rate_mbit,
                        lambda s: (s.latency_s > deadline_s, s.energy_j if s.latency_s <= deadline_s else s.latency_s))
        return fl.plan, sim
    if planner == "intra-dp":
        fl, sim = _best(layer + cands.splits, cands, times, rate_mbit, lat)
        return fl.plan, sim
    raise ValueError(f"unknown planner {planner!r}; choose one of {', '.join(PLANNERS)}")


@dataclass
class TableRow:
    """One bandwidth level of a plan table."""

    rate_mbit: float
    plan: Plan
    sim: Sim

    def to_dict(self) -> dict:
        return {"rate_mbit": self.rate_mbit, **self.plan.to_dict(), "model_latency_s": self.sim.latency_s,
                "model_energy_j": self.sim.energy_j, "bytes_up": self.sim.bytes_up, "bytes_down": self.sim.bytes_down}


def plan_table(planner: str, cands: Candidates, times: DeviceTimes, grid_mbit: Sequence[float]) -> list[TableRow]:
    """One plan per bandwidth level of ``grid_mbit`` (checked with :func:`check_grid`)."""
    return [TableRow(r, *choose(planner, cands, times, r)) for r in check_grid(grid_mbit)]


def level_for(table: Sequence[TableRow], estimate_mbit: float) -> TableRow:
    """The row of the highest level not above ``estimate_mbit`` (the lowest level below the grid)."""
    row = table[0]
    for r in table:
        if r.rate_mbit <= estimate_mbit:
            row = r
    return row
