"""``outdoors_long``: the end-to-end item at the paper's horizons (30 and 60 minutes), opt-in by name.

The paper states its accuracy claims at 30 and 60 minutes of training.  A run here replays the trace
with its time scaled by ``compute_s / 1.12`` (``rog.experiment.traceplan``: the quick profile's
0.28 s per iteration gives x0.25), so a wall second here is 1 / 0.25 = 4 of the paper's seconds and
the paper's 60 minutes are :data:`LONG_BUDGET_S` = 3600 x 0.25 = 900 s of wall clock (its 30 minutes:
the first 450 s, read by clipping: ``rog.analysis.horizons``).  Same systems as ``outdoors``
(artifact replay mode); a plan with both runs each system once, for the longer budget, and
``outdoors`` reads its first 150 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

PAPER_COMPUTE_S = 1.12  # rog.experiment.traceplan.PAPER["compute_s"]
QUICK_COMPUTE_S = 0.28  # configs/devices/quick-cpu.yaml compute_s_per_iteration (checked by a test)
HORIZONS_MIN = (30.0, 60.0)  # the paper's horizons (minutes of its training time)
LONG_ITEM = "outdoors_long"


def paper_horizon_s(minutes: float, compute_s: float = QUICK_COMPUTE_S) -> float:
    """Wall seconds here that replay ``minutes`` of the paper's training time (trace time scale)."""
    return 60.0 * float(minutes) * compute_s / PAPER_COMPUTE_S


LONG_BUDGET_S = paper_horizon_s(max(HORIZONS_MIN))  # 900 s in the quick profile
FULL_LONG_BUDGET_S = paper_horizon_s(max(HORIZONS_MIN), PAPER_COMPUTE_S)  # the full profile: 3600 s


def long_items(spec_cls, item_cls, e2e) -> dict:
    """``{"outdoors_long": Item}`` with the end-to-end systems ``e2e("artifact")``."""
    return {LONG_ITEM: item_cls(LONG_ITEM, tuple(e2e("artifact")),
                                "end to end at the paper's 30 and 60 minutes (trace time scale): BSP, SSP-4, SSP-20, "
                                "FLOWN-4, ROG-4, ROG-20 and DDP, artifact replay mode")}


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
