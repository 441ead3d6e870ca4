"""Per-layer (LOSS) plans on the live executor: both sides of a :class:`rog.inference.loss.MultiPlan`.

The robot announces the plan with one ``MPLAN`` message (not ACKed; payload :func:`pack_plan`: the
segment count, the merge side, the row bands, the boundaries and the robot's row shares in thousandths,
checked by :func:`unpack_plan` and :func:`rog.inference.loss.multi_flows` on the server).  Then both sides
compute their parts band by band (:mod:`rog.inference.stream`; the in-process
:func:`rog.inference.stream.run_stream` runs the same steps) with the exchanges as ``DATA`` messages over
the same link, pacing and records as one-segment plans (:mod:`rog.inference.live`):

* robot: its head (units ``0 .. b_0-1``; with ``b_0 = 0`` it sends the input rows the server needs at
  once); each part's rows the server needs next are sent when computed (one band: once the part is done;
  streamed: that band first); before segment ``k`` it waits for the rows it needs from the server; at the
  end it receives the server's rows and finishes (merge ``robot``) or has sent its rows (in bands when
  streamed) and receives the output (merge ``server``);
* server: the same from its side; for a streamed plan it sends on a thread of its own, so it computes on
  while its bands travel.  Each side sends before it waits for what it receives.

The server's compute seconds so far (every part and the tail) travel in each message's ``server_s``.
"""

from __future__ import annotations

import queue
import struct
import threading
import time

import torch

from rog.inference import live_wire as live
from rog.inference.loss import MAX_BANDS, MultiPlan, multi_flows
from rog.inference.split import run_units
from rog.inference.stream import head_bands, join_bands, message_rows, part_bands, pieces, run_bands

__all__ = ["MAX_SEGMENTS", "pack_plan", "unpack_plan", "infer_multi", "serve_multi"]

MAX_SEGMENTS = 16  # a plan announcement with more segments is refused


def pack_plan(plan: MultiPlan) -> bytes:
    """The ``MPLAN`` payload: segment count, merge (0 robot, 1 server), row bands, boundaries, shares in
    thousandths."""
    k = len(plan.xs)
    return struct.pack(f"!BBB{k + 1}H{k}H", k, ("robot", "server").index(plan.merge), plan.bands, *plan.bounds,
                       *(int(round(x * 1000)) for x in plan.xs))


def unpack_plan(payload: bytes) -> MultiPlan:
    """The inverse of :func:`pack_plan`; ConnectionError for a payload that is not one."""
    if len(payload) < 3:
        raise ConnectionError(f"bad plan announcement ({len(payload)} bytes)")
    k, merge, bands = payload[0], payload[1], payload[2]
    if not 1 <= k <= MAX_SEGMENTS or merge > 1 or not 1 <= bands <= MAX_BANDS or len(payload) != 3 + 2 * (2 * k + 1):
        raise ConnectionError(f"bad plan announcement (segments {k}, merge {merge}, bands {bands}, {len(payload)} bytes)")
    vals = struct.unpack(f"!{2 * k + 1}H", payload[3:])
    return MultiPlan(tuple(vals[:k + 1]), tuple(v / 1000.0 for v in vals[k + 1:]), ("robot", "server")[merge], bands)


def _rows_header(live, typ: str, inf: int, t: torch.Tensor, row_lo: int, server_s: float = 0.0):
    return live.Header(live.MSG[typ], inf, row_lo=row_lo, shape=tuple(t.shape), server_s=server_s)


class _Sender:
    """Sends in order on a thread of its own, so the server computes on while its bands travel."""

    def __init__(self, send) -> None:
        self.box: queue.Queue = queue.Queue()
        self.error: list[BaseException] = []
        self._send = send
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            item = self.box.get()
            if item is None:
                return
            try:
                self._send(*item)
            except (ConnectionError, OSError) as e:
                self.error.append(e)

    def __call__(self, h, data: bytes) -> None:
        self.box.put((h, data))

    def close(self, raise_error: bool = True) -> None:
        """Wait until everything queued is sent; a send's error is raised here (unless ``raise_error`` is False)."""
        self.box.put(None)
        self.thread.join()
        if self.error and raise_error:
            raise self.error[0]


# ------------------------------------------------------------------------------------------ robot

def infer_multi(robot, plan: MultiPlan) -> dict:
    """One inference of ``plan`` on :class:`rog.inference.live.Robot` ``robot``; its record."""
    g, link, pacer, b = robot.graph, robot.link, robot.pacer, plan.bounds
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

    def send_up(t: torch.Tensor, row_lo: int) -> None:
        nonlocal n_up
        link.send(_rows_header(live, "DATA", inf, t, row_lo), t)
        n_up += 1

    def receive(n: int = 1) -> tuple[live.Header, torch.Tensor]:
        """``n`` messages (the row bands of one message) joined in row order, and the last one's header."""
        parts = []
        for _ in range(n):
            h, payload, first, last = link.receive()
            if h is None:
                raise ConnectionError(f"inference {inf}: the server went away ({payload})")
            down.append((h.length, first, last))
            parts.append((live.tensor_of(h, payload), h.row_lo))
        return h, join_bands(parts)[0]

    t0 = time.monotonic()
    with torch.no_grad():
        link.send(live.Header(live.MSG["MPLAN"], inf), pack_plan(plan))
        if b[0] == 0:
            lo, hi = fl.up_rows[0]
            rob = robot.image
            send_up(rob[:, :, lo:hi].contiguous(), lo)
        else:
            rob = phase(lambda: run_bands(g, 0, b[0], robot.image, 0, head_bands(g, fl), fl.up_rows[0], send_up, pacer))
        for k in range(len(plan.xs)):
            n = pieces(g, fl, k - 1, "server") if k > 0 else 0
            if n:
                rob = torch.cat([rob, receive(n)[1]], 2)
            rob = phase(lambda: run_bands(g, b[k], b[k + 1], rob, 0, part_bands(g, fl, k, "robot"),
                                          message_rows(g, fl, k, "robot"), send_up, pacer))
        if plan.merge == "robot":
            h, srv = receive(pieces(g, fl, len(plan.xs) - 1, "server"))
            out = phase(lambda: run_units(g, b[-1], len(g), torch.cat([rob, srv], 2), 0, on_unit=pacer))
        else:
            h, out = receive()
    return robot.record(t0, compute, n_up, down, h.server_s, out)


# ------------------------------------------------------------------------------------------ server

def serve_multi(graph, payload: bytes, inf: int, next_msg, send, pacer, device: str) -> None:
    """The server's side of the plan announced by ``payload`` for inference ``inf``: ``next_msg()``
    returns the next ``(header, payload)`` from the robot, ``send(header, bytes)`` sends one message
    (on a thread of its own for a streamed plan)."""
    plan = unpack_plan(payload)
    try:
        fl = multi_flows(graph, plan)
    except ValueError as e:
        raise ConnectionError(f"impossible plan announced: {e}") from None
    b, last = plan.bounds, len(plan.xs) - 1
    sender = _Sender(send) if plan.bands > 1 else None
    busy_s, phase_t0 = 0.0, None

    def receive(n: int) -> tuple[torch.Tensor, int]:
        parts = []
        for _ in range(n):
            h, data = next_msg()
            if h is None or h.type != live.MSG["DATA"] or h.inf != inf:
                raise ConnectionError(f"inference {inf}: expected its rows, got {'nothing' if h is None else h.type}")
            parts.append((live.tensor_of(h, data).to(device), h.row_lo))
        return join_bands(parts)

    def send_rows(t: torch.Tensor, row_lo: int, typ: str = "DATA") -> None:
        data = t.cpu().contiguous().numpy().tobytes()
        so_far = busy_s + (time.monotonic() - phase_t0 if phase_t0 is not None else 0.0)
        h = _rows_header(live, typ, inf, t, row_lo, so_far)
        h.length = len(data)
        (sender or send)(h, data)

    def phase(run):
        nonlocal busy_s, phase_t0
        phase_t0 = pacer.start()
        out = run()
        pacer.end()
        busy_s += time.monotonic() - phase_t0
        phase_t0 = None
        return out

    srv, s_lo = None, 0
    try:
        with torch.no_grad():
            for k in range(len(plan.xs)):
                n = pieces(graph, fl, k - 1, "robot")
                if n:
                    part, lo = receive(n)
                    srv, s_lo = (part, lo) if srv is None else (torch.cat([part, srv], 2), lo)
                srv = phase(lambda: run_bands(graph, b[k], b[k + 1], srv, s_lo, part_bands(graph, fl, k, "server"),
                                              message_rows(graph, fl, k, "server"), send_rows, pacer))
                s_lo = fl.a[k]
            if plan.merge == "server":
                rob, _ = receive(pieces(graph, fl, last, "robot"))
                out = phase(lambda: run_units(graph, b[-1], len(graph), torch.cat([rob, srv], 2), 0, on_unit=pacer))
                send_rows(out, 0, "RESULT")
    except BaseException:
        if sender is not None:
            sender.close(raise_error=False)  # the first error is the one to report
        raise
    if sender is not None:
        sender.close()
