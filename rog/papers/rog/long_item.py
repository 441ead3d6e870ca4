"""``outdoors_long``: the end-to-end item at the paper's horizons (30 and 60 minutes), opt-in by name.

The paper states its accuracy claims at 30 and 60 minutes of training.  A run here replays the trace
with its time scaled by ``compute_s / 1.12`` (``rog.experiment.traceplan``: the quick profile's
0.28 s per iteration gives x0.25), so a wall second here is 1 / 0.25 = 4 of the paper's seconds and
the paper's 60 minutes are :data:`LONG_BUDGET_S` = 3600 x 0.25 = 900 s of wall clock (its 30 minutes:
the first 450 s, read by clipping: ``rog.papers.rog.horizons``).  Same systems as ``outdoors``
(artifact replay mode); a plan with both runs each system once, for the longer budget, and
``outdoors`` reads its first 150 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rog.paper_horizons import HORIZONS_MIN, LONG_ITEM, PAPER_COMPUTE_S, QUICK_COMPUTE_S, paper_horizon_s

from .items import e2e

__all__ = ["HORIZONS_MIN", "LONG_ITEM", "PAPER_COMPUTE_S", "QUICK_COMPUTE_S", "paper_horizon_s", "LONG_BUDGET_S",
           "FULL_LONG_BUDGET_S", "items", "QUICK_BUDGETS_S", "FULL_BUDGETS_S", "plan_lines"]

LONG_BUDGET_S = paper_horizon_s(max(HORIZONS_MIN))  # 900 s in the quick profile
FULL_LONG_BUDGET_S = paper_horizon_s(max(HORIZONS_MIN), PAPER_COMPUTE_S)  # the full profile: 3600 s
QUICK_BUDGETS_S = ((LONG_ITEM, LONG_BUDGET_S),)  # per profile (rog.experiment.items.PAPER_ITEMS)
FULL_BUDGETS_S = ((LONG_ITEM, FULL_LONG_BUDGET_S),)


def items(spec_cls, item_cls) -> dict:
    """``{"outdoors_long": Item}`` with the end-to-end systems (:func:`rog.papers.rog.items.e2e`, artifact mode)."""
    return {LONG_ITEM: item_cls(LONG_ITEM, tuple(e2e(spec_cls, "artifact")),
                                "end to end at the paper's 30 and 60 minutes (trace time scale): BSP, SSP-4, SSP-20, "
                                "FLOWN-4, ROG-4, ROG-20 and DDP, artifact replay mode")}


def plan_lines(items: Sequence, budgets_s: dict[str, float], profile: str) -> list[str]:
    """--dry-run's lines (rog.experiment.items.PAPER_ITEMS): :func:`passes_lines` at the profile's compute time."""
    return passes_lines(items, budgets_s, QUICK_COMPUTE_S if profile == "quick" else PAPER_COMPUTE_S)


def passes_lines(items: Sequence, budgets_s: dict[str, float], compute_s: float = QUICK_COMPUTE_S) -> list[str]:
    """For --dry-run: per long item, how many passes of its trace a run covers."""
    from rog.experiment.traceplan import default_trace
    from rog.traces import load_trace

    out = []
    scale = compute_s / PAPER_COMPUTE_S
    for it in items:
        if it.name.split(":", 1)[0] != LONG_ITEM:
            continue
        spec = it.runs[0]
        try:
            path = Path(spec.trace) if spec.trace else default_trace(spec.control)[0]
            dur = load_trace(path).duration_s
        except (OSError, ValueError) as e:
            out.append(f"{it.name}: trace unreadable ({e})")
            continue
        b = budgets_s[it.name]
        out.append(f"{it.name}: {b:g} s = {b / scale:.0f} trace s at time scale x{scale:g} (the paper's "
                   f"{b / scale / 60:.0f} min; claims also read at {HORIZONS_MIN[0]:g} min = {paper_horizon_s(HORIZONS_MIN[0], compute_s):g} s): "
                   f"{b / scale / dur:.2f} passes of {path.name} ({dur:.0f} trace s)")
    return out
