"""The paper's training horizons and how a run here reaches them through the trace's time scale.

The paper reads its accuracy claims at 30 and 60 minutes of training.  A run here replays the trace
with its time scaled by ``compute_s / 1.12`` (the paper's seconds per iteration), so
``minutes`` of the paper's training are ``60 x minutes x compute_s / 1.12`` wall seconds here.
Shared by the long-horizon item (``rog.papers.rog.long_item``) and its analysis
(``rog.papers.rog.horizons``).
"""

from __future__ import annotations

__all__ = ["PAPER_COMPUTE_S", "QUICK_COMPUTE_S", "HORIZONS_MIN", "LONG_ITEM", "E2E_ITEM", "QUICK_E2E_BUDGET_S",
           "paper_horizon_s"]

PAPER_COMPUTE_S = 1.12  # rog.experiment.traceplan.PAPER["compute_s"]
QUICK_COMPUTE_S = 0.28  # configs/devices/quick-cpu.yaml compute_s_per_iteration (checked by a test)
HORIZONS_MIN = (30.0, 60.0)  # the paper's horizons (minutes of its training time)
LONG_ITEM = "outdoors_long"  # the long-horizon end-to-end item
E2E_ITEM = "outdoors"  # the end-to-end item, read over its own (shorter) budget
QUICK_E2E_BUDGET_S = 150.0  # its budget in the quick profile (rog.experiment.items.OUTDOORS_BUDGET_S)


def paper_horizon_s(minutes: float, compute_s: float = QUICK_COMPUTE_S) -> float:
    """Wall seconds here that replay ``minutes`` of the paper's training time (trace time scale)."""
    return 60.0 * float(minutes) * compute_s / PAPER_COMPUTE_S
