"""The cost model (Intra-DP's LOSS, Sec. 4.2): two compute clocks, one FIFO link per direction.

A :class:`Plan` says who computes what along the chain of units (:mod:`rog.inference.graph`):

* units ``0 .. i-1`` on the robot, whole;
* the split segment ``i .. j-1`` (local units only): the robot computes the first
  ``round(x * H_j)`` rows of boundary ``j``, the server the rest; the robot sends the server the rows
  of boundary ``i`` its part needs (halo included: halo rows are computed on both sides);
* units ``j .. L-1`` on the ``merge`` side: ``robot`` (the server sends its rows of boundary ``j``
  back) or ``server`` (the robot sends its rows of boundary ``j``, the server finishes and sends the
  output back).  The result always ends on the robot.

Special cases: ``x = 1`` with ``i = j = L`` is local execution; ``x = 0`` with ``i = j = c`` and
merge ``server`` is the layer partition at cut ``c`` (``c = 0`` is all-offload).

:func:`flows` turns a plan into bytes per message and compute seconds per side (exact halo rows
from the graph); :func:`simulate` runs the timeline at one link rate: the robot's sender thread
serialises and sends messages in order (one FIFO per direction), the receiver starts when the last
byte has arrived and the message is deserialised, each side computes on its own clock.  It returns
the latency, the robot's state intervals (compute, transmit) and the components of Table 5/6.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:  # annotations only: the command's --help stays torch-free
    from rog.inference.graph import Graph

__all__ = ["Plan", "DeviceTimes", "curve_s", "with_overhead", "Flows", "Sim", "flows", "simulate", "compute_sums", "state_timeline", "local_plan", "cut_plan", "xmit_s",
           "WIRE_FACTOR", "robot_energy_j", "POWER_W", "robot_power_w", "NIC_TRANSMIT_W"]

# Wire bytes per payload byte of full TCP segments on a 1500-MTU link (1514-byte frames, 1448-byte
# payload with timestamps): what tbf counts.
WIRE_FACTOR = 1514 / 1448
NIC_TRANSMIT_W = 0.21  # Intra-DP Sec. 2: the Wi-Fi card adds 0.21 W while it transmits


def robot_power_w(profile: str = "jetson-xavier-nx") -> dict[str, float]:
    """The robot's watts per state from a device profile of the shared power model (:mod:`rog.power`;
    Intra-DP's Table 3 equals ROG's Table III): compute, transmit (= communication), idle (= stall),
    and both (computing while transmitting: compute + :data:`NIC_TRANSMIT_W`)."""
    from rog.testbed.profiles import load_profile

    w = load_profile(profile).watts()
    return {"compute": w["compute"], "transmit": w["communication"], "idle": w["stall"],
            "both": w["compute"] + NIC_TRANSMIT_W}


POWER_W = robot_power_w()  # the Jetson Xavier NX (configs/devices/jetson-xavier-nx.yaml)


@dataclass(frozen=True)
class Plan:
    """Who computes what (see the module docstring)."""

    i: int
    j: int
    x: float
    merge: str  # "robot" or "server"

    def label(self) -> str:
        if self.x >= 1.0:
            return "local"
        if self.x <= 0.0:
            return f"cut@{self.i}"
        return f"split[{self.i},{self.j})x{self.x:g}->{self.merge}"

    def to_dict(self) -> dict:
        return {"i": self.i, "j": self.j, "x": self.x, "merge": self.merge, "label": self.label()}


def local_plan(graph: Graph) -> Plan:
    """Everything on the robot."""
    n = len(graph)
    return Plan(n, n, 1.0, "robot")


def cut_plan(c: int) -> Plan:
    """Layer partition: units ``0 .. c-1`` on the robot, the rest on the server (``c = 0``: all-offload)."""
    return Plan(c, c, 0.0, "server")


Curve = Tuple[Tuple[float, float], ...]  # (share of a unit's output rows, seconds), shares increasing, last 1.0


def curve_s(curve: Curve, frac: float) -> float:
    """Seconds at row share ``frac`` on a measured curve: linear between measured shares, proportional
    below the smallest (one row), the whole unit's time at 1."""
    if frac <= 0.0:
        return 0.0
    s0, t0 = curve[0]
    if frac <= s0:
        return t0 * frac / s0
    for (sa, ta), (sb, tb) in zip(curve, curve[1:]):
        if frac <= sb:
            return ta + (tb - ta) * (frac - sa) / (sb - sa)
    return curve[-1][1]


@dataclass(frozen=True)
class DeviceTimes:
    """Per-unit compute seconds on this machine and how each side is emulated.

    ``cpu_s[u]``: profiled seconds of unit ``u`` (whole output) on one thread here.  The robot computes
    a unit in ``robot_factor`` x its measured time and the server in ``server_factor`` x (both paced to
    exactly that).  A partial unit's time comes from ``robot_curve[u]`` / ``server_curve[u]`` when given:
    that side's seconds measured at several row shares (the robot's rows are a unit's first rows, the
    server's its last: :func:`rog.inference.profiler.profile_curves`), read by :func:`curve_s`; without
    curves it is the whole unit's time times the share (linear, the ablation ``--split-costs linear``).
    ``server_device``: ``cpu`` (this CPU, paced) or ``cuda`` (curves measured on the GPU, factor 1, no
    pacing).  ``ser_s_per_byte``: serialisation plus deserialisation per payload byte;
    ``msg_overhead_s``: fixed cost of one message (headers, threads, one-way latency)."""

    cpu_s: tuple[float, ...]
    robot_factor: float = 15.0
    server_factor: float = 1.5
    ser_s_per_byte: float = 0.0
    msg_overhead_s: float = 0.0005
    robot_curve: Optional[Tuple[Curve, ...]] = None
    server_curve: Optional[Tuple[Curve, ...]] = None
    server_device: str = "cpu"

    def robot_s(self, u: int, frac: float = 1.0) -> float:
        if self.robot_curve is not None:
            return self.robot_factor * curve_s(self.robot_curve[u], frac)
        return self.robot_factor * self.cpu_s[u] * frac

    def server_s(self, u: int, frac: float = 1.0) -> float:
        if self.server_curve is not None:
            return self.server_factor * curve_s(self.server_curve[u], frac)
        return self.server_factor * self.cpu_s[u] * frac

    @property
    def split_costs(self) -> str:
        """``measured`` (curves) or ``linear``."""
        return "linear" if self.robot_curve is None else "measured"

    def to_dict(self) -> dict:
        """JSON-ready fields (the live processes' configuration)."""
        d = asdict(self)
        d["split_costs"] = self.split_costs
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceTimes":
        """The inverse of :meth:`to_dict` (curves as nested lists)."""
        curve = lambda c: None if c is None else tuple(tuple(tuple(p) for p in cu) for cu in c)  # noqa: E731
        return cls(tuple(d["cpu_s"]), d["robot_factor"], d["server_factor"], d["ser_s_per_byte"], d["msg_overhead_s"],
                   curve(d.get("robot_curve")), curve(d.get("server_curve")), d.get("server_device", "cpu"))


@dataclass(frozen=True)
class Flows:
    """A plan in bytes and fractions: messages and the share of every unit's rows each side computes."""

    plan: Plan
    up1_bytes: int  # robot -> server: boundary i rows the server needs (whole tensor for a cut)
    up1_rows: tuple[int, int]  # those rows of boundary i (0, 0 when the tensor is not split by rows)
    up2_bytes: int  # robot -> server: the robot's rows of boundary j (merge server)
    down_bytes: int  # server -> robot: the server's rows of boundary j (merge robot) or the output
    a_j: int  # rows of boundary j the robot computes
    robot_frac: tuple[float, ...]  # per unit: share of output rows the robot computes
    server_frac: tuple[float, ...]
    robot_rows: tuple[tuple[int, int], ...] = field(default=())  # per segment level: rows the robot computes
    server_rows: tuple[tuple[int, int], ...] = field(default=())


def _row_bytes(graph: Graph, u: int) -> int:
    return graph.bytes_at(u) // graph.h_at(u)


def flows(graph: Graph, plan: Plan) -> Flows:
    """Bytes of every message and per-unit row shares of ``plan`` (exact halos from the graph)."""
    n, g = len(graph), graph.first_global
    i, j, x = plan.i, plan.j, plan.x
    rf, sf = [0.0] * n, [0.0] * n
    if x >= 1.0:
        return Flows(plan, 0, (0, 0), 0, 0, graph.h_at(n), tuple([1.0] * n), tuple(sf))
    if x <= 0.0:
        if not 0 <= i <= n or i != j:
            raise ValueError(f"a layer partition needs i == j in 0..{n}, got {plan}")
        for u in range(i):
            rf[u] = 1.0
        for u in range(i, n):
            sf[u] = 1.0
        h = graph.h_at(i)
        return Flows(plan, graph.bytes_at(i), (0, h), 0, graph.bytes_at(n), 0, tuple(rf), tuple(sf))
    if not 0 <= i < j <= g:
        raise ValueError(f"a split needs 0 <= i < j <= {g} (local units), got {plan}")
    if plan.merge not in ("robot", "server"):
        raise ValueError(f"merge must be 'robot' or 'server', got {plan.merge!r}")
    h_i, h_j = graph.h_at(i), graph.h_at(j)
    a_j = int(round(x * h_j))
    if not 0 < a_j < h_j:
        raise ValueError(f"x={x} gives {a_j} of {h_j} rows at boundary {j}: nothing to split")
    seg = graph.segment(i, j)
    r_rows = seg.ranges(0, a_j, h_i)
    s_rows = seg.ranges(a_j, h_j, h_i)
    for u in range(i):
        rf[u] = 1.0
    for k, u in enumerate(range(i, j)):
        ho = graph.h_at(u + 1)
        rf[u] = (r_rows[k + 1][1] - r_rows[k + 1][0]) / ho
        sf[u] = (s_rows[k + 1][1] - s_rows[k + 1][0]) / ho
    tail = rf if plan.merge == "robot" else sf
    for u in range(j, n):
        tail[u] = 1.0
    up1 = (h_i - s_rows[0][0]) * _row_bytes(graph, i)
    if plan.merge == "robot":
        up2, down = 0, (h_j - a_j) * _row_bytes(graph, j)
    else:
        up2, down = a_j * _row_bytes(graph, j), graph.bytes_at(n)
    return Flows(plan, up1, (s_rows[0][0], h_i), up2, down, a_j, tuple(rf), tuple(sf), tuple(r_rows), tuple(s_rows))


def xmit_s(nbytes: int, rate_mbit: float) -> float:
    """Seconds the link needs for ``nbytes`` of payload at ``rate_mbit`` (wire overhead included)."""
    if nbytes <= 0:
        return 0.0
    return nbytes * WIRE_FACTOR * 8.0 / (max(rate_mbit, 1e-6) * 1e6)


@dataclass
class Sim:
    """One simulated inference: latency, the robot's intervals and the Table 5/6 components."""

    latency_s: float
    robot_compute_s: float
    server_compute_s: float
    transfer_s: float  # link busy time, both directions (union)
    intervals: list[tuple[float, float, str]]  # robot: (start, end, "compute" | "transmit")
    bytes_up: int
    bytes_down: int

    @property
    def energy_j(self) -> float:
        return robot_energy_j(self.intervals, 0.0, self.latency_s)


def robot_energy_j(intervals, t0_s: float, t1_s: float, power_w: dict | None = None) -> float:
    """Joules of the robot over ``[t0_s, t1_s]`` from compute/transmit intervals: compute, transmit,
    both (overlap) or idle at every instant, each at its :data:`POWER_W`."""
    p = power_w or POWER_W
    return sum(p[state] * (b - a) for a, b, state in state_timeline(intervals, t0_s, t1_s))


def state_timeline(intervals, t0_s: float, t1_s: float) -> list[tuple[float, float, str]]:
    """Disjoint ``(start, end, state)`` over ``[t0_s, t1_s]``, state one of compute, transmit, both, idle."""
    cuts = {t0_s, t1_s}
    for a, b, _ in intervals:
        cuts.update((min(max(a, t0_s), t1_s), min(max(b, t0_s), t1_s)))
    pts = sorted(cuts)
    out: list[tuple[float, float, str]] = []
    for a, b in zip(pts, pts[1:]):
        if b <= a:
            continue
        mid = (a + b) / 2
        c = any(s == "compute" and x <= mid < y for x, y, s in intervals)
        t = any(s == "transmit" and x <= mid < y for x, y, s in intervals)
        st = "both" if c and t else "compute" if c else "transmit" if t else "idle"
        if out and out[-1][2] == st and out[-1][1] == a:
            out[-1] = (out[-1][0], b, st)
        else:
            out.append((a, b, st))
    return out


def _union_len(iv: list[tuple[float, float]]) -> float:
    tot, end = 0.0, float("-inf")
    for a, b in sorted(iv):
        if b <= end:
            continue
        tot += b - max(a, end)
        end = b
    return tot


def compute_sums(graph: Graph, times: DeviceTimes, fl: Flows) -> tuple[float, ...]:
    """Seconds of a plan's compute phases: robot head, robot segment, server segment, robot tail,
    server tail (the bandwidth-independent part of :func:`simulate`)."""
    p, n = fl.plan, len(graph)
    r = [times.robot_s(u, fl.robot_frac[u]) for u in range(n)]
    s = [times.server_s(u, fl.server_frac[u]) for u in range(n)]
    if p.x >= 1.0:
        return sum(r), 0.0, 0.0, 0.0, 0.0
    head = sum(r[:p.i])
    tail_r = sum(r[p.j:]) if p.merge == "robot" else 0.0
    tail_s = sum(s[p.j:]) if p.merge == "server" else 0.0
    return head, sum(r[p.i:p.j]), sum(s[p.i:p.j]), tail_r, tail_s


def simulate(graph: Graph, times: DeviceTimes, fl: Flows, rate_mbit: float,
             rate_down_mbit: float | None = None, sums: tuple[float, ...] | None = None) -> Sim:
    """The timeline of one inference of ``fl.plan`` at ``rate_mbit`` (both directions unless
    ``rate_down_mbit`` is given); ``sums``: :func:`compute_sums` of the plan, if already known."""
    p = fl.plan
    down_rate = rate_mbit if rate_down_mbit is None else rate_down_mbit
    t, seg_r, seg_s, tail_r, tail_s = sums if sums is not None else compute_sums(graph, times, fl)
    if p.x >= 1.0:
        return Sim(t, t, 0.0, 0.0, [(0.0, t, "compute")], 0, 0)
    ser, ov = times.ser_s_per_byte, times.msg_overhead_s
    half = lambda b: 0.5 * ser * b  # noqa: E731  (serialise on the sender, deserialise on the receiver)
    iv: list[tuple[float, float, str]] = []
    link: list[tuple[float, float]] = []
    if t > 0:
        iv.append((0.0, t, "compute"))
    # message 1: robot -> server
    s1 = t + half(fl.up1_bytes)
    e1 = s1 + ov + xmit_s(fl.up1_bytes, rate_mbit)
    iv.append((s1, e1, "transmit"))
    link.append((s1, e1))
    server_t = e1 + half(fl.up1_bytes)
    robot_t = t + seg_r
    if seg_r > 0:
        iv.append((t, robot_t, "compute"))
    server_t += seg_s
    if p.merge == "robot":
        s3 = server_t + half(fl.down_bytes)
        e3 = s3 + ov + xmit_s(fl.down_bytes, down_rate)
        iv.append((s3, e3, "transmit"))
        link.append((s3, e3))
        robot_t = max(robot_t, e3 + half(fl.down_bytes))
        iv.append((robot_t, robot_t + tail_r, "compute"))
        lat = robot_t + tail_r
    else:
        if fl.up2_bytes > 0:
            s2 = max(robot_t, e1) + half(fl.up2_bytes)
            e2 = s2 + ov + xmit_s(fl.up2_bytes, rate_mbit)
            iv.append((s2, e2, "transmit"))
            link.append((s2, e2))
            server_t = max(server_t, e2 + half(fl.up2_bytes))
        server_t += tail_s
        s3 = server_t + half(fl.down_bytes)
        e3 = s3 + ov + xmit_s(fl.down_bytes, down_rate)
        iv.append((s3, e3, "transmit"))
        link.append((s3, e3))
        lat = e3 + half(fl.down_bytes)
    return Sim(lat, t + seg_r + tail_r, seg_s + tail_s, _union_len(link), iv, fl.up1_bytes + fl.up2_bytes,
               fl.down_bytes)


def with_overhead(times: DeviceTimes, overhead_s: float) -> DeviceTimes:
    """``times`` with the measured fixed cost of one message."""
    return replace(times, msg_overhead_s=overhead_s)
