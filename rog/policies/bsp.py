"""BSP: Bulk Synchronous Parallel, which is literally SSP with threshold 0.

Every push and pull is the whole model with no deadline; a worker's pull after push ``n`` waits
until every active worker has pushed iteration ``n`` (``n - min(push_iter[active]) <= 0``).
"""

from __future__ import annotations

from .ssp import SSP


class BSP(SSP):
    """SSP(0): a barrier every iteration.  ``BSP(threshold=x)`` with ``x != 0`` is a ValueError."""

    name = "BSP"
    default_threshold = 0
    fixed_threshold = True

    def __init__(self, threshold: int = 0) -> None:
        if isinstance(threshold, bool) or threshold != 0:
            raise ValueError(f"BSP is SSP with threshold 0; got threshold={threshold!r} (use SSP for s > 0)")
        super().__init__(0)
