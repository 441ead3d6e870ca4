"""The paper's solver for the per-layer plan space (LOSS, Sec. 4.2): differential evolution.

Intra-DP searches its per-layer plans with differential evolution, started from everything on the robot,
once per bandwidth level.  Here :func:`de_search` runs ``scipy.optimize.differential_evolution`` over the
:class:`rog.inference.loss.MultiPlan` space of one graph, minimising the cost model's latency
(:class:`rog.inference.loss.PlanCosts`), with a fixed seed and a bounded budget.

The encoding (:class:`DEEncoding`): every candidate exchange point ``m`` (a boundary of the set Pi,
:func:`rog.inference.loss._transfer_points`, with at least two rows) has two genes in ``[0, 1]``: *on*
(``>= 0.5``: ``m`` is a boundary) and *rows* (the robot's rows of boundary ``m`` when it ends a segment:
``1 + floor(g (H_m - 1))``, so always 1 .. ``H_m - 1``); one more gene picks the merge side.  The first
boundary switched on is ``b_0`` (the robot's head), each later one ends a segment; with more than
``max_segments + 1`` switched on, those with the largest *on* genes are kept; with fewer than two, the
plan is everything on the robot (the paper's starting point).  Shares are the exact row fractions
rounded to thousandths (what the ``MPLAN`` announcement carries), which round back to the same rows.
So every gene vector decodes to a valid plan (tested).

The initial population holds the all-on-robot plan, the given starting plans (the fixed candidate
search's best) and Latin-hypercube samples; selection in DE never loses its best member, so the result
is never slower on the cost model than any plan it was started from.

``python -m rog.inference.compare de --model vgg19 --rates 5,10,20,50,100 [--times P.json]`` prints, per
rate, the one-segment planner's latency, the fixed candidate searches' (the ``intra-dp-loss`` planner's and
:func:`rog.inference.compare.compare`'s) and DE's, with DE's planning seconds, and the one-segment and DE plans'
latencies under the row-band bound (``*_streamed_s``: rows sent as they finish, optimistically).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rog.inference.costmodel import DeviceTimes, flows, local_plan, simulate
from rog.inference.graph import Graph
from rog.inference.loss import MultiPlan, PlanCosts, _transfer_points

__all__ = ["DE_MAXITER", "DE_POPULATION", "DE_SEED", "DE_RECOMBINATION", "DE_STRATEGY", "MAX_DE_SEGMENTS", "DEEncoding", "DEResult", "de_search",
           "de_choice"]

# The budget: 64 members x 150 generations (9,664 evaluations, 1-2 s per bandwidth level on this 2-core
# machine); best1bin with crossover 0.5 did best over VGG19 and DenseNet at 5-100 Mbit/s of the strategies
# best/rand/current-to-best1bin x crossover 0.2/0.5/0.9 (docs/intradp.md).
DE_MAXITER = 150  # generations per bandwidth level
DE_POPULATION = 64  # members (scipy's popsize is replaced by the explicit initial population)
DE_SEED = 0
DE_RECOMBINATION = 0.5  # scipy's crossover probability
DE_STRATEGY = "best1bin"
# scipy stops when the members' latencies have no spread (std <= atol + tol * mean); a collapsed population
# stopped the tiny brute-force test's search short of the optimum, so every level gets the whole budget.
_NO_CONVERGENCE_STOP = -1.0
MAX_DE_SEGMENTS = 16  # the MPLAN announcement's limit (rog.inference.live_loss.MAX_SEGMENTS)


class DEEncoding:
    """Gene vectors <-> plans of one graph (see the module docstring); ``None`` is everything on the robot."""

    def __init__(self, graph: Graph, points: Sequence[int] | None = None, max_segments: int = MAX_DE_SEGMENTS) -> None:
        pts = _transfer_points(graph) if points is None else sorted(set(points))
        self.graph = graph
        self.points = tuple(p for p in pts if graph.h_at(p) >= 2 and 0 <= p <= graph.first_global)
        self.heights = tuple(graph.h_at(p) for p in self.points)
        self.max_segments = max_segments
        if len(self.points) < 2 or max_segments < 1:
            raise ValueError("a per-layer plan needs at least two exchange points and one segment")

    @property
    def size(self) -> int:
        """Genes per vector: an on and a rows gene per point, and the merge gene."""
        return 2 * len(self.points) + 1

    def decode(self, genes: Sequence[float]) -> MultiPlan | None:
        """The plan of ``genes`` (None: everything on the robot)."""
        n = len(self.points)
        on = np.clip(np.asarray(genes[:n], dtype=float), 0.0, 1.0)
        rows = np.clip(np.asarray(genes[n:2 * n], dtype=float), 0.0, 1.0)
        active = [k for k in range(n) if on[k] >= 0.5]
        if len(active) > self.max_segments + 1:
            active = sorted(sorted(active, key=lambda k: (-on[k], k))[:self.max_segments + 1])
        if len(active) < 2:
            return None
        xs = []
        for k in active[1:]:
            h = self.heights[k]
            a = min(h - 1, 1 + int(rows[k] * (h - 1)))
            xs.append(round(a / h, 3))
        merge = "server" if genes[2 * n] >= 0.5 else "robot"
        return MultiPlan(tuple(self.points[k] for k in active), tuple(xs), merge)

    def encode(self, plan: MultiPlan | None) -> np.ndarray:
        """A gene vector that decodes to ``plan``'s boundaries, rows and merge side (ValueError when a
        boundary is not one of the points or the plan has too many segments)."""
        n = len(self.points)
        g = np.full(self.size, 0.25)
        g[n:2 * n] = 0.5
        if plan is None:
            return g
        if len(plan.xs) > self.max_segments:
            raise ValueError(f"{plan.label()} has more than {self.max_segments} segments")
        for idx, b in enumerate(plan.bounds):
            if b not in self.points:
                raise ValueError(f"boundary {b} of {plan.label()} is not an exchange point of this encoding")
            k = self.points.index(b)
            g[k] = 0.75
            if idx > 0:
                h = self.heights[k]
                a = min(h - 1, max(1, int(round(plan.xs[idx - 1] * h))))
                g[n + k] = (a - 0.5) / (h - 1)
        g[2 * n] = 0.75 if plan.merge == "server" else 0.25
        return g


@dataclass(frozen=True)
class DEResult:
    """DE's plan (None: everything on the robot), its modelled latency, the evaluations and seconds spent."""

    plan: MultiPlan | None
    latency_s: float
    evaluations: int
    generations: int
    planning_s: float


def de_search(graph: Graph, times: DeviceTimes, rate_mbit: float, starts: Sequence[MultiPlan] = (),
              maxiter: int = DE_MAXITER, population: int = DE_POPULATION, seed: int = DE_SEED,
              costs: PlanCosts | None = None, encoding: DEEncoding | None = None,
              recombination: float = DE_RECOMBINATION, strategy: str = DE_STRATEGY) -> DEResult:
    """Differential evolution over per-layer plans at ``rate_mbit``, from everything on the robot, the
    plans of ``starts`` (those the encoding can hold) and Latin-hypercube samples: ``population``
    members, at most ``maxiter`` generations, ``seed`` fixed (deterministic)."""
    from scipy.optimize import differential_evolution
    from scipy.stats import qmc

    t0 = time.perf_counter()
    enc = encoding or DEEncoding(graph)
    costs = costs or PlanCosts(graph, times)
    local_s = simulate(graph, times, flows(graph, local_plan(graph)), rate_mbit).latency_s

    def latency(genes: np.ndarray) -> float:
        plan = enc.decode(genes)
        return local_s if plan is None else costs.latency(plan, rate_mbit)

    seeded = [enc.encode(None)]
    for p in starts:
        try:
            seeded.append(enc.encode(p))
        except ValueError:
            continue
    population = max(population, len(seeded) + 5)
    rest = qmc.LatinHypercube(d=enc.size, seed=seed).random(population - len(seeded))
    init = np.vstack([np.array(seeded), rest])
    res = differential_evolution(latency, [(0.0, 1.0)] * enc.size, maxiter=maxiter, init=init, seed=seed,
                                 polish=False, tol=0.0, atol=_NO_CONVERGENCE_STOP, updating="deferred",
                                 recombination=recombination, strategy=strategy)
    plan = enc.decode(res.x)
    return DEResult(plan, float(res.fun), int(res.nfev), int(res.nit), time.perf_counter() - t0)


def de_choice(costs: PlanCosts, one, one_sim, start: MultiPlan | None, rate_mbit: float, **kw):
    """The ``intra-dp-de`` planner's plan at ``rate_mbit``: the ``intra-dp`` plan ``one`` (modelled
    ``one_sim``) or, where it is modelled faster, DE's plan started from ``start`` (the fixed candidate
    search's best per-layer plan) and the one-segment plan itself; ``(plan, sim)``."""
    from rog.inference.loss import multi_flows, simulate_multi_sim

    g = costs.graph
    starts = [p for p in (start,) if p is not None]
    if 0.0 < one.x < 1.0:
        starts.append(MultiPlan((one.i, one.j), (round(one.x, 3),), one.merge))
    res = de_search(g, costs.times, rate_mbit, starts, costs=costs, **kw)
    if res.plan is not None and res.latency_s < one_sim.latency_s * (1 - 1e-9):
        return res.plan, simulate_multi_sim(g, costs.times, multi_flows(g, res.plan), rate_mbit)
    return one, one_sim
