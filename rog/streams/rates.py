"""ScaDLES's stream-rate sets (Table I), the rule that scales them to this machine, and the batch policies.

Scaling rule (fixed before any run): what makes a regime is ``t S / b`` (starved below 1, flooded
above).  The paper measured ``t`` = 1.2 s per iteration (ResNet152 at b = 64, Table II), so a paper
rate ``S`` becomes ``S x (b_fixed / 64) x (1.2 s / t_here)`` here, with ``b_fixed`` the run's fixed
batch and ``t_here`` its compute pacing target (quick-cpu: 0.28 s).  The batch window scales the
other way, ``1 s x t_here / 1.2 s``, so a rate-proportional batch is ``b_fixed x S_paper / 64`` as in
the paper.  Draws below :data:`RATE_FLOOR` paper samples/s are raised to it (the released code's
vectors never go below 12; the paper's b_min is 8).
"""

from __future__ import annotations

import math

import numpy as np

# name -> (distribution, mean, standard deviation), paper samples/s (Table I); "p" = the primed sets
RATE_SETS = {"S1": ("uniform", 38.0, 24.0), "S2": ("uniform", 300.0, 112.0),
             "S1p": ("normal", 64.0, 24.0), "S2p": ("normal", 256.0, 28.0)}
PAPER_BATCH = 64  # conventional DDL's fixed batch
PAPER_ITER_S = 1.2  # ResNet152's iteration time at b = 64 (Table II)
RATE_FLOOR = 8.0  # paper samples/s: the lowest rate a draw may take
BATCH_POLICIES = ("fixed", "rate_proportional")
B_MIN, B_MAX = 8, 1024  # rate-proportional batch bounds (paper section IV)


def set_scale(fixed_batch: int, iter_s: float) -> float:
    """Factor from paper rates to this machine's: ``(fixed_batch / 64) x (1.2 / iter_s)``."""
    if not (iter_s > 0 and math.isfinite(iter_s)):
        raise ValueError(f"iteration time must be a positive number of seconds, got {iter_s!r}")
    return (fixed_batch / PAPER_BATCH) * (PAPER_ITER_S / iter_s)


def draw_rates(name: str, n_workers: int, seed: int, scale: float = 1.0) -> list[float]:
    """One rate per worker from set ``name`` (seeded), in paper units times ``scale``, rounded to 0.1."""
    if name not in RATE_SETS:
        raise ValueError(f"unknown rate set {name!r}; choose from {', '.join(RATE_SETS)}")
    dist, mean, sd = RATE_SETS[name]
    rng = np.random.default_rng([int(seed), 0x5CAD, list(RATE_SETS).index(name)])
    if dist == "uniform":  # mean +- sqrt(3) sd has standard deviation sd
        half = math.sqrt(3.0) * sd
        x = rng.uniform(mean - half, mean + half, size=n_workers)
    else:
        x = rng.normal(mean, sd, size=n_workers)
    return [round(float(max(v, RATE_FLOOR)) * scale, 1) for v in x]


def batch_size(policy: str, rate: float, window_s: float, fixed_batch: int) -> int:
    """``fixed``: ``fixed_batch``; ``rate_proportional``: ``clip(round(rate x window_s), 8, 1024)``."""
    if policy == "fixed":
        return int(fixed_batch)
    if policy != "rate_proportional":
        raise ValueError(f"batch policy must be one of {', '.join(BATCH_POLICIES)}, got {policy!r}")
    return int(min(max(round(rate * window_s), B_MIN), B_MAX))
