"""The split executor: a plan's parts computed separately and joined, equal to the whole forward.

The same functions run in one process (:func:`run_split`, the correctness check of every plan) and
on the two sides of the live executor (:mod:`rog.inference.live`): :func:`run_units` computes units
``start .. stop-1`` on given output rows and calls ``on_unit`` after every unit (the live executor
paces there), :func:`robot_part` / :func:`server_part` are one side's share of a plan.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from rog.inference.costmodel import Flows, Plan, flows
from rog.inference.graph import Graph

__all__ = ["run_units", "run_split", "server_input", "segment_rows", "tail", "head"]

OnUnit = Callable[[int, float], None]  # (unit index, share of its output rows computed)


def run_units(graph: Graph, start: int, stop: int, x: torch.Tensor, x_lo: int,
              rows: Sequence[tuple[int, int]] | None = None, on_unit: OnUnit | None = None) -> torch.Tensor:
    """Units ``start .. stop-1`` from ``x`` (rows from ``x_lo`` of boundary ``start``); ``rows[k]`` is
    the output range of unit ``start + k`` (default: whole outputs)."""
    with torch.no_grad():
        for k, u in enumerate(range(start, stop)):
            unit = graph.units[u]
            a, b = rows[k] if rows is not None else (0, unit.out_h)
            x = unit.node.run(x, x_lo, a, b, graph.h_at(u))
            x_lo = a
            if on_unit is not None:
                on_unit(u, (b - a) / unit.out_h)
    return x


def head(graph: Graph, plan: Plan, image: torch.Tensor, on_unit: OnUnit | None = None) -> torch.Tensor:
    """The robot's whole units ``0 .. i-1``: the tensor at boundary ``i``."""
    return run_units(graph, 0, plan.i, image, 0, on_unit=on_unit)


def server_input(fl: Flows, t_i: torch.Tensor) -> tuple[torch.Tensor, int]:
    """What the robot sends first: the rows of boundary ``i`` the server needs, and the first row's index."""
    if fl.plan.x <= 0.0 or t_i.dim() != 4:
        return t_i, 0
    lo = fl.up1_rows[0]
    return t_i[:, :, lo:].contiguous(), lo


def segment_rows(fl: Flows, side: str) -> list[tuple[int, int]]:
    """Output rows of every unit of the split segment that ``side`` (robot/server) computes."""
    rows = fl.robot_rows if side == "robot" else fl.server_rows
    return list(rows[1:])


def tail(graph: Graph, plan: Plan, t_j: torch.Tensor, on_unit: OnUnit | None = None) -> torch.Tensor:
    """Units ``j .. L-1`` on the whole tensor at boundary ``j``."""
    return run_units(graph, plan.j, len(graph), t_j, 0, on_unit=on_unit)


def run_split(graph: Graph, plan: Plan, image: torch.Tensor) -> torch.Tensor:
    """The output of ``plan`` with the robot's and the server's parts computed separately from only
    the rows each side has (the bytes the live executor would send)."""
    fl = flows(graph, plan)
    if plan.x >= 1.0:
        return run_units(graph, 0, len(graph), image, 0)
    t_i = head(graph, plan, image)
    sent, lo = server_input(fl, t_i)
    if plan.x <= 0.0:
        return run_units(graph, plan.i, len(graph), sent.clone(), 0)
    srv = run_units(graph, plan.i, plan.j, sent.clone(), lo, segment_rows(fl, "server"))
    rob = run_units(graph, plan.i, plan.j, t_i, 0, segment_rows(fl, "robot"))
    t_j = torch.cat([rob, srv], 2)
    return tail(graph, plan, t_j)
