"""Per-layer (LOSS) plans on the live executor: both sides of a :class:`rog.inference.loss.MultiPlan`.

The robot announces the plan with one ``MPLAN`` message (not ACKed; payload :func:`pack_plan`: the
segment count, the merge side, the boundaries and the robot's row shares in thousandths, checked by
:func:`unpack_plan` and :func:`rog.inference.loss.multi_flows` on the server), then both sides run the
steps of :mod:`rog.inference.loss` (the same ones as the in-process :func:`rog.inference.loss.run_multi`)
with the exchanges as ``DATA`` messages over the same link, pacing and records as one-segment plans
(:mod:`rog.inference.live`):

* robot: its head (units ``0 .. b_0-1``); before segment ``k`` it sends the rows the server needs
  (:func:`rog.inference.loss.up_part`) as soon as its previous part is done, then waits for the rows it
  needs from the server (``down_part``) and computes its part; at the end it receives the server's rows and
  finishes (merge ``robot``) or sends its rows and receives the output (merge ``server``);
* server: before segment ``k`` it sends the robot's rows as soon as its previous part is done, then waits
  for the robot's, computes its part; at the end the merge.

The server's compute seconds (every part and the tail) travel in the last message's ``server_s``.
"""

from __future__ import annotations

import struct
import time

import torch

from rog.inference.loss import MultiPlan, down_part, multi_flows, segment_part, up_part
from rog.inference.split import run_units

__all__ = ["MAX_SEGMENTS", "pack_plan", "unpack_plan", "infer_multi", "serve_multi"]

MAX_SEGMENTS = 16  # a plan announcement with more segments is refused


def pack_plan(plan: MultiPlan) -> bytes:
    """The ``MPLAN`` payload: segment count, merge (0 robot, 1 server), boundaries, shares in thousandths."""
    k = len(plan.xs)
    return struct.pack(f"!BB{k + 1}H{k}H", k, ("robot", "server").index(plan.merge), *plan.bounds,
                       *(int(round(x * 1000)) for x in plan.xs))


def unpack_plan(payload: bytes) -> MultiPlan:
    """The inverse of :func:`pack_plan`; ConnectionError for a payload that is not one."""
    if len(payload) < 2:
        raise ConnectionError(f"bad plan announcement ({len(payload)} bytes)")
    k, merge = payload[0], payload[1]
    if not 1 <= k <= MAX_SEGMENTS or merge > 1 or len(payload) != 2 + 2 * (2 * k + 1):
        raise ConnectionError(f"bad plan announcement (segments {k}, merge {merge}, {len(payload)} bytes)")
    vals = struct.unpack(f"!{2 * k + 1}H", payload[2:])
    return MultiPlan(tuple(vals[:k + 1]), tuple(v / 1000.0 for v in vals[k + 1:]), ("robot", "server")[merge])


def _rows_header(live, typ: str, inf: int, t: torch.Tensor, row_lo: int, server_s: float = 0.0):
    return live.Header(live.MSG[typ], inf, row_lo=row_lo, shape=tuple(t.shape), server_s=server_s)


# ------------------------------------------------------------------------------------------ robot

def infer_multi(robot, plan: MultiPlan) -> dict:
    """One inference of ``plan`` on :class:`rog.inference.live.Robot` ``robot``; its record."""
    from rog.inference import live

    g, link, pacer = robot.graph, robot.link, robot.pacer
    robot.inf += 1
    inf, fl = robot.inf, multi_flows(g, plan)
    compute: list[tuple[float, float]] = []
    down: list[tuple[int, float, float]] = []
    n_up = 0

    def phase(run):
        t = pacer.start()
        out = run()
        end = pacer.end()
        if end > t:
            compute.append((t, end))
        return out

    def receive() -> tuple[live.Header, torch.Tensor]:
        h, payload, first, last = link.receive()
        down.append((h.length, first, last))
        return h, live.tensor_of(h, payload)

    t0 = time.monotonic()
    with torch.no_grad():
        rob = phase(lambda: run_units(g, 0, plan.bounds[0], robot.image, 0, on_unit=pacer))
        r_lo = 0
        link.send(live.Header(live.MSG["MPLAN"], inf), pack_plan(plan))
        for k in range(len(plan.xs)):
            up = up_part(fl, k, rob, r_lo)
            if up is not None:
                link.send(_rows_header(live, "DATA", inf, up[0], up[1]), up[0])
                n_up += 1
            if fl.down_rows[k][1] > fl.down_rows[k][0]:
                rob = torch.cat([rob, receive()[1]], 2)
            rob, r_lo = phase(lambda: segment_part(g, fl, k, "robot", rob, r_lo, pacer))
        if plan.merge == "robot":
            h, srv = receive()
            out = phase(lambda: run_units(g, plan.bounds[-1], len(g), torch.cat([rob, srv], 2), 0, on_unit=pacer))
        else:
            link.send(_rows_header(live, "DATA", inf, rob, 0), rob)
            n_up += 1
            h, out = receive()
    return robot.record(t0, compute, n_up, down, h.server_s, out)


# ------------------------------------------------------------------------------------------ server

def serve_multi(graph, payload: bytes, inf: int, next_msg, send, pacer, device: str) -> None:
    """The server's side of the plan announced by ``payload`` for inference ``inf``: ``next_msg()``
    returns the next ``(header, payload)`` from the robot, ``send(header, bytes)`` sends one message."""
    from rog.inference import live

    plan = unpack_plan(payload)
    try:
        fl = multi_flows(graph, plan)
    except ValueError as e:
        raise ConnectionError(f"impossible plan announced: {e}") from None

    def receive() -> torch.Tensor:
        h, data = next_msg()
        if h is None or h.type != live.MSG["DATA"] or h.inf != inf:
            raise ConnectionError(f"inference {inf}: expected its rows, got {'nothing' if h is None else h.type}")
        return live.tensor_of(h, data).to(device)

    def send_rows(typ: str, t: torch.Tensor, row_lo: int) -> None:
        data = t.cpu().contiguous().numpy().tobytes()
        h = _rows_header(live, typ, inf, t, row_lo, busy_s)
        h.length = len(data)
        send(h, data)

    def phase(run):
        nonlocal busy_s
        t = pacer.start()
        out = run()
        pacer.end()
        busy_s += time.monotonic() - t
        return out

    busy_s, srv, s_lo = 0.0, None, 0
    with torch.no_grad():
        for k in range(len(plan.xs)):
            if srv is not None:
                down = down_part(fl, k, srv, s_lo)
                if down is not None:
                    send_rows("DATA", down[0], down[1])
            lo, hi = fl.up_rows[k]
            if hi > lo:
                part = receive()
                srv, s_lo = (part, lo) if srv is None else (torch.cat([part, srv], 2), lo)
            srv, s_lo = phase(lambda: segment_part(graph, fl, k, "server", srv, s_lo, pacer))
        if plan.merge == "robot":
            send_rows("DATA", srv, s_lo)
            return
        rob = receive()
        out = phase(lambda: run_units(graph, plan.bounds[-1], len(graph), torch.cat([rob, srv], 2), 0, on_unit=pacer))
        send_rows("RESULT", out, 0)
