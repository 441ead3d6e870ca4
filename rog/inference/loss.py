"""The paper's plan space (LOSS, Sec. 4.2): several split segments, each with its own row share, and
exchanges of halo rows between them.  Cost model, the search, and the ``intra-dp-loss`` planner's choice
(:func:`loss_choice`).  The steps each side runs (both live processes, :mod:`rog.inference.live_loss`, and
:func:`rog.inference.stream.run_stream` in one process) are :mod:`rog.inference.stream`'s, with one row band a part unless the plan
streams.

``python -m rog.inference.compare loss --model vgg19 --rates 10,50`` prints, per rate, the one-segment
planner's fastest plan and this plan space's (:func:`rog.inference.compare.compare`): the exhaustive search
over resolution stages (:func:`best_multi`) and a local search grown from the one-segment plan (:func:`refine`).

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

import numpy as np

from rog.inference.costmodel import WIRE_FACTOR, DeviceTimes, Sim, _row_bytes, _union_len, xmit_s
from rog.inference.graph import Graph

MAX_BANDS = 16  # the most row bands a streamed plan sends its merge message in

__all__ = ["MAX_BANDS", "MultiPlan", "MultiFlows", "multi_flows", "MultiCosts", "multi_costs", "multi_timeline", "simulate_multi",
           "simulate_multi_sim", "stage_boundaries", "PlanCosts",
           "multi_space", "best_multi", "grown", "refine", "LOSS_SEGMENTS", "loss_candidates", "loss_choice"]


@dataclass(frozen=True)
class MultiPlan:
    """Boundaries ``b_0 .. b_K``, robot row shares ``x_1 .. x_K``, the merge side, and ``bands``: 1 sends
    every exchange once its part is done; ``n >= 2`` streams rows as they finish (halo rows first, the
    merge message in ``n`` bands: :mod:`rog.inference.stream`)."""

    bounds: tuple[int, ...]
    xs: tuple[float, ...]
    merge: str
    bands: int = 1

    def label(self) -> str:
        streamed = f"~{self.bands}" if self.bands > 1 else ""
        return ("loss[" + ",".join(map(str, self.bounds)) + "]x" + "/".join(f"{x:g}" for x in self.xs)
                + f"->{self.merge}{streamed}")

    def to_dict(self) -> dict:
        d = {"bounds": list(self.bounds), "xs": list(self.xs), "merge": self.merge, "label": self.label()}
        if self.bands > 1:
            d["bands"] = self.bands
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "MultiPlan":
        """The inverse of :meth:`to_dict`."""
        return cls(tuple(int(b) for b in d["bounds"]), tuple(float(x) for x in d["xs"]), d["merge"],
                   int(d.get("bands", 1)))


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


def multi_flows(graph: Graph, plan: MultiPlan, seg_ranges=None) -> MultiFlows:
    """Rows and exchanges of ``plan`` (exact halos), or ValueError for an impossible plan
    (``seg_ranges(p, q, lo, hi)``: a cached ``graph.segment(p, q).ranges(lo, hi, H_p)``, optional)."""
    b, xs = plan.bounds, plan.xs
    if len(b) != len(xs) + 1 or not xs or list(b) != sorted(set(b)) or b[0] < 0 or b[-1] > graph.first_global:
        raise ValueError(f"a plan needs increasing local boundaries, one share per segment, got {plan}")
    if plan.merge not in ("robot", "server"):
        raise ValueError(f"merge must be 'robot' or 'server', got {plan.merge!r}")
    if not 1 <= plan.bands <= MAX_BANDS:
        raise ValueError(f"bands must be 1 .. {MAX_BANDS}, got {plan.bands}")
    a_list, rr, sr, ups, downs = [], [], [], [], []
    have_r = (0, graph.h_at(b[0]))  # rows of the current boundary each side holds
    have_s = (0, 0)
    for k, x in enumerate(xs):
        p, q = b[k], b[k + 1]
        hq = graph.h_at(q)
        a = int(round(x * hq))
        if not 0 < a < hq:
            raise ValueError(f"x={x} gives {a} of {hq} rows at boundary {q}: nothing to split")
        if seg_ranges is None:
            seg = graph.segment(p, q)
            r, s = seg.ranges(0, a, graph.h_at(p)), seg.ranges(a, hq, graph.h_at(p))
        else:
            r, s = seg_ranges(p, q, 0, a), seg_ranges(p, q, a, hq)
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


@dataclass(frozen=True)
class MultiCosts:
    """The bandwidth-independent part of a plan's timeline: the robot's head seconds; per segment the
    bytes up and down before it and each side's compute seconds; the merge message, the output and the
    merge side's tail seconds."""

    head_s: float
    segs: tuple[tuple[int, int, float, float], ...]  # (up bytes, down bytes, robot s, server s)
    merge: str
    merge_bytes: int
    out_bytes: int
    tail_s: float


def multi_costs(graph: Graph, times: DeviceTimes, fl: MultiFlows, seg_s=None) -> MultiCosts:
    """:class:`MultiCosts` of ``fl`` under ``times`` (``seg_s(start, rows, side)``: a cached ``_seg_s``, optional)."""
    b, n = fl.plan.bounds, len(graph)
    seg_s = seg_s or (lambda start, rows, side: _seg_s(graph, times, start, rows, side))
    segs = []
    for k in range(len(fl.plan.xs)):
        rb = _row_bytes(graph, b[k])
        (u0, u1), (d0, d1) = fl.up_rows[k], fl.down_rows[k]
        segs.append(((u1 - u0) * rb, (d1 - d0) * rb, seg_s(b[k], fl.robot_rows[k], "robot"),
                     seg_s(b[k], fl.server_rows[k], "server")))
    side = times.robot_s if fl.plan.merge == "robot" else times.server_s
    return MultiCosts(sum(times.robot_s(u) for u in range(b[0])), tuple(segs), fl.plan.merge, fl.merge_bytes,
                      fl.out_bytes, sum(side(u) for u in range(b[-1], n)))


def multi_timeline(c: MultiCosts, ser_s_per_byte: float, msg_overhead_s: float, rate_mbit: float,
                   iv: list | None = None, stream: bool = False) -> float:
    """The latency of a plan's timeline (two compute clocks, one FIFO link per direction; each side sends
    as soon as its part is done); with ``iv`` a list, the robot's intervals ``(start, end, "compute" |
    "transmit")`` are appended to it (a message counts as transmit for the robot in either direction).

    ``stream``: an optimistic bound on sending rows as they finish (not what the executors do).  A message
    made of the *first* rows its producer computes (the server's rows sent down, either merge message) may
    start when its producing part starts and ends once both that part and its whole transfer are done, with
    no per-band overhead; the robot's halo rows for the server are the last rows it computes (top down) and
    the final output comes from a global tail, so those two are sent as without streaming."""
    ser, ov = ser_s_per_byte, msg_overhead_s
    up_free = down_free = 0.0

    def send(t_ready: float, nbytes: int, free: float, t_from: float | None = None) -> tuple[float, float]:
        # (arrival usable, link free); t_from: when the producing part started (streamed messages only)
        if stream and t_from is not None:
            start = max(t_from, free) + 0.5 * ser * nbytes
            end = max(start + ov + xmit_s(nbytes, rate_mbit), t_ready)
        else:
            start = max(t_ready, free) + 0.5 * ser * nbytes
            end = start + ov + xmit_s(nbytes, rate_mbit)
        if iv is not None:
            iv.append((start, end, "transmit"))
        return end + 0.5 * ser * nbytes, end

    def compute(t: float, s: float) -> float:
        if iv is not None and s > 0:
            iv.append((t, t + s, "compute"))
        return t + s

    robot, server = compute(0.0, c.head_s), 0.0
    robot_from = server_from = None  # when each side's latest part started
    for up, down, rob_s, srv_s in c.segs:
        # both sides send before they wait for what they receive (as the executors do)
        up_arr = down_arr = 0.0
        if up:
            up_arr, up_free = send(robot, up, up_free)
        if down:
            down_arr, down_free = send(server, down, down_free, server_from)
        server, robot = max(server, up_arr), max(robot, down_arr)
        robot_from, server_from = robot, server
        robot = compute(robot, rob_s)
        server += srv_s
    if c.merge == "robot":
        arr, _ = send(server, c.merge_bytes, down_free, server_from)
        return compute(max(robot, arr), c.tail_s)
    arr, _ = send(robot, c.merge_bytes, up_free, robot_from)
    server = max(server, arr) + c.tail_s
    arr, _ = send(server, c.out_bytes, down_free)
    return arr


def simulate_multi(graph: Graph, times: DeviceTimes, fl: MultiFlows, rate_mbit: float, stream: bool = False) -> float:
    """Modelled latency of ``fl.plan`` at ``rate_mbit`` (both directions); ``stream``: the row-band bound of
    :func:`multi_timeline`."""
    return multi_timeline(multi_costs(graph, times, fl), times.ser_s_per_byte, times.msg_overhead_s, rate_mbit,
                          stream=stream)


def simulate_multi_sim(graph: Graph, times: DeviceTimes, fl: MultiFlows, rate_mbit: float) -> Sim:
    """:func:`simulate_multi` as a :class:`rog.inference.costmodel.Sim` (the robot's intervals, so the
    modelled energy; the components; bytes each way)."""
    c = multi_costs(graph, times, fl)
    iv: list = []
    lat = multi_timeline(c, times.ser_s_per_byte, times.msg_overhead_s, rate_mbit, iv)
    robot_s = c.head_s + sum(s[2] for s in c.segs) + (c.tail_s if c.merge == "robot" else 0.0)
    server_s = sum(s[3] for s in c.segs) + (c.tail_s if c.merge == "server" else 0.0)
    up = sum(s[0] for s in c.segs) + (c.merge_bytes if c.merge == "server" else 0)
    down = sum(s[1] for s in c.segs) + (c.merge_bytes if c.merge == "robot" else c.out_bytes)
    return Sim(lat, robot_s, server_s, _union_len([(a, b) for a, b, k in iv if k == "transmit"]), iv, up, down)


def stage_boundaries(graph: Graph) -> list[int]:
    """Exchange points searched: boundary 0 and the last boundary of every height among the local units
    whose tensor is no larger than the image (a share per resolution stage, as per-layer splits)."""
    last: dict[int, int] = {}
    for u in _transfer_points(graph):
        last[graph.h_at(u)] = u
    return sorted({0, *last.values()})


class PlanCosts:
    """:class:`MultiCosts` of plans of one graph under one profile, computed once per plan (None: an
    impossible plan); :meth:`latency` is then a few operations per rate."""

    def __init__(self, graph: Graph, times: DeviceTimes) -> None:
        self.graph, self.times = graph, times
        self._costs: dict[MultiPlan, MultiCosts | None] = {}
        self._ranges: dict[tuple, tuple] = {}
        self._chains: dict[tuple, object] = {}
        self._secs: dict[tuple, float] = {}
        self._arrays: dict[int, tuple] = {}

    def _seg_ranges(self, p: int, q: int, lo: int, hi: int):
        key = (p, q, lo, hi)
        if key not in self._ranges:
            if (p, q) not in self._chains:
                self._chains[(p, q)] = self.graph.segment(p, q)
            self._ranges[key] = tuple(self._chains[(p, q)].ranges(lo, hi, self.graph.h_at(p)))
        return self._ranges[key]

    def _seg_s(self, start: int, rows, side: str) -> float:
        key = (start, rows, side)
        if key not in self._secs:
            self._secs[key] = _seg_s(self.graph, self.times, start, rows, side)
        return self._secs[key]

    def costs(self, plan: MultiPlan) -> MultiCosts | None:
        if plan not in self._costs:
            try:
                self._costs[plan] = multi_costs(self.graph, self.times, multi_flows(self.graph, plan, self._seg_ranges),
                                                self._seg_s)
            except ValueError:
                self._costs[plan] = None
        return self._costs[plan]

    def fastest(self, plans: Sequence[MultiPlan], rate_mbit: float) -> tuple[MultiPlan, float] | None:
        """The plan of ``plans`` with the least :meth:`latency` at ``rate_mbit`` (evaluated for all at once,
        the same timeline as :func:`multi_timeline`); None when none is possible."""
        best = self.ranked(plans, rate_mbit, 1)
        return best[0] if best else None

    def ranked(self, plans: Sequence[MultiPlan], rate_mbit: float, n: int) -> list[tuple[MultiPlan, float]]:
        """The ``n`` possible plans of ``plans`` with the least :meth:`latency` at ``rate_mbit``, fastest first."""
        key = id(plans)
        if key not in self._arrays:
            self._arrays[key] = (plans, _pack_costs([(p, self.costs(p)) for p in plans]))
        out: list[tuple[MultiPlan, float]] = []
        for group, arrays in self._arrays[key][1]:
            lat = _timelines(arrays, self.times.ser_s_per_byte, self.times.msg_overhead_s, rate_mbit)
            out += [(group[k], float(lat[k])) for k in np.argsort(lat, kind="stable")[:n]]
        return sorted(out, key=lambda o: o[1])[:n]

    def latency(self, plan: MultiPlan, rate_mbit: float) -> float:
        """:func:`simulate_multi` of ``plan`` (infinity for an impossible plan)."""
        c = self.costs(plan)
        if c is None:
            return float("inf")
        return multi_timeline(c, self.times.ser_s_per_byte, self.times.msg_overhead_s, rate_mbit)


def _pack_costs(pairs) -> list[tuple[list[MultiPlan], dict]]:
    """Possible plans grouped by segment count, their :class:`MultiCosts` as arrays (one row a plan)."""
    by_k: dict[int, list] = {}
    for plan, c in pairs:
        if c is not None:
            by_k.setdefault(len(c.segs), []).append((plan, c))
    out = []
    for _, items in sorted(by_k.items()):
        cs = [c for _, c in items]
        seg = np.array([c.segs for c in cs], dtype=float)  # (plans, segments, 4)
        out.append(([p for p, _ in items], {
            "head": np.array([c.head_s for c in cs]), "up": seg[:, :, 0], "down": seg[:, :, 1], "rob": seg[:, :, 2],
            "srv": seg[:, :, 3], "merge_robot": np.array([c.merge == "robot" for c in cs]),
            "merge": np.array([c.merge_bytes for c in cs], dtype=float), "out": np.array([c.out_bytes for c in cs], dtype=float),
            "tail": np.array([c.tail_s for c in cs])}))
    return out


def _timelines(a: dict, ser: float, ov: float, rate_mbit: float) -> np.ndarray:
    """:func:`multi_timeline` of every row of ``a`` (:func:`_pack_costs`) at once."""
    per_byte = WIRE_FACTOR * 8.0 / (max(rate_mbit, 1e-6) * 1e6)

    def send(ready, nbytes, free):  # (arrival usable, link free), as multi_timeline's send
        end = np.maximum(ready, free) + 0.5 * ser * nbytes + ov + np.where(nbytes > 0, nbytes * per_byte, 0.0)
        return end + 0.5 * ser * nbytes, end

    robot, server = a["head"].copy(), np.zeros_like(a["head"])
    up_free, down_free = np.zeros_like(robot), np.zeros_like(robot)
    for k in range(a["up"].shape[1]):
        up, down = a["up"][:, k], a["down"][:, k]
        up_arr, end = send(robot, up, up_free)
        up_free = np.where(up > 0, end, up_free)
        down_arr, end = send(server, down, down_free)  # sent before the server waits for the robot's rows
        down_free = np.where(down > 0, end, down_free)
        server = np.where(up > 0, np.maximum(server, up_arr), server)
        robot = np.where(down > 0, np.maximum(robot, down_arr), robot)
        robot, server = robot + a["rob"][:, k], server + a["srv"][:, k]
    arr, _ = send(server, a["merge"], down_free)
    lat_robot = np.maximum(robot, arr) + a["tail"]
    arr, _ = send(robot, a["merge"], up_free)
    arr, _ = send(np.maximum(server, arr) + a["tail"], a["out"], down_free)
    return np.where(a["merge_robot"], lat_robot, arr)


def multi_space(graph: Graph, max_segments: int = 3, shares: Sequence[float] = tuple(k / 10 for k in range(1, 10))):
    """Every plan of :func:`best_multi`'s search: boundaries of :func:`stage_boundaries`, 1 to
    ``max_segments`` segments, every share in ``shares`` per segment, either merge side."""
    cands = stage_boundaries(graph)
    for k in range(1, max_segments + 1):
        for bounds in itertools.combinations(cands, k + 1):
            for xs in itertools.product(shares, repeat=k):
                for merge in ("robot", "server"):
                    yield MultiPlan(bounds, xs, merge)


def best_multi(graph: Graph, times: DeviceTimes, rate_mbit: float, max_segments: int = 3,
               shares: Sequence[float] = tuple(k / 10 for k in range(1, 10)),
               costs: PlanCosts | None = None) -> tuple[MultiPlan, float]:
    """The fastest plan of :func:`multi_space` by :func:`simulate_multi` (``costs``: a cache to reuse)."""
    costs = costs or PlanCosts(graph, times)
    best: tuple[float, MultiPlan] | None = None
    for plan in multi_space(graph, max_segments, shares):
        lat = costs.latency(plan, rate_mbit)
        if lat < float("inf") and (best is None or lat < best[0]):
            best = (lat, plan)
    if best is None:
        raise ValueError("no split plan exists for this graph")
    return best[1], best[0]


def _transfer_points(graph: Graph) -> list[int]:
    """Boundaries of local units whose tensor is no larger than the image (the paper's set Pi)."""
    limit = graph.bytes_at(0)
    return [u for u in range(graph.first_global + 1) if graph.bytes_at(u) <= limit]


def grown(graph: Graph, plan: MultiPlan, shares: Sequence[float] = tuple(k / 20 for k in range(1, 20))) -> list[MultiPlan]:
    """Every plan one exchange point longer than ``plan``: any boundary of the set Pi inside a segment
    (splitting it in two) or after the last one (adding a segment), every share in ``shares`` for the new
    part, either merge side."""
    b, xs = plan.bounds, plan.xs
    out = []
    for m in _transfer_points(graph):
        if m in b or m < b[0]:
            continue
        k = sum(1 for u in b if u < m)  # m lies inside segment k-1 (between b[k-1] and b[k]), or after the last
        for x in shares:
            bounds, new_xs = (b[:k] + (m,) + b[k:], xs[:k - 1] + (x,) + xs[k - 1:]) if k < len(b) else (b + (m,), xs + (x,))
            out += [MultiPlan(bounds, new_xs, merge) for merge in ("robot", "server")]
    return out


def refine(graph: Graph, times: DeviceTimes, rate_mbit: float, plan: MultiPlan, rounds: int = 2,
           shares: Sequence[float] = tuple(k / 20 for k in range(1, 20)),
           costs: PlanCosts | None = None) -> tuple[MultiPlan, float]:
    """Local search from ``plan``: each round tries every plan of :func:`grown` and keeps the fastest;
    stops when nothing helps."""
    costs = costs or PlanCosts(graph, times)
    best = (costs.latency(plan, rate_mbit), plan)
    for _ in range(rounds):
        start = best
        for cand in grown(graph, start[1], shares):
            lat = costs.latency(cand, rate_mbit)
            if lat < best[0]:
                best = (lat, cand)
        if best is start:
            break
    return best[1], best[0]


LOSS_SEGMENTS = 2  # the exhaustive part of the LOSS planner's candidates: 1-2 segments at shares 0.1 .. 0.9


def loss_candidates(graph: Graph, one_plans, max_segments: int = LOSS_SEGMENTS) -> list[MultiPlan]:
    """The per-layer plans the ``intra-dp-loss`` planner compares at every level: :func:`multi_space`
    (``max_segments``, shares 0.1 .. 0.9) and every plan :func:`grown` from each one-segment split plan
    of ``one_plans`` (the ``intra-dp`` table's plans)."""
    out = dict.fromkeys(multi_space(graph, max_segments))
    for one in one_plans:
        if 0.0 < one.x < 1.0:
            out.update(dict.fromkeys(grown(graph, MultiPlan((one.i, one.j), (one.x,), one.merge))))
    return list(out)


def loss_choice(costs: PlanCosts, cands: Sequence[MultiPlan], one, one_sim, rate_mbit: float):
    """The LOSS planner's plan at ``rate_mbit``: the ``intra-dp`` plan ``one`` (modelled ``one_sim``) or,
    where it is modelled faster, the fastest of ``cands`` (:func:`loss_candidates`); ``(plan, sim)``."""
    best = costs.fastest(cands, rate_mbit)
    if best is not None and best[1] < one_sim.latency_s * (1 - 1e-9):
        g = costs.graph
        return best[0], simulate_multi_sim(g, costs.times, multi_flows(g, best[0]), rate_mbit)
    return one, one_sim
