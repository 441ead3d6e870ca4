"""A time (or energy) to target ratio split into its factors, read from the runs' own curves.

``t_R / t_B = (i_R / i_B) x (s_R / s_B)``, where ``i`` is the iteration at which a run's accuracy
curve crosses the target (interpolated in time) and ``s = t / i`` its seconds per iteration until
then; energy adds the mean team power until the crossing, ``E / t``.  The factors say whether a
system lost on the number of iterations it needed (staler models) or on the speed of its
iterations before the crossing (good links leave little to gain), with the numbers.

The rule (fixed before any multi-trace outcome was read): a failing ratio is blamed on *slow
iterations before the crossing* when ``s_R / s_B`` alone exceeds the bound, else on *more iterations
to the target* when ``i_R / i_B > 1``; an energy ratio whose time ratio meets the bound is blamed on
*higher power before the crossing*.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

__all__ = ["crossing_iteration", "split_ratio", "classify_split", "claim_parties"]


def crossing_iteration(curve, t_s: float | None) -> float | None:
    """The iteration at ``t_s`` seconds on an accuracy curve (``time_s``, ``iteration``), interpolated."""
    if curve is None or t_s is None or getattr(curve, "empty", True):
        return None
    a = curve.sort_values("time_s")
    return float(np.interp(t_s, a["time_s"].to_numpy(float), a["iteration"].to_numpy(float)))


def split_ratio(ours, base) -> dict[str, Any] | None:
    """``ours`` against ``base`` (run metrics with ``time_to_target_s``, ``energy_to_target_j``,
    ``accuracy_curve``, ``label``): the factors of the time and energy ratios (None: a crossing is missing)."""
    t_r, t_b = ours.time_to_target_s, base.time_to_target_s
    i_r = crossing_iteration(getattr(ours, "accuracy_curve", None), t_r)
    i_b = crossing_iteration(getattr(base, "accuracy_curve", None), t_b)
    if None in (t_r, t_b, i_r, i_b) or min(t_r, t_b, i_r, i_b) <= 0:
        return None
    out = dict(ours=ours.label, base=base.label, t_ours_s=t_r, t_base_s=t_b, i_ours=i_r, i_base=i_b,
               iter_ratio=i_r / i_b, spi_ratio=(t_r / i_r) / (t_b / i_b), time_ratio=t_r / t_b, power_ratio=None)
    e_r, e_b = getattr(ours, "energy_to_target_j", None), getattr(base, "energy_to_target_j", None)
    if e_r is not None and e_b is not None and e_b > 0:
        out["power_ratio"] = (e_r / t_r) / (e_b / t_b)
        out["energy_ratio"] = e_r / e_b
    return out


def classify_split(sp: dict[str, Any], bound: float, energy: bool = False) -> tuple[str, str]:
    """``(cause, evidence)`` for a failing time (or ``energy``) to target ratio from its factors."""
    ev = (f"{sp['ours']} crossed at iteration {sp['i_ours']:.0f} ({sp['t_ours_s']:.1f} s, "
          f"{sp['t_ours_s'] / sp['i_ours']:.2f} s/iteration), {sp['base']} at {sp['i_base']:.0f} "
          f"({sp['t_base_s']:.1f} s, {sp['t_base_s'] / sp['i_base']:.2f} s/iteration): {sp['iter_ratio']:.2f}x the "
          f"iterations x {sp['spi_ratio']:.2f}x the seconds per iteration = {sp['time_ratio']:.2f}x the time")
    if energy and sp.get("power_ratio") is not None:
        ev += f", x {sp['power_ratio']:.2f}x the mean power = {sp['energy_ratio']:.2f}x the energy"
        if sp["time_ratio"] <= bound and sp["power_ratio"] > 1:
            return "higher power before the crossing", ev
    if sp["spi_ratio"] > bound:
        return "slow iterations before the crossing", ev
    if sp["iter_ratio"] > 1:
        return "more iterations to the target", ev
    return "not explained by the split", ev


def claim_parties(claim: str) -> tuple[str, list[str]] | None:
    """``("ROG-4", ["BSP", "SSP-4", "FLOWN"])`` from ``"time to target, ROG-4 / min(BSP, SSP-4, FLOWN)"``
    (one baseline for ``"... , ROG-4 / BSP"``); None for another shape."""
    m = re.match(r"^[^,]+,\s*(\S+)\s*/\s*(?:min\((.+)\)|(\S+))\s*$", claim)
    if not m:
        return None
    bases = [b.strip() for b in (m.group(2) or m.group(3)).split(",")]
    return m.group(1), bases


def best_base(metrics: Sequence[Any], bases: Sequence[str]):
    """The baseline among ``bases`` (labels) that crossed first; None when none crossed."""
    got = [m for m in metrics if m.label in bases and m.time_to_target_s is not None]
    return min(got, key=lambda m: m.time_to_target_s) if got else None
