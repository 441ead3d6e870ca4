"""The negative control of Table 6: a fixed link rate at which the cost model puts local execution first.

The rate is chosen by a rule from the run's own plan tables, before any inference: the DSCCS-like
``layer-latency`` planner (every layer partition, local included) picks local at the levels where
local is the fastest layer partition; the control holds the link at half the highest such level
(well inside that region, so the estimate's noise and rounding down keep it there).  Intra-DP is
then run there live; the claim under test is that it chooses local.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rog.inference.planners import TableRow

__all__ = ["RULE", "control_rate_mbit", "write_constant_trace"]

RULE = "half the highest plan level at which layer-latency (fastest layer partition) chooses local"


def control_rate_mbit(layer_table: Sequence[TableRow]) -> float:
    """Half the highest level of ``layer_table`` whose plan is local; ValueError when there is none."""
    local = [r.rate_mbit for r in layer_table if r.plan.x >= 1.0]
    if not local:
        raise ValueError("the cost model puts local first at no level of --bandwidth-grid: give lower levels, "
                         "e.g. --bandwidth-grid 0.5,1,2,5,10")
    return max(local) / 2.0


def write_constant_trace(path: Path, rate_mbit: float, duration_s: float) -> Path:
    """A CSV trace (``t_s,mbps``) holding ``rate_mbit`` for ``duration_s`` seconds."""
    path = Path(path)
    path.write_text(f"t_s,mbps\n0,{rate_mbit:g}\n{duration_s:g},{rate_mbit:g}\n")
    return path
