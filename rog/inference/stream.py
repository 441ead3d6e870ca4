"""Rows sent as they finish (LOSS, Sec. 4.2): a per-layer plan whose parts are computed in row bands.

A :class:`rog.inference.loss.MultiPlan` with ``bands = n >= 2`` computes every part in bands of its output
rows, ordered so that the rows the other side needs next exist first, and sends each band's share of the
next message the moment the band is done (the link carries it while the side computes on):

* the robot's head (units ``0 .. b_0-1``, when ``b_0 > 0``): the rows of boundary ``b_0`` the server needs
  first (they are the head's last rows), then the rest;
* a part of segment ``k`` followed by an exchange: the robot's rows the server needs next are its *last*
  rows, the server's rows the robot needs its *first*; that band first, then the rest;
* the last segment's part on the side that does not merge: the merge message in ``n`` bands of about equal
  rows, top down.

Each band is computed through the chain's row ranges from the rows the side holds
(:meth:`rog.inference.graph.Chain.ranges`), so rows two bands both need are computed twice: the halo
recomputation, paced and modelled at each band's measured row share.  Each band is its own message (one
``msg_overhead_s`` each).  ``bands = 1`` is the plan as :mod:`rog.inference.loss` runs it, and
:func:`stream_timeline` of it equals :func:`rog.inference.loss.multi_timeline` (tested).

The executors: :func:`run_stream` (one process, the correctness check) and both live processes
(:mod:`rog.inference.live_loss`) run :func:`head_bands` / :func:`part_bands` through :func:`run_bands`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from rog.inference.costmodel import DeviceTimes, Sim, _row_bytes, _union_len, xmit_s
from rog.inference.graph import Graph
from rog.inference.loss import MultiFlows, MultiPlan, multi_flows

__all__ = ["Rows", "head_bands", "part_bands", "message_rows", "pieces", "run_bands", "join_bands", "run_stream", "StreamCosts",
           "stream_costs", "stream_timeline", "simulate_stream_sim", "streamed", "STREAM_BANDS", "STREAM_TOP",
           "stream_choice"]

Rows = tuple  # (lo, hi): rows [lo, hi) of a boundary
Emit = Callable[[torch.Tensor, int], None]  # (rows of the next message, index of their first row)


def _even(lo: int, hi: int, n: int) -> list[Rows]:
    """``[lo, hi)`` in ``min(n, hi - lo)`` bands of about equal rows, top down."""
    n = max(1, min(n, hi - lo))
    cuts = [lo + (hi - lo) * i // n for i in range(n + 1)]
    return [(cuts[i], cuts[i + 1]) for i in range(n)]


def _first(band: Rows, whole: Rows) -> list[Rows]:
    """``whole`` computed as ``band`` (inside it) first, then the rest of it, top down."""
    (b0, b1), (w0, w1) = band, whole
    if b1 <= b0 or (b0 <= w0 and b1 >= w1):
        return [whole]
    return [band] + [r for r in ((w0, b0), (b1, w1)) if r[1] > r[0]]


def head_bands(graph: Graph, fl: MultiFlows) -> list[Rows]:
    """Bands of boundary ``b_0`` the robot's head computes, in order (none when ``b_0 = 0``)."""
    b0 = fl.plan.bounds[0]
    if b0 == 0:
        return []
    whole = (0, graph.h_at(b0))
    return [whole] if fl.plan.bands <= 1 else _first(fl.up_rows[0], whole)


def part_bands(graph: Graph, fl: MultiFlows, k: int, side: str) -> list[Rows]:
    """Bands of boundary ``b_{k+1}`` that ``side``'s part of segment ``k`` computes, in order."""
    hq, a = graph.h_at(fl.plan.bounds[k + 1]), fl.a[k]
    whole = (0, a) if side == "robot" else (a, hq)
    if fl.plan.bands <= 1:
        return [whole]
    msg = message_rows(graph, fl, k, side)
    if msg == whole and k == len(fl.plan.xs) - 1:
        return _even(whole[0], whole[1], fl.plan.bands)
    return _first(msg, whole)


def message_rows(graph: Graph, fl: MultiFlows, k: int, side: str) -> Rows:
    """Rows that ``side`` sends after its part of segment ``k``: rows of ``b_{k+1}`` for the next exchange,
    or the merge message after the last segment (``k = -1``: the robot's head, the rows of ``b_0`` the
    server needs); ``(0, 0)`` for nothing."""
    last = len(fl.plan.xs) - 1
    if k < 0:
        return fl.up_rows[0]
    if k < last:
        return fl.up_rows[k + 1] if side == "robot" else fl.down_rows[k + 1]
    if side == fl.plan.merge:
        return (0, 0)
    return (0, fl.a[-1]) if side == "robot" else (fl.a[-1], graph.h_at(fl.plan.bounds[-1]))


def _cut(band: Rows, msg: Rows) -> Rows:
    lo, hi = max(band[0], msg[0]), min(band[1], msg[1])
    return (lo, hi) if hi > lo else (0, 0)


def pieces(graph: Graph, fl: MultiFlows, k: int, side: str) -> int:
    """How many messages carry what ``side`` sends after its part of segment ``k`` (``k = -1``: the head;
    before segment 0 with ``b_0 = 0`` the input goes in one message)."""
    msg = message_rows(graph, fl, k, side)
    if msg[1] <= msg[0]:
        return 0
    bands = head_bands(graph, fl) if k < 0 else part_bands(graph, fl, k, side)
    if not bands:
        return 1
    return sum(1 for b in bands if _cut(b, msg)[1] > 0) if fl.plan.bands > 1 else 1


def run_bands(graph: Graph, p: int, q: int, t: torch.Tensor, t_lo: int, bands: Sequence[Rows], msg: Rows,
              emit: Emit | None, on_unit=None) -> torch.Tensor:
    """Units ``p .. q-1`` from ``t`` (rows from ``t_lo`` of boundary ``p``) band by band; after each band its
    rows of ``msg`` go to ``emit`` (one band: the message once the part is done); returns every band's rows
    of ``b_q`` in row order."""
    from rog.inference.split import run_units

    chain, hp = graph.segment(p, q), graph.h_at(p)
    outs = []
    for lo, hi in bands:
        out = run_units(graph, p, q, t, t_lo, chain.ranges(lo, hi, hp)[1:], on_unit)
        outs.append((lo, out))
        m0, m1 = _cut((lo, hi), msg)
        if emit is not None and m1 > m0:
            emit(out[:, :, m0 - lo:m1 - lo].contiguous(), m0)
    outs.sort(key=lambda o: o[0])
    return outs[0][1] if len(outs) == 1 else torch.cat([o for _, o in outs], 2)


def join_bands(parts: list) -> tuple[torch.Tensor, int]:
    """Row bands ``(tensor, first row)`` of one message joined in row order, and the first row."""
    parts.sort(key=lambda p: p[1])
    return (parts[0][0] if len(parts) == 1 else torch.cat([p[0] for p in parts], 2)), parts[0][1]


def streamed(plan: MultiPlan) -> bool:
    """Whether ``plan`` sends rows as they finish."""
    return plan.bands > 1


def run_stream(graph: Graph, plan: MultiPlan, image: torch.Tensor) -> torch.Tensor:
    """The output of ``plan`` computed band by band, each side from only the rows it holds or received
    (the messages as the live executors send them)."""
    from rog.inference.split import run_units

    fl, b = multi_flows(graph, plan), plan.bounds
    to_server: list[tuple[torch.Tensor, int]] = []
    to_robot: list[tuple[torch.Tensor, int]] = []

    def collect(box):
        return lambda t, lo: box.append((t.clone(), lo))

    def take(box) -> tuple[torch.Tensor, int]:
        out = join_bands(box)
        box.clear()
        return out

    with torch.no_grad():
        if b[0] == 0:
            lo, hi = fl.up_rows[0]
            rob = image
            to_server.append((image[:, :, lo:hi].clone(), lo))
        else:
            rob = run_bands(graph, 0, b[0], image, 0, head_bands(graph, fl), fl.up_rows[0], collect(to_server))
        r_lo, srv, s_lo = 0, None, 0
        for k in range(len(plan.xs)):
            if to_server:
                part, lo = take(to_server)
                srv, s_lo = (part, lo) if srv is None else (torch.cat([part, srv], 2), lo)
            if to_robot:
                rob = torch.cat([rob, take(to_robot)[0]], 2)
            for side in ("robot", "server"):
                t, t_lo = (rob, r_lo) if side == "robot" else (srv, s_lo)
                msg = message_rows(graph, fl, k, side)
                box = to_server if side == "robot" else to_robot
                out = run_bands(graph, b[k], b[k + 1], t, t_lo, part_bands(graph, fl, k, side), msg, collect(box))
                if side == "robot":
                    rob, r_lo = out, 0
                else:
                    srv, s_lo = out, fl.a[k]
        if plan.merge == "robot":
            whole = torch.cat([rob, take(to_robot)[0]], 2)
        else:
            whole = torch.cat([take(to_server)[0], srv], 2)
        return run_units(graph, b[-1], len(graph), whole, 0)


# ---- the cost model

Band = tuple  # (compute seconds, bytes sent after it)


@dataclass(frozen=True)
class StreamCosts:
    """The bandwidth-independent part of a streamed plan's timeline: the robot's head bands (with
    ``b_0 = 0``: no compute, the input sent at once); per segment the robot's and the server's bands; the
    merge side, the output's bytes and the merge side's tail seconds."""

    head: tuple[Band, ...]
    segs: tuple[tuple[tuple[Band, ...], tuple[Band, ...]], ...]
    merge: str
    out_bytes: int
    tail_s: float


def _band_s(graph: Graph, f, p: int, q: int, band: Rows) -> float:
    rs = graph.segment(p, q).ranges(band[0], band[1], graph.h_at(p))
    return sum(f(p + i, (hi - lo) / graph.units[p + i].out_h) for i, (lo, hi) in enumerate(rs[1:]))


def stream_costs(graph: Graph, times: DeviceTimes, fl: MultiFlows) -> StreamCosts:
    """:class:`StreamCosts` of ``fl`` under ``times`` (a plan with ``bands = 1``: one band a part)."""
    b, n = fl.plan.bounds, len(graph)

    def bands_of(p, q, rows, msg, f, rb):
        out = [(_band_s(graph, f, p, q, band), (lambda c: (c[1] - c[0]) * rb)(_cut(band, msg))) for band in rows]
        if not streamed(fl.plan):  # one message of the whole of msg, after the part
            out = [(sum(s for s, _ in out), (msg[1] - msg[0]) * rb if msg[1] > msg[0] else 0)]
        return tuple(out)

    rb0 = _row_bytes(graph, b[0])
    up0 = fl.up_rows[0]
    if b[0] == 0:
        head = ((0.0, (up0[1] - up0[0]) * rb0),)
    else:
        head = bands_of(0, b[0], head_bands(graph, fl), up0, times.robot_s, rb0)
    segs = []
    for k in range(len(fl.plan.xs)):
        rb = _row_bytes(graph, b[k + 1])
        segs.append(tuple(bands_of(b[k], b[k + 1], part_bands(graph, fl, k, side), message_rows(graph, fl, k, side),
                                   times.robot_s if side == "robot" else times.server_s, rb)
                          for side in ("robot", "server")))
    side = times.robot_s if fl.plan.merge == "robot" else times.server_s
    return StreamCosts(head, tuple(segs), fl.plan.merge, fl.out_bytes, sum(side(u) for u in range(b[-1], n)))


def stream_timeline(c: StreamCosts, ser_s_per_byte: float, msg_overhead_s: float, rate_mbit: float,
                    iv: list | None = None) -> float:
    """The latency of a streamed plan's timeline: two compute clocks, one FIFO link per direction; a band's
    rows are sent when the band is done; a part starts when the side is free and every message before it
    has arrived.  ``iv``: as :func:`rog.inference.loss.multi_timeline`."""
    ser, ov = ser_s_per_byte, msg_overhead_s
    free = {"up": 0.0, "down": 0.0}

    def send(t_ready: float, nbytes: int, way: str) -> float:
        start = max(t_ready, free[way]) + 0.5 * ser * nbytes
        end = start + ov + xmit_s(nbytes, rate_mbit)
        free[way] = end
        if iv is not None:
            iv.append((start, end, "transmit"))
        return end + 0.5 * ser * nbytes

    def run(t: float, bands, way: str, robot: bool) -> tuple[float, float]:
        arrived = 0.0
        for s, nbytes in bands:
            if robot and iv is not None and s > 0:
                iv.append((t, t + s, "compute"))
            t += s
            if nbytes:
                arrived = max(arrived, send(t, nbytes, way))
        return t, arrived

    robot, to_server = run(0.0, c.head, "up", True)
    server, to_robot = 0.0, 0.0
    for rob_bands, srv_bands in c.segs:
        server, robot = max(server, to_server), max(robot, to_robot)
        robot, to_server = run(robot, rob_bands, "up", True)
        server, to_robot = run(server, srv_bands, "down", False)
    if c.merge == "robot":
        t = max(robot, to_robot)
        if iv is not None and c.tail_s > 0:
            iv.append((t, t + c.tail_s, "compute"))
        return t + c.tail_s
    return send(max(server, to_server) + c.tail_s, c.out_bytes, "down")


def simulate_stream_sim(graph: Graph, times: DeviceTimes, plan: MultiPlan, rate_mbit: float) -> Sim:
    """:func:`stream_timeline` of ``plan`` as a :class:`rog.inference.costmodel.Sim` (latency, the robot's
    intervals, so the modelled energy, the components and the bytes each way)."""
    fl = multi_flows(graph, plan)
    c = stream_costs(graph, times, fl)
    iv: list = []
    lat = stream_timeline(c, times.ser_s_per_byte, times.msg_overhead_s, rate_mbit, iv)
    robot_s = sum(s for s, _ in c.head) + sum(s for rb, _ in c.segs for s, _ in rb) + (c.tail_s if c.merge == "robot" else 0.0)
    server_s = sum(s for _, sb in c.segs for s, _ in sb) + (c.tail_s if c.merge == "server" else 0.0)
    up = sum(nb for _, nb in c.head) + sum(nb for rb, _ in c.segs for _, nb in rb)
    down = sum(nb for _, sb in c.segs for _, nb in sb) + (c.out_bytes if c.merge == "server" else 0)
    return Sim(lat, robot_s, server_s, _union_len([(a, b) for a, b, k in iv if k == "transmit"]), iv, up, down)


# ---- the planner

STREAM_BANDS = (1, 2, 4)  # row bands the ``intra-dp-stream`` planner tries for every plan it considers
STREAM_TOP = 16  # that many of the fastest unstreamed ``intra-dp-loss`` candidates, at every level


def stream_choice(costs, cands: Sequence[MultiPlan], one, one_sim: Sim | None, rate_mbit: float,
                  cache: dict | None = None, top: int = STREAM_TOP, bands: Sequence[int] = STREAM_BANDS):
    """The ``intra-dp-stream`` planner's plan at ``rate_mbit``: the fastest by :func:`stream_timeline` among
    the ``top`` fastest unstreamed candidates of ``cands`` (:class:`rog.inference.loss.PlanCosts` ``costs``)
    and the one-segment plan ``one`` (modelled ``one_sim``), each with every count of ``bands``; never
    modelled slower than the ``intra-dp-loss`` plan (its plan with one band is among them); with ``one_sim``
    None the fastest of them, whether or not it beats ``one``.  ``cache``: the
    :class:`StreamCosts` of plans seen at earlier levels.  ``(plan, sim)``."""
    g, t = costs.graph, costs.times
    cache = {} if cache is None else cache
    base = [p for p, _ in costs.ranked(cands, rate_mbit, top)]
    if 0.0 < getattr(one, "x", 0.0) < 1.0:
        base.append(MultiPlan((one.i, one.j), (one.x,), one.merge))
    best: tuple[float, MultiPlan] | None = None
    for p in base:
        for n in bands:
            plan = MultiPlan(p.bounds, p.xs, p.merge, n)
            if plan not in cache:
                try:
                    cache[plan] = stream_costs(g, t, multi_flows(g, plan))
                except ValueError:
                    cache[plan] = None
            if cache[plan] is None:
                continue
            lat = stream_timeline(cache[plan], t.ser_s_per_byte, t.msg_overhead_s, rate_mbit)
            if best is None or lat < best[0] - 1e-12:
                best = (lat, plan)
    if one_sim is None and best is None:
        raise ValueError("no candidate plan can be split in row bands")
    if one_sim is not None and (best is None or best[0] >= one_sim.latency_s * (1 - 1e-9)):
        return one, one_sim
    return best[1], simulate_stream_sim(g, t, best[1], rate_mbit)
