"""How many examples a hypothesis property test draws in each tier.

The default tier runs a quarter of each property's full count (at least 10), so that it stays fast; the slow
tier selects the ``property`` tests too and runs them with ``ROG_HYPOTHESIS_FULL=1`` (``scripts/test.sh --all``
sets it there), so CI still draws every example the property was written with.
"""

from __future__ import annotations

import os

FULL = os.environ.get("ROG_HYPOTHESIS_FULL", "").strip().lower() not in ("", "0", "false", "no")


def examples(full_count: int) -> int:
    """``max_examples`` for a property written with ``full_count`` examples, in the tier running now."""
    return full_count if FULL else max(10, full_count // 4)
