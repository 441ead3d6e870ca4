"""ADSP's null models: what the paced compute alone gives, with no communication (docs/adsp.md, "Grades").

Compute is paced per worker to ``compute_s x ratio_i`` a mini-batch (Fig. 1: 0.1 s x 1:1:3).  Without any
communication cost the figures still follow from the pacing:

* :func:`paced_waiting_share`, Fig. 1: behind a barrier every step lasts the slowest worker's mini-batch, so
  worker i waits ``1 - ratio_i / max(ratio)`` of each step; the system's share is the mean over workers
  (1:1:3: (2/3 + 2/3 + 0) / 3 = 44.4 %).  SSP's bound (40 steps) only delays the same steady state;
* :func:`paced_step_rates`, Fig. 4c: with no barrier (ADSP) the team trains ``sum_i 1 / (compute_s ratio_i)``
  mini-batches a second (23.3 at 1:1:3); behind a barrier (BSP, SSP in steady state, Fixed ADACOMM's
  every-tau synchronisation) ``W / (compute_s max(ratio))`` (10.0).
The same rules that judge the measurement judge these figures (:mod:`rog.papers.adsp.grading`).
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["paced_waiting_share", "paced_step_rates", "STEP_RATE_MIN_RATIO"]

STEP_RATE_MIN_RATIO = 1.2  # Fig. 4c agrees when ADSP's steps/s is at least this times every other system's


def _check(ratios: Sequence[float]) -> list[float]:
    rs = [float(r) for r in ratios]
    if not rs or min(rs) <= 0:
        raise ValueError(f"compute ratios must be positive numbers, got {list(ratios)}")
    return rs


def paced_waiting_share(ratios: Sequence[float]) -> float:
    """The mean over workers of the share of a barrier step spent waiting, from the pacing alone."""
    rs = _check(ratios)
    slowest = max(rs)
    return sum(1.0 - r / slowest for r in rs) / len(rs)


def paced_step_rates(ratios: Sequence[float], compute_s: float) -> dict[str, float]:
    """Steps (mini-batches at all workers) per second from the pacing alone: ``no_barrier`` (ADSP) and
    ``barrier`` (every system that waits for the slowest worker in steady state)."""
    rs = _check(ratios)
    if compute_s <= 0:
        raise ValueError(f"compute_s must be positive, got {compute_s}")
    return dict(no_barrier=sum(1.0 / (compute_s * r) for r in rs), barrier=len(rs) / (compute_s * max(rs)))
