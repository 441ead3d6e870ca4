"""Whether a sensitivity item's accuracy claim can be decided at the length its runs had.

The rule, fixed before reading any outcome:

1. Length.  An accuracy claim (time or energy to a target, final accuracy, accuracy at equal
   iterations or time) of the worker, batch or threshold items is decidable only when its item's runs
   are at least :data:`MIN_ACCURACY_HORIZON_S` long.  That is the end-to-end item's budget, the
   shortest at which this project reads accuracy claims at all: at 70 s the whole rise of the curves
   was about two standard errors of the test set (``rog.experiment.items``), and at the sensitivity
   items' 40 s the accuracy panels swing by 2-4 points between tests.
2. Spread.  Where the claim was measured on two or more replicas (traces x seeds), it is decidable
   only when its spread over them (max - min) is no larger than the median's distance from parity
   (1x for a ratio, 0 points for a difference): otherwise the replicas disagree by more than the
   effect.

Stall and time-composition claims are means over iterations and are never marked.
"""

from __future__ import annotations

from typing import Any, Sequence

from rog.analysis.claim_table import Claim

from .claims import claim_key

__all__ = ["MIN_ACCURACY_HORIZON_S", "ACCURACY_PREFIXES", "is_sensitivity_accuracy", "horizon_s", "reasons",
           "not_decidable_reason", "NOT_DECIDABLE"]

MIN_ACCURACY_HORIZON_S = 150.0
ACCURACY_PREFIXES = ("time to target", "energy to target", "final accuracy", "accuracy at")
NOT_DECIDABLE = "not decidable at this length"
_ITEMS = {"sensitivity": ("batch", "workers"), "threshold": ("threshold",)}


def is_sensitivity_accuracy(claim: Claim) -> bool:
    """An accuracy claim read from the worker / batch or threshold items."""
    return claim.source in _ITEMS and claim.name.startswith(ACCURACY_PREFIXES)


def horizon_s(claim: Claim, budgets_s: dict[str, float] | None) -> float | None:
    """The shortest budget of the items the claim's runs come from (plan.json's ``budgets_s``); None unknown."""
    if not budgets_s or claim.source not in _ITEMS:
        return None
    vals = [b for name, b in budgets_s.items() if name.split(":", 1)[0] in _ITEMS[claim.source]]
    return min(vals) if vals else None


def not_decidable_reason(claim: Claim, horizon: float | None, entry: dict[str, Any] | None = None) -> str | None:
    """Why ``claim`` cannot be decided (None: it can, or the rule does not apply); ``entry``: its
    robustness entry (:mod:`rog.papers.rog.robustness`), for the spread rule."""
    if not is_sensitivity_accuracy(claim):
        return None
    if horizon is not None and horizon < MIN_ACCURACY_HORIZON_S:
        return (f"{NOT_DECIDABLE}: its runs are {horizon:g} s long, under the {MIN_ACCURACY_HORIZON_S:g} s "
                "at which accuracy claims are read")
    if entry is not None and entry.get("of", 0) >= 2 and entry.get("median") is not None:
        parity = 1.0 if claim.unit == "x" else 0.0
        spread = entry["max"] - entry["min"]
        effect = abs(entry["median"] - parity)
        if spread > effect:
            return (f"{NOT_DECIDABLE}: its spread over {entry['of']} replicas ({spread:.2f}) is larger than "
                    f"the median's distance from parity ({effect:.2f})")
    return None


def reasons(claims: Sequence[Claim], budgets_s: dict[str, float] | None,
            entries: Sequence[dict[str, Any]] | None = None) -> dict[str, str]:
    """Claim name -> why it is not decidable, for every claim the rule marks."""
    by_key = {e["claim"]: e for e in entries or ()}
    out = {}
    for c in claims:
        why = not_decidable_reason(c, horizon_s(c, budgets_s), by_key.get(claim_key(c.name)))
        if why:
            out[c.name] = why
    return out
