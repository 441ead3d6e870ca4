"""Batch-weighted aggregation and the linear learning-rate rule, as one multiplier on a worker's update.

The parameter server adds every delivered row with weight ``1/W``.  A worker whose iteration-``n``
update ``u_n`` is multiplied by ``r_n = W b_n / sum_j b_j`` *before* it enters its accumulator makes
every row it ever delivers carry ``sum_n r_n u_n``: the weight travels with the row's values, so the
PS's sum over the rows that arrived is ``sum_i b_i u_i / sum_j b_j`` whenever each row arrives (BSP,
SSP, ROG; a row held back by ROG keeps its weight until it is sent), and no wire field is needed.
``sum_j b_j`` is the team's nominal batch sum (every worker knows every worker's batch from the run
configuration; with a rate trace, the batches at the traces' mean rates).  The linear rule multiplies
the learning rate by ``sum_j b_j / (b_ref W)`` (ScaDLES: ``eta x sum b / B`` with ``B = b_ref N``).
With equal batches ``r_n`` is exactly 1.0, so the update is bit-identical to plain averaging.
"""

from __future__ import annotations

from typing import Sequence


def update_multiplier(batch: int, team_batches: Sequence[int], b_ref: int, weighted: bool = True,
                      lr_scaling: bool = True) -> float:
    """The factor on this worker's learning rate for an iteration of ``batch`` samples."""
    W, total = len(team_batches), sum(int(b) for b in team_batches)
    if W < 1 or total <= 0 or b_ref <= 0 or batch <= 0:
        raise ValueError(f"batches must be positive (batch {batch}, team {list(team_batches)}, b_ref {b_ref})")
    if weighted and lr_scaling:
        return batch / b_ref  # (W b / sum b) x (sum b / (b_ref W))
    if weighted:
        return (W * int(batch)) / total  # integers: exactly 1.0 when every batch is equal
    if lr_scaling:
        return total / (b_ref * W)
    return 1.0
