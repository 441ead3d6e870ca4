"""The live executor: a robot process and a server process exchanging a plan's tensors over TCP.

Run as ``python -m rog.inference.live --role server|robot --config FILE`` inside a namespace (the
launcher, :mod:`rog.inference.runner`, starts both).  ``FILE`` is the JSON the launcher writes:
model, seed, the per-unit profile (:class:`rog.inference.costmodel.DeviceTimes`), the server's
address and port, the trace and replay options (for the oracle estimate) and the plan tables.

Wire format (no pickle; :mod:`rog.inference.live_wire`): a fixed header ``struct`` :data:`HEADER` (magic ``RGID``, version, type,
inference id, the plan ``i, j, x*1000, merge``, row offset, 4-d shape, payload length bounded by
:data:`MAX_PAYLOAD`, the server's compute seconds) then raw float32 bytes.  Types: ``DATA`` (a part
of a tensor), ``RESULT`` (the output), ``ACK`` (the receiver got a whole message), ``PROBE`` (bytes
that only refresh the bandwidth estimate), ``BYE``, ``MPLAN`` (a per-layer plan's announcement, not ACKed:
:mod:`rog.inference.live_loss`, which runs those plans).

Both sides compute with :mod:`rog.inference.split` and pace every unit to its emulated time
(:class:`Pacer`): the robot ``robot_factor`` x the time measured for the rows it computes, the server
``server_factor`` x (:class:`rog.inference.costmodel.DeviceTimes`); a CUDA server
(``server_device = cuda``) computes on the GPU unpaced (:class:`Unpaced`).  The robot's sender thread sends messages in order; its
receiver thread records ACKs and incoming data.  A message's transmit interval is from the start
of its send to its ACK (robot to server) or from its first to its last byte (server to robot).

On a trace, inferences start at frames every ``period_s`` from the replay's start (a camera's frame
rate), so every planner meets the same instants of the trace; an inference that overruns its frame
starts the next one at once.  The robot reads commands on stdin (``GO planner origin_monotonic duration_s max_n``, ``QUIT``) and
answers ``READY`` / ``DONE n`` on stdout; per inference it appends one JSON record to the records
file: latency, the plan, the estimate and the oracle rate, compute/transmit intervals, the state
durations and the energy of the shared power model, bytes each way.
"""

from __future__ import annotations

import argparse
import json
import queue
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import torch

from rog.inference.costmodel import (POWER_W, DeviceTimes, Plan, flows, robot_energy_j, state_timeline)
from rog.inference.graph import Graph, capture
from rog.inference.live_config import LiveConfig
from rog.inference.live_wire import (HEADER, MAX_PAYLOAD, MERGES, MSG, Header, pack, read_msg,  # noqa: F401 (re-exported)
                                     tensor_of)
from rog.inference.models import INPUT_SHAPE, build_model
from rog.inference.loss import MultiPlan
from rog.inference.planners import TableRow, level_for, plan_of
from rog.inference.split import head, run_units, segment_rows, server_input, tail

__all__ = ["HEADER", "MSG", "MAX_PAYLOAD", "Header", "pack", "read_msg", "Pacer", "Estimator", "main"]

PROBE_BYTES = 32 << 10  # sent when an inference moved no estimate sample (local plans)
SAMPLE_MIN_BYTES = 8 << 10  # messages at least this long count for the passive estimate
# Every inference's output is compared with the whole model's forward on the robot (torch.allclose with
# these tolerances, by the server's device: a GPU's kernels sum in another order than the CPU's).
OUTPUT_TOL = {"cpu": (1e-4, 1e-5), "cuda": (1e-3, 1e-4)}  # (rtol, atol)


def plan_fields(plan: Plan) -> dict:
    return dict(i=plan.i, j=plan.j, x_milli=int(round(plan.x * 1000)), merge=MERGES.index(plan.merge))


class Pacer:
    """Paces units to emulated times: the phase started at :meth:`start` ends no earlier than the sum
    of ``unit_s(u, frac)`` over its units (:meth:`DeviceTimes.robot_s` / ``server_s``: the measured
    time of that share of rows, times the side's factor); after each unit it sleeps until that running
    sum is reached (a unit that ran long borrows from the next ones' slack).  ``late_s`` sums how far
    phases ended past their emulated end."""

    def __init__(self, unit_s: Callable[[int, float], float]) -> None:
        self.unit_s = unit_s
        self.t_last = time.monotonic()
        self.late_s = 0.0

    def start(self) -> float:
        self.t_last = time.monotonic()
        return self.t_last

    def __call__(self, u: int, frac: float) -> None:
        self.t_last += self.unit_s(u, frac)
        now = time.monotonic()
        if now < self.t_last:
            time.sleep(self.t_last - now)

    def end(self) -> float:
        """Close the phase: the emulated end, or now when the phase ran late."""
        now = time.monotonic()
        if now > self.t_last:
            self.late_s += now - self.t_last
            self.t_last = now
        return self.t_last


class Unpaced(Pacer):
    """No pacing (a real device, e.g. the GPU server): a phase ends when its work is done (``sync``
    waits for queued GPU work)."""

    def __init__(self, sync: Callable[[], None] = lambda: None) -> None:
        super().__init__(lambda u, frac: 0.0)
        self.sync = sync

    def __call__(self, u: int, frac: float) -> None:
        pass

    def end(self) -> float:
        self.sync()
        self.t_last = time.monotonic()
        return self.t_last


class Estimator:
    """Passive bandwidth estimate: payload bits over transmit seconds of the previous inference's
    messages of at least :data:`SAMPLE_MIN_BYTES` (both directions); None before the first sample."""

    def __init__(self) -> None:
        self.mbit: float | None = None

    def update(self, samples: list[tuple[int, float]]) -> bool:
        big = [(b, s) for b, s in samples if b >= SAMPLE_MIN_BYTES and s > 0]
        if not big:
            return False
        self.mbit = sum(b for b, _ in big) * 8 / sum(s for _, s in big) / 1e6
        return True


def _set_cc(sock: socket.socket, cc: str | None) -> None:
    if cc:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())


def _config(path: str) -> LiveConfig:
    return LiveConfig.from_dict(json.loads(Path(path).read_text()), source=str(path))


def _setup(cfg: LiveConfig) -> tuple[Graph, DeviceTimes]:
    torch.set_num_threads(1)
    graph = capture(build_model(cfg.model, cfg.seed), INPUT_SHAPE)
    return graph, DeviceTimes.from_dict(cfg.times)


def exact_cuda() -> None:
    """No TF32 on the GPU (its outputs must match the CPU's whole forward within :data:`OUTPUT_TOL`)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def server_pacer(times: DeviceTimes) -> Pacer:
    """The server's pacer: paced to ``server_s`` on the CPU, none on the GPU (its measured times are real)."""
    if times.server_device == "cuda":
        return Unpaced(torch.cuda.synchronize)
    return Pacer(times.server_s)


# ------------------------------------------------------------------------------------------ server

def serve(cfg: LiveConfig) -> int:
    """The server: accept the robot, ACK every message at once, compute each plan's server part."""
    graph, times = _setup(cfg)
    srv = socket.create_server(("0.0.0.0", cfg.port))
    print("READY", flush=True)
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _set_cc(conn, cfg.tcp_cc)
    send_lock = threading.Lock()
    inbox: queue.Queue = queue.Queue()

    def send(h: Header, payload: bytes = b"") -> None:
        with send_lock:
            conn.sendall(pack(h) + payload if len(payload) < 65536 else pack(h))
            if len(payload) >= 65536:
                conn.sendall(payload)

    def reader() -> None:
        try:
            while True:
                h, payload, _, _ = read_msg(conn)
                if h.type in (MSG["DATA"], MSG["PROBE"]):
                    send(Header(MSG["ACK"], h.inf, row_lo=h.row_lo, length=0))
                inbox.put((h, payload))
                if h.type == MSG["BYE"]:
                    return
        except (ConnectionError, OSError) as e:
            inbox.put((None, str(e)))

    threading.Thread(target=reader, daemon=True).start()
    dev = times.server_device
    if dev == "cuda":
        exact_cuda()
        graph.to("cuda")
    pacer = server_pacer(times)
    pending: dict[int, tuple] = {}
    while True:
        h, payload = inbox.get()
        if h is None or h.type == MSG["BYE"]:
            break
        if h.type == MSG["MPLAN"]:
            from rog.inference.live_loss import serve_multi

            serve_multi(graph, bytes(payload), h.inf, inbox.get, send, pacer, dev)
            continue
        if h.type != MSG["DATA"]:
            continue
        plan = h.plan()
        if h.inf in pending:  # the robot's rows of boundary j (merge on the server)
            part, srv_s = pending.pop(h.inf)
            t0 = pacer.start()
            t_j = torch.cat([tensor_of(h, payload).to(dev), part], 2)
            out = tail(graph, plan, t_j, pacer)
            pacer.end()
            _send_tensor(send, MSG["RESULT"], h.inf, plan, out, 0, srv_s + time.monotonic() - t0)
            continue
        x = tensor_of(h, payload).to(dev)
        t0 = pacer.start()
        if plan.x <= 0.0:
            out = run_units(graph, plan.i, len(graph), x, 0, on_unit=pacer)
            pacer.end()
            _send_tensor(send, MSG["RESULT"], h.inf, plan, out, 0, time.monotonic() - t0)
            continue
        fl = flows(graph, plan)
        part = run_units(graph, plan.i, plan.j, x, h.row_lo, segment_rows(fl, "server"), pacer)
        pacer.end()
        if plan.merge == "robot":
            _send_tensor(send, MSG["DATA"], h.inf, plan, part, fl.a_j, time.monotonic() - t0)
        else:
            pending[h.inf] = (part, time.monotonic() - t0)
    conn.close()
    srv.close()
    return 0


def _send_tensor(send, typ: int, inf: int, plan: Plan, t: torch.Tensor, row_lo: int, server_s: float = 0.0) -> None:
    data = t.cpu().contiguous().numpy().tobytes()
    send(Header(typ, inf, row_lo=row_lo, shape=tuple(t.shape), length=len(data), server_s=server_s, **plan_fields(plan)),
         data)


# ------------------------------------------------------------------------------------------ robot

class RobotLink:
    """The robot's connection: a sender thread (messages in order) and a receiver thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.outbox: queue.Queue = queue.Queue()
        self.inbox: queue.Queue = queue.Queue()
        self.acks: queue.Queue = queue.Queue()
        self.sent: list[tuple[int, float]] = []  # (payload bytes, send start) in send order
        threading.Thread(target=self._send_loop, daemon=True).start()
        threading.Thread(target=self._recv_loop, daemon=True).start()

    def _send_loop(self) -> None:
        while True:
            item = self.outbox.get()
            if item is None:
                return
            h, t = item
            start = time.monotonic()
            data = b"" if t is None else (t if isinstance(t, bytes) else t.contiguous().numpy().tobytes())
            h.length = len(data)
            if h.type != MSG["MPLAN"]:  # every other message the robot sends is ACKed
                self.sent.append((len(data), start))
            self.sock.sendall(pack(h))
            if data:
                self.sock.sendall(data)

    def _recv_loop(self) -> None:
        try:
            while True:
                h, payload, first, last = read_msg(self.sock)
                if h.type == MSG["ACK"]:
                    self.acks.put(time.monotonic())
                else:
                    self.inbox.put((h, payload, first, last))
        except (ConnectionError, OSError) as e:
            self.inbox.put((None, str(e), 0.0, 0.0))

    def send(self, h: Header, t) -> None:
        self.outbox.put((h, t))

    def receive(self, timeout_s: float = 120.0):
        h, payload, first, last = self.inbox.get(timeout=timeout_s)
        if h is None:
            raise ConnectionError(f"server connection lost: {payload}")
        return h, payload, first, last

    def collect_acks(self, n: int, timeout_s: float = 120.0) -> list[tuple[int, float, float]]:
        """``(bytes, send start, ack time)`` of the first ``n`` messages not yet collected."""
        out = []
        for _ in range(n):
            ack = self.acks.get(timeout=timeout_s)
            nbytes, start = self.sent.pop(0)
            out.append((nbytes, start, ack))
        return out


class Robot:
    """One robot: runs inferences of a planner's table (or one fixed plan) and records each."""

    def __init__(self, cfg: LiveConfig) -> None:
        self.cfg = cfg
        self.graph, self.times = _setup(cfg)
        self.tables = {name: [TableRow(r["rate_mbit"], plan_of(r), None) for r in rows]
                       for name, rows in cfg.tables.items()}
        self.schedule = None
        if cfg.trace:
            from rog.testbed.replay import ReplayOptions, build_schedule
            from rog.traces import load_trace

            self.schedule = build_schedule(load_trace(cfg.trace), ReplayOptions(**cfg.replay))
        self.fixed_mbit = cfg.fixed_mbit
        sock = socket.create_connection((cfg.server, cfg.port), timeout=30)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _set_cc(sock, cfg.tcp_cc)
        self.link = RobotLink(sock)
        self.pacer = Pacer(self.times.robot_s)
        self.image = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(cfg.seed))
        self.inf = 0
        with torch.no_grad():
            self.reference_out = self.graph.run_full(self.image)
        self.out_tol = OUTPUT_TOL[self.times.server_device]
        self.overhead_s = self.calibrate()

    def calibrate(self, n: int = 20) -> float:
        """Half the median round trip of a small probe and its ACK (the fixed cost of one message)."""
        rtts = []
        for _ in range(n):
            self.link.send(Header(MSG["PROBE"]), bytes(64))
            (nb, start, ack), = self.link.collect_acks(1)
            rtts.append(ack - start)
        rtts.sort()
        return rtts[len(rtts) // 2] / 2

    def oracle_mbit(self, t_s: float) -> float | None:
        if self.fixed_mbit is not None:
            return float(self.fixed_mbit)
        return None if self.schedule is None else self.schedule.rate_at(t_s)

    def run(self, planner: str, origin: float, duration_s: float, max_n: int, out) -> int:
        est = Estimator()
        mode = self.cfg.estimate
        fixed = None
        if planner.startswith("plan:"):
            i, j, x, merge = planner[5:].split(",")
            fixed = Plan(int(i), int(j), float(x), merge)
        elif planner.startswith("mplan:"):
            fixed = MultiPlan.from_dict(json.loads(planner[6:]))
        table = self.tables.get(planner)
        period_s = self.cfg.period_s if fixed is None else 0.0
        if fixed is None and table is None:
            raise ValueError(f"no plan table for planner {planner!r}")
        n = 0
        while n < max_n and time.monotonic() - origin < duration_s:
            t0 = time.monotonic()
            oracle = self.oracle_mbit(t0 - origin)
            if fixed is not None:
                plan, level = fixed, None
            else:
                basis = oracle if mode == "oracle" else est.mbit
                row = level_for(table, basis if basis is not None else 0.0)
                plan, level = row.plan, row.rate_mbit
            rec = self.infer(plan)
            if not est.update(rec.pop("samples")) and mode != "oracle" and fixed is None:
                self._probe(est)
            rec.update(k=n, planner=planner, t0_s=t0 - origin, level_mbit=level, estimate_mbit=est.mbit if mode != "oracle" else oracle,
                       oracle_mbit=oracle, estimate_mode=mode, **plan.to_dict())
            out.write(json.dumps(rec) + "\n")
            out.flush()
            n += 1
            if period_s > 0:  # frames arrive every period_s from the origin; an overrun starts the next at once
                wait = origin + n * period_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
        return n

    def _probe(self, est: Estimator) -> None:
        self.link.send(Header(MSG["PROBE"]), bytes(PROBE_BYTES))
        (nb, start, ack), = self.link.collect_acks(1)
        est.update([(nb, ack - start)])

    def infer(self, plan) -> dict:
        """One inference of ``plan`` (a per-layer plan: :func:`rog.inference.live_loss.infer_multi`); the
        record of its timeline."""
        if isinstance(plan, MultiPlan):
            from rog.inference.live_loss import infer_multi

            return infer_multi(self, plan)
        g, self.inf = self.graph, self.inf + 1
        fl = flows(g, plan)
        t0 = self.pacer.start()
        compute: list[tuple[float, float]] = []
        n_up = 0
        down: list[tuple[int, float, float]] = []
        server_s = 0.0
        with torch.no_grad():
            if plan.x >= 1.0:
                out = run_units(g, 0, len(g), self.image, 0, on_unit=self.pacer)
                compute.append((t0, self.pacer.end()))
            else:
                t_i = head(g, plan, self.image, self.pacer)
                t1 = self.pacer.end()
                if t1 > t0:
                    compute.append((t0, t1))
                sent, lo = server_input(fl, t_i)
                self.link.send(Header(MSG["DATA"], self.inf, row_lo=lo, shape=tuple(sent.shape), **plan_fields(plan)), sent)
                n_up += 1
                mine = None
                if 0.0 < plan.x:
                    self.pacer.start()
                    mine = run_units(g, plan.i, plan.j, t_i, 0, segment_rows(fl, "robot"), self.pacer)
                    compute.append((t1, self.pacer.end()))
                if plan.x > 0.0 and plan.merge == "robot":
                    h, payload, first, last = self.link.receive()
                    down.append((h.length, first, last))
                    server_s = h.server_s
                    t_j = torch.cat([mine, tensor_of(h, payload)], 2)
                    t2 = self.pacer.start()
                    out = tail(g, plan, t_j, self.pacer)
                    compute.append((t2, self.pacer.end()))
                else:
                    if mine is not None:
                        self.link.send(Header(MSG["DATA"], self.inf, row_lo=0, shape=tuple(mine.shape),
                                              **plan_fields(plan)), mine)
                        n_up += 1
                    h, payload, first, last = self.link.receive()
                    down.append((h.length, first, last))
                    server_s = h.server_s
                    out = tensor_of(h, payload)
        return self.record(t0, compute, n_up, down, server_s, out)

    def record(self, t0: float, compute: list, n_up: int, down: list, server_s: float, out: torch.Tensor) -> dict:
        """The record of an inference that started at ``t0`` and ended now: its compute intervals, ``n_up``
        messages sent (their ACKs collected here), ``down`` = (bytes, first, last) of those received."""
        t_end = time.monotonic()
        ups = self.link.collect_acks(n_up)
        transmit = [(s, a) for _, s, a in ups] + [(f, l) for _, f, l in down]
        iv = [(a - t0, b - t0, "compute") for a, b in compute] + [(a - t0, b - t0, "transmit") for a, b in transmit]
        lat = t_end - t0
        states = {"compute": 0.0, "transmit": 0.0, "both": 0.0, "idle": 0.0}
        for a, b, st in state_timeline(iv, 0.0, lat):
            states[st] += b - a
        link_busy = _union([(a, b) for a, b, s in iv if s == "transmit"])
        return dict(latency_s=lat, messages_up=n_up, messages_down=len(down),
                    robot_compute_s=sum(b - a for a, b in compute), server_compute_s=server_s,
                    transfer_s=link_busy, bytes_up=sum(u[0] for u in ups), bytes_down=sum(d[0] for d in down),
                    states_s=states, energy_j=robot_energy_j(iv, 0.0, lat, POWER_W), late_s=self.pacer.late_s,
                    out_checksum=float(out.double().sum()), **self.check_output(out),
                    samples=[(nb, a - s) for nb, s, a in ups] + [(nb, l - f) for nb, f, l in down])

    def check_output(self, out: torch.Tensor) -> dict:
        """``output_match`` (allclose with the whole model's output, :data:`OUTPUT_TOL`) and the largest
        absolute difference."""
        ref = self.reference_out
        if out.shape != ref.shape:
            return {"output_match": False, "output_max_abs_diff": None}
        rtol, atol = self.out_tol
        return {"output_match": bool(torch.allclose(out, ref, rtol=rtol, atol=atol)),
                "output_max_abs_diff": float((out - ref).abs().max())}

    def close(self) -> None:
        self.link.send(Header(MSG["BYE"]), None)
        self.link.outbox.put(None)
        time.sleep(0.2)
        self.link.sock.close()


def _union(iv: list[tuple[float, float]]) -> float:
    tot, end = 0.0, float("-inf")
    for a, b in sorted(iv):
        if b > end:
            tot += b - max(a, end)
            end = b
    return tot


def robot_main(cfg: LiveConfig) -> int:
    robot = Robot(cfg)
    reference = float(robot.reference_out.double().sum())
    print(f"READY {robot.overhead_s:.6f} {reference:.9g}", flush=True)
    with open(cfg.records, "a") as out:
        for line in sys.stdin:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "QUIT":
                break
            if parts[0] == "GO":
                planner, origin, dur, max_n = parts[1], float(parts[2]), float(parts[3]), int(parts[4])
                n = robot.run(planner, origin, dur, max_n, out)
                print(f"DONE {n}", flush=True)
    robot.close()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rog.inference.live", description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=("robot", "server"), required=True)
    ap.add_argument("--config", required=True)
    a = ap.parse_args(argv)
    cfg = _config(a.config).for_role(a.role, source=a.config)
    return serve(cfg) if a.role == "server" else robot_main(cfg)


if __name__ == "__main__":
    sys.exit(main())
