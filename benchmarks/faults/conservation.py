"""The conservation oracle of the fault scenarios: which rows of a worker's parameters differ from
``w0 - sum(updates) / W`` by more than float32 rounding can explain.

The reference is computed in float64 by the caller (its own rounding is ~1e-16, negligible).  The
run itself works in float32: on its way from the local rule into a worker's parameters every update
meets a bounded number of roundings (added to the worker's accumulator, subtracted from it when
sent, scaled by ``1/W`` and added to the PS's pending rows, subtracted from them when pulled,
subtracted from the parameters), each one exact up to the unit roundoff ``u = 2**-24`` times the
magnitude of the value it produces.  With ``n`` such operations per element, the classic bound for
recursive summation (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 4.4)
gives ``|run - reference| <= gamma_n * sum|terms|`` with ``gamma_n = n*u / (1 - n*u)``, per
element; ``sum|terms|`` is ``|w0| + sum|u| / W`` (plus what the PS still holds when compression
keeps a residual there).  A row is lost when some element of it is off by more than that bound: a
difference rounding cannot produce, whatever the number of iterations.  A dropped update of a row
moves it by ``|u| / W``, far above ``gamma_n * sum|u| / W`` while ``n * u`` is small (it is ~1e-4
for a few hundred updates).
"""

from __future__ import annotations

import numpy as np

UNIT_ROUNDOFF_F32 = 2.0 ** -24  # float32: round to nearest, 24-bit significand
ROUNDINGS_PER_UPDATE = 6  # accumulate, subtract when sent, scale, add to pending, subtract when pulled, apply


def gamma(n_operations: int, unit_roundoff: float = UNIT_ROUNDOFF_F32) -> float:
    """``n*u / (1 - n*u)``: the relative error bound of ``n`` rounded additions (Higham's gamma_n)."""
    nu = float(n_operations) * unit_roundoff
    if nu >= 1.0:
        raise ValueError(f"{n_operations} float32 operations have no rounding bound (n*u = {nu:.3g} >= 1)")
    return nu / (1.0 - nu)


def tolerance(n_updates: int, magnitude: np.ndarray) -> np.ndarray:
    """Per-element bound on the float32 rounding of a run of ``n_updates`` updates whose terms sum
    (in absolute value) to ``magnitude`` (float64, one value per element)."""
    return gamma(ROUNDINGS_PER_UPDATE * int(n_updates) + 2) * np.asarray(magnitude, dtype=np.float64)


def reference_and_magnitude(w0: np.ndarray, updates, n_workers: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(w0 - sum(updates)/W, |w0| + sum|updates|/W, number of updates)``, all sums in float64."""
    w0 = np.asarray(w0, dtype=np.float64)
    total = np.zeros_like(w0)
    absolute = np.zeros_like(w0)
    n = 0
    for u in updates:
        u = np.asarray(u, dtype=np.float64)
        total += u
        absolute += np.abs(u)
        n += 1
    return w0 - total / n_workers, np.abs(w0) + absolute / n_workers, n


def rows_off(params: np.ndarray, reference: np.ndarray, bound: np.ndarray, row_start) -> tuple[np.ndarray, float]:
    """Rows (indices, sorted) holding an element whose difference from ``reference`` exceeds ``bound``,
    and the largest ``difference / bound`` over all elements (below 1 when nothing is lost)."""
    diff = np.abs(np.asarray(params, dtype=np.float64) - reference)
    bound = np.maximum(np.asarray(bound, dtype=np.float64), np.finfo(np.float64).tiny)
    ratio = diff / bound
    off = np.flatnonzero(ratio > 1.0)
    rows = np.unique(np.searchsorted(np.asarray(row_start), off, side="right") - 1)
    return rows.astype(np.int64), float(ratio.max()) if ratio.size else 0.0


def lost_rows(params_per_worker, w0: np.ndarray, updates, n_workers: int, row_start) -> dict:
    """The oracle for an in-process run: every worker's parameters against the float64 reference.

    Returns ``rows_lost`` (rows off in some worker), ``max_error_over_bound`` and ``max_rel_error``
    (largest difference over the reference's largest magnitude), ``updates`` and the bound used.
    """
    reference, magnitude, n = reference_and_magnitude(w0, updates, n_workers)
    bound = tolerance(n, magnitude)
    scale = float(np.abs(reference).max()) or 1.0
    bad: set[int] = set()
    worst, max_rel = 0.0, 0.0
    for p in params_per_worker:
        if p is None:
            continue
        rows, ratio = rows_off(p, reference, bound, row_start)
        bad.update(int(r) for r in rows)
        worst = max(worst, ratio)
        max_rel = max(max_rel, float(np.abs(np.asarray(p, dtype=np.float64) - reference).max()) / scale)
    return {"rows_lost": len(bad), "max_error_over_bound": worst, "max_rel_error": max_rel, "updates": n,
            "bound_rel_max": float(bound.max()) / scale}
