"""``result/plan.json`` of ``scripts/run_items.py`` as the summary reads it: items and their budgets, and the
replica an item name carries (``<item>:<trace stem>:seed<n>``)."""

from __future__ import annotations

import json
import math
from pathlib import Path


def read_plan(path: str | Path) -> tuple[dict[str, list[str]], dict[str, float] | None]:
    """``items`` (item -> run ids) and ``budgets_s`` (item -> seconds; None in a plan without them) of
    ``scripts/run_items.py``'s ``plan.json``; ValueError naming the file and the field otherwise."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read it as JSON ({type(e).__name__}: {e}); expected result/plan.json of "
                         "scripts/run_items.py") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, dict) or not all(isinstance(v, list) and all(isinstance(i, str) for i in v)
                                              for v in items.values()):
        raise ValueError(f"{path}: field 'items' must map item names to lists of run ids")
    budgets = doc.get("budgets_s")
    if budgets is None:
        return items, None
    if not isinstance(budgets, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in budgets.values()):
        raise ValueError(f"{path}: field 'budgets_s' must map item names to positive numbers of seconds")
    return items, {k: float(v) for k, v in budgets.items()}


def replica_of(item: str) -> str:
    """The replica part of an item name (``outdoors:w1:seed2`` -> ``w1:seed2``; ``outdoors`` -> ``''``)."""
    return item.split(":", 1)[1] if ":" in item else ""
