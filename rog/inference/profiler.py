"""Per-unit profiler: seconds of every unit on this machine (one thread), and serialisation cost.

Both sides of the live executor pace each unit to a multiple of these times (the robot
``robot_factor`` x, the server ``server_factor`` x: :class:`rog.inference.costmodel.DeviceTimes`),
so one profile taken here drives both the planner and the emulated devices.  Each unit is timed
``repeats`` times after one warm-up on its real input, and the median kept.
"""

from __future__ import annotations

import statistics
import time

import torch

from rog.inference.costmodel import DeviceTimes
from rog.inference.graph import Graph

__all__ = ["profile_units", "serialisation_s_per_byte", "profile"]


def profile_units(graph: Graph, repeats: int = 5, seed: int = 0) -> tuple[float, ...]:
    """Median seconds of every unit (whole output), one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = torch.randn(graph.in_shape, generator=torch.Generator().manual_seed(seed))
        out = []
        with torch.no_grad():
            for u, unit in enumerate(graph.units):
                h = graph.h_at(u)
                run = lambda: unit.node.run(x, 0, 0, unit.out_h, h)  # noqa: E731
                y = run()
                ts = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    run()
                    ts.append(time.perf_counter() - t0)
                out.append(statistics.median(ts))
                x = y
        return tuple(out)
    finally:
        torch.set_num_threads(threads)


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
            repeats: int = 5) -> DeviceTimes:
    """A :class:`DeviceTimes` for ``graph`` measured here."""
    return DeviceTimes(profile_units(graph, repeats), robot_factor, server_factor, serialisation_s_per_byte(),
                       msg_overhead_s)
