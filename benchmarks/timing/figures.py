"""One figure of the timing benchmark: what was measured, the reference it is held against (measured or
computed in the same run), the tolerance, and whether it held."""

from __future__ import annotations

import numpy as np


def figure(name: str, measured, reference, tolerance: float, *, rel: bool = False, **detail) -> dict:
    """``measured`` (a number or a list) against ``reference`` within ``tolerance`` (absolute, or relative to
    the reference with ``rel``); ``ok`` is the worst element's verdict."""
    m, r = np.atleast_1d(np.asarray(measured, dtype=float)), np.atleast_1d(np.asarray(reference, dtype=float))
    err = np.abs(m - r) / (np.abs(r) if rel else 1.0)
    return dict(name=name, measured=_plain(measured), reference=_plain(reference), tolerance=tolerance,
                tolerance_kind="relative" if rel else "absolute", worst_error=round(float(err.max()), 6),
                ok=bool(err.max() <= tolerance), **detail)


def at_least(name: str, measured: float, floor: float, **detail) -> dict:
    """``measured`` at least ``floor`` (a share, a rate's lower edge)."""
    return dict(name=name, measured=_plain(measured), reference=_plain(floor), tolerance=0.0,
                tolerance_kind="at least", worst_error=round(max(0.0, float(floor) - float(measured)), 6),
                ok=bool(measured >= floor), **detail)


def within(name: str, measured, low: float, high: float, **detail) -> dict:
    """``measured`` (a number or a list) inside ``[low, high]`` (a ratio's accepted band)."""
    m = np.atleast_1d(np.asarray(measured, dtype=float))
    err = np.maximum(np.maximum(low - m, m - high), 0.0)
    return dict(name=name, measured=_plain(measured), reference=[low, high], tolerance=0.0, tolerance_kind="range",
                worst_error=round(float(err.max()), 6), ok=bool(err.max() <= 0.0), **detail)


def skipped(name: str, why: str) -> dict:
    """A figure this machine cannot measure (no root, no network namespaces)."""
    return dict(name=name, measured=None, reference=None, ok=None, skipped=why)


def _plain(x):
    if isinstance(x, (list, tuple, np.ndarray)):
        return [round(float(v), 6) for v in x]
    return round(float(x), 6)
