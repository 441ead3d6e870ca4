"""A paced training step against its target (rog.testbed.compute_fit): a lone BSP worker's engine step at a
pass's fitted compute time, at 4 x the base batch and at the base batch, for a made-up fit and for the
shipped quick-cpu profile's measured fit, and at the laptop profile's constant."""

from __future__ import annotations

import time

import numpy as np

from rog.codecs.compression import RawCodec
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import ParameterServer
from rog.testbed.profiles import load_profile

from .figures import figure
from .team import TIMEOUT_S as STEP_TIMEOUT_S, plain_engine, run_threads


def one_worker_step_s(target_s: float, team=run_threads) -> float:
    """Wall seconds (the engine's ``compute_s``) of one paced BSP iteration of a lone worker whose target is
    ``target_s``; ``team(ps, body, n)`` runs the worker against the server."""
    part = RowPartition.from_shapes([("w", (16, 16))])
    ps = ParameterServer(part, 1, make_policy("BSP", None), RawCodec(), wait_timeout_s=STEP_TIMEOUT_S,
                         join_timeout_s=STEP_TIMEOUT_S)
    got = []

    def work(k, end):
        eng = plain_engine(end, part)
        eng.join(STEP_TIMEOUT_S)
        eng.compute_target_s = target_s  # what the worker loop sets for a streamed pass
        t0 = time.monotonic()
        got.append(eng.step(np.ones(part.n_elements, dtype=np.float32), compute_started_at=t0).compute_s)
        eng.flush()
        eng.close()

    team(ps, work, 1)
    return got[0]


def fitted_time_s(compute_s: float, a_s: float, c_s_per_sample: float, anchor: int, batch: int) -> float:
    """By hand: ``compute_s`` at ``anchor`` samples scaled by the line ``a + c b``."""
    return compute_s * (a_s + c_s_per_sample * batch) / (a_s + c_s_per_sample * anchor)


def step_figures() -> list[dict]:
    """Steps of the quick-cpu profile at 4 b0 and b0 (its measured fit) and of the laptop at 4 b0 (no fit:
    the constant), each within 10 % of the time computed by hand from the profile's numbers."""
    out = []
    q = load_profile("quick-cpu")
    fit, c_s, b0 = q.compute_fit, q.compute_s_per_iteration, q.batch_size
    pacer = q.pacer(c_s, b0)
    for batch in (4 * b0, b0):
        expected = fitted_time_s(c_s, fit.a_s, fit.c_s_per_sample, b0, batch)
        out.append(figure(f"compute_fit.quick_cpu_step_s@{batch}", one_worker_step_s(pacer.target_s(batch)),
                          expected, 0.10, rel=True))
    lap = load_profile("laptop")
    got = one_worker_step_s(lap.pacer(0.2, lap.batch_size).target_s(4 * lap.batch_size))
    out.append(figure(f"compute_fit.laptop_step_s@{4 * lap.batch_size}", got, 0.2, 0.10, rel=True))
    return out
