"""MTA: the minimum transmission amount of ROG's Adaptive Transmission Protocol.

If every transmission carries at least a fraction ``P`` of the rows, and rows are picked
independently, at most ``(1 - P)^k`` of them are still unsent after ``k`` transmissions.  For all
rows to be sent before the staleness threshold ``S`` triggers, the paper asks for
``(1 - P)^(S-1) <= P`` and takes the smallest such ``P`` (Table I: S=2 0.5, 3 0.38, 4 0.32,
5 0.28, 6 0.25, 7 0.22, 8 0.20).

We solve that inequality numerically for any ``S`` (the original artifact stopped at 40) and use
the **exact root**, not Table I's value rounded to two decimals.  Row counts can therefore differ
by a few rows from the artifact's: at S=4 the artifact's mandatory prefix was 10,657 of 33,307
rows (0.32 rounded share), ours is ``ceil(0.31767... * 33307)`` = 10,581 rows (with the artifact's
extra share, which is 0 at S=4).

The artifact also sent an empirical *extra* mandatory share on top of the MTA for thresholds
above 4 (:data:`ARTIFACT_EXTRA_SHARE`); :func:`mandatory_rows` adds it by default.  The original kept
one value per threshold from 0 to 40 (docs/design.md#artifact-choices lists those at 5, 10, 20, 30 and 40); the table
holds all of them, so no threshold the original ran is interpolated, and beyond 40 (where the
original refused to run) the share stays at its value at 40.
"""

from __future__ import annotations

import math
from functools import lru_cache


# threshold -> extra mandatory share the original artifact sent on top of the MTA, one value per
# threshold 0..40 as the original had them (not monotone: 0.06 at S=7, 0.05 at S=8); held beyond 40
ARTIFACT_EXTRA_SHARE: dict[int, float] = {
    0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0, 5: 0.03, 6: 0.05, 7: 0.06,
    8: 0.05, 9: 0.07, 10: 0.075, 11: 0.085, 12: 0.09, 13: 0.095, 14: 0.1, 15: 0.102,
    16: 0.104, 17: 0.106, 18: 0.107, 19: 0.108, 20: 0.11, 21: 0.11, 22: 0.111, 23: 0.111,
    24: 0.112, 25: 0.112, 26: 0.112, 27: 0.113, 28: 0.113, 29: 0.113, 30: 0.113, 31: 0.114,
    32: 0.114, 33: 0.114, 34: 0.114, 35: 0.114, 36: 0.115, 37: 0.115, 38: 0.115, 39: 0.115,
    40: 0.115,
}
ARTIFACT_MAX_THRESHOLD = 40  # the original refused larger thresholds

_ROOT_TOL = 1e-13  # bisection stops when the bracket is this narrow
_CEIL_SLACK = 1e-9  # rows: absorbs float noise so that e.g. 0.5 * 4 never becomes 3


def _check_threshold(threshold) -> int:
    if isinstance(threshold, bool) or int(threshold) != threshold or threshold < 0:
        raise ValueError(f"threshold must be a non-negative integer, got {threshold!r}")
    return int(threshold)


@lru_cache(maxsize=None)
def _mta_root(s: int) -> float:
    """Smallest P in (0, 1] with (1-P)^(s-1) <= P for s >= 2, by bisection.

    ``f(P) = (1-P)^(s-1) - P`` is strictly decreasing on [0, 1] with f(0) = 1 > 0 and
    f(1) = -1 < 0, so the root is unique.  We return the upper end of the final bracket, so the
    inequality holds exactly (in floating point) at the returned value.
    """
    lo, hi = 0.0, 1.0  # invariant: f(lo) > 0 >= f(hi)
    while hi - lo > _ROOT_TOL:
        mid = 0.5 * (lo + hi)
        if (1.0 - mid) ** (s - 1) <= mid:
            hi = mid
        else:
            lo = mid
    return hi


def mta_fraction(threshold: int) -> float:
    """MTA: the smallest share ``P`` of rows with ``(1-P)^(S-1) <= P`` for staleness threshold ``S``.

    Degenerate cases: ``S = 1`` gives 1.0 (``(1-P)^0 = 1 <= P`` only at P = 1: every row every
    time).  ``S = 0`` has no solution in (0, 1] (it would need ``1 <= P(1-P)``); it means BSP,
    which sends everything, so it also gives 1.0.
    """
    s = _check_threshold(threshold)
    if s <= 1:
        return 1.0
    return _mta_root(s)


def extra_share(threshold: int) -> float:
    """The artifact's empirical extra mandatory share at ``threshold`` (its table; its value at 40 beyond)."""
    s = _check_threshold(threshold)
    return ARTIFACT_EXTRA_SHARE[min(s, ARTIFACT_MAX_THRESHOLD)]


def _extra_value(extra, threshold: int) -> float:
    if isinstance(extra, str):
        if extra == "artifact":
            return extra_share(threshold)
        if extra == "none":
            return 0.0
        raise ValueError(f"extra must be 'artifact', 'none' or a share in [0, 1], got {extra!r}")
    value = float(extra)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"extra must be 'artifact', 'none' or a share in [0, 1], got {extra!r}")
    return value


def mandatory_share(threshold: int, extra: str | float = "artifact") -> float:
    """Share of rows that is mandatory: MTA plus the extra share, capped at 1."""
    return min(1.0, mta_fraction(threshold) + _extra_value(extra, threshold))


def mandatory_rows(n_rows: int, threshold: int, extra: str | float = "artifact") -> int:
    """Rows a transmission must carry: ``ceil((MTA + extra) * n_rows)``, capped at ``n_rows``.

    ``extra`` is ``"artifact"`` (:func:`extra_share`), ``"none"`` (pure MTA) or a share in [0, 1].
    """
    if isinstance(n_rows, bool) or int(n_rows) != n_rows or n_rows < 0:
        raise ValueError(f"n_rows must be a non-negative integer, got {n_rows!r}")
    n = int(n_rows)
    share = mandatory_share(threshold, extra)
    return min(n, max(0, math.ceil(share * n - _CEIL_SLACK)))
