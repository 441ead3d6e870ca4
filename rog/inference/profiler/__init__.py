"""Per-unit profiler: seconds of every unit, whole and at row shares, on the device that runs it.

Both sides of the live executor pace each unit to a multiple of these times (the robot
``robot_factor`` x, the server ``server_factor`` x: :class:`rog.inference.costmodel.DeviceTimes`),
so one profile drives both the planner and the emulated devices.  A unit is timed ``repeats``
times after one warm-up on its real input, and the fastest kept (other load on a shared machine only
adds time: preemption; the paced processes run at real-time priority, so their compute is the unloaded one).

Split costs are measured, not assumed linear: :func:`profile_curves` times every local unit at the
row shares of :data:`PROFILE_SHARES` (plus a single row), the robot's as a unit's first rows and the
server's as its last (the parts each side computes in a split), made non-decreasing in the share (pool
adjacent violators: more rows never cost less) and capped at the whole unit's time, and the cost model interpolates between them (:func:`rog.inference.costmodel.curve_s`).  :func:`holdout_errors` measures units at
shares the curves did not use and reports the curves' error there.  On ``cuda`` every timing is
bracketed by ``torch.cuda.synchronize``.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import torch

from rog.inference.costmodel import Curve, DeviceTimes, curve_s
from rog.inference.graph import Graph

__all__ = ["PROFILE_SHARES", "HOLDOUT_SHARES", "profile_units", "profile_curves", "holdout_errors", "load_times", "main",
           "serialisation_s_per_byte", "profile", "unit_inputs", "monotone"]

# Row shares measured for the curves, and shares held out to check them (none shared with the first).
PROFILE_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
HOLDOUT_SHARES = (0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95)


def _sync(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _fastest_s(run: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    run()
    sync()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        sync()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def unit_inputs(graph: Graph, device: str = "cpu", seed: int = 0) -> list[torch.Tensor]:
    """The whole input tensor of every unit (a seeded image through the chain), on ``device``."""
    x = torch.randn(graph.in_shape, generator=torch.Generator().manual_seed(seed)).to(device)
    out = []
    with torch.no_grad():
        for u, unit in enumerate(graph.units):
            out.append(x)
            x = unit.node.run(x, 0, 0, unit.out_h, graph.h_at(u))
    return out


def _rows(share: float, h: int) -> int:
    return min(h, max(1, int(round(share * h))))


def _time_rows(graph: Graph, u: int, x: torch.Tensor, a: int, b: int, repeats: int, sync) -> float:
    unit, h = graph.units[u], graph.h_at(u)
    with torch.no_grad():
        return _fastest_s(lambda: unit.node.run(x, 0, a, b, h), repeats, sync)


def profile_units(graph: Graph, repeats: int = 5, seed: int = 0, device: str = "cpu") -> tuple[float, ...]:
    """Median seconds of every unit (whole output), one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        xs, sync = unit_inputs(graph, device, seed), _sync(device)
        return tuple(_time_rows(graph, u, xs[u], 0, graph.units[u].out_h, repeats, sync) for u in range(len(graph)))
    finally:
        torch.set_num_threads(threads)


def _measure(graph: Graph, shares: Sequence[float], side: str, repeats: int, device: str, seed: int,
             units: Sequence[int] | None = None) -> dict[int, list[tuple[float, float]]]:
    """``{unit: [(share, seconds), ...]}`` for ``side``'s rows (robot: first, server: last)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        xs, sync = unit_inputs(graph, device, seed), _sync(device)
        out: dict[int, list[tuple[float, float]]] = {}
        for u in (range(graph.first_global) if units is None else units):
            h = graph.units[u].out_h
            pts: dict[int, float] = {}
            for s in shares:
                r = _rows(s, h)
                if r not in pts:
                    a, b = (0, r) if side == "robot" else (h - r, h)
                    pts[r] = _time_rows(graph, u, xs[u], a, b, repeats, sync)
            out[u] = [(r / h, t) for r, t in sorted(pts.items())]
        return out
    finally:
        torch.set_num_threads(threads)


def monotone(values: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    return [s / n for s, n in blocks for _ in range(int(n))]


def profile_curves(graph: Graph, cpu_s: Sequence[float], side: str, repeats: int = 5, device: str = "cpu",
                   seed: int = 0, shares: Sequence[float] = PROFILE_SHARES) -> tuple[Curve, ...]:
    """Every unit's curve for ``side`` (``robot`` or ``server``): measured seconds at one row and at
    ``shares`` of its rows, the whole time ``cpu_s[u]`` at share 1 (global units: only that)."""
    meas = _measure(graph, (0.0,) + tuple(s for s in shares if s < 1.0), side, repeats, device, seed)
    curves = []
    for u in range(len(graph)):
        part = [(s, t) for s, t in meas.get(u, []) if s < 1.0]
        whole = float(cpu_s[u])
        fit = [min(t, whole) for t in monotone([t for _, t in part])]  # a part never costs more than the whole
        curves.append(tuple(zip([s for s, _ in part], fit)) + ((1.0, whole),))
    return tuple(curves)


def holdout_errors(graph: Graph, times: DeviceTimes, side: str, repeats: int = 5, device: str = "cpu", seed: int = 0,
                   shares: Sequence[float] = HOLDOUT_SHARES) -> list[dict]:
    """Per unit and held-out share: measured seconds of ``side``'s rows next to the curve's (``times``,
    factor 1) and the linear model's; ``error`` = curve / measured - 1."""
    curve = times.robot_curve if side == "robot" else times.server_curve
    meas = _measure(graph, shares, side, repeats, device, seed)
    out = []
    for u, pts in meas.items():
        for s, t in pts:
            if s >= 1.0 or t <= 0:
                continue
            model = curve_s(curve[u], s) if curve is not None else times.cpu_s[u] * s
            out.append({"unit": u, "share": s, "measured_s": t, "model_s": model, "linear_s": times.cpu_s[u] * s,
                        "error": model / t - 1.0, "linear_error": times.cpu_s[u] * s / t - 1.0})
    return out


def serialisation_s_per_byte(nbytes: int = 1 << 20, repeats: int = 5) -> float:
    """Seconds per byte to turn a float32 tensor into bytes and back (``numpy().tobytes()`` then
    ``torch.frombuffer(...).clone()``), median of ``repeats``."""
    t = torch.randn(nbytes // 4)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        b = t.numpy().tobytes()
        torch.frombuffer(bytearray(b), dtype=torch.float32).clone()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) / nbytes


def profile(graph: Graph, robot_factor: float, server_factor: float, msg_overhead_s: float = 0.0005,
            repeats: int = 5, split_costs: str = "measured", server_device: str = "cpu") -> DeviceTimes:
    """A :class:`DeviceTimes` for ``graph``: the robot's times measured on this CPU; the server's on this
    CPU too, or on the GPU (``server_device="cuda"``, its factor then 1: measured, not paced).
    ``split_costs``: ``measured`` (curves over row shares) or ``linear`` (whole time x share)."""
    if split_costs not in ("measured", "linear"):
        raise ValueError(f"split_costs must be 'measured' or 'linear', got {split_costs!r}")
    cpu = profile_units(graph, repeats)
    rc = sc = None
    if split_costs == "measured":
        rc = profile_curves(graph, cpu, "robot", repeats)
    if server_device == "cuda":
        gpu = profile_units(graph.to("cuda"), repeats, device="cuda")
        sc = profile_curves(graph, gpu, "server", repeats, device="cuda") if split_costs == "measured" else None
        graph.to("cpu")
        if sc is None:  # linear on the GPU: the GPU's whole times times the share
            sc = tuple(((1.0, t),) for t in gpu)
        return DeviceTimes(cpu, robot_factor, 1.0, serialisation_s_per_byte(), msg_overhead_s, rc, sc, "cuda")
    if split_costs == "measured":
        sc = profile_curves(graph, cpu, "server", repeats)
    return DeviceTimes(cpu, robot_factor, server_factor, serialisation_s_per_byte(), msg_overhead_s, rc, sc)


def load_times(path, model: str) -> DeviceTimes:
    """The profile in ``path`` (written by :func:`main`), checked to be of ``model``; ValueError naming the
    file and the fix otherwise."""
    import json
    from pathlib import Path

    try:
        d = json.loads(Path(path).read_text())
        times, got = DeviceTimes.from_dict(d["times"]), d["model"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--times {path}: not a profile of python -m rog.inference.profiler --out ({e})") from None
    if got != model:
        raise ValueError(f"--times {path} profiles {got}, not {model}: give the profile of --model {model}")
    return times
