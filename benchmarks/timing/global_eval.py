"""The global evaluation's time grid against real time (rog.runtime.global_eval): three BSP workers stepping
every 20 ms while a cheap evaluation runs every 0.1 s; on a quiet machine no grid point is skipped."""

from __future__ import annotations

import time

import numpy as np

from rog.codecs.compression import RawCodec
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import ParameterServer
from rog.runtime.global_eval import start_global_eval

from .figures import figure
from .team import TIMEOUT_S, plain_engine, run_threads

EVERY_S = 0.1


def grid_run(steps: int = 30, step_s: float = 0.02, n_workers: int = 3) -> list[dict]:
    """The global evaluation records of a run of ``n_workers`` workers taking ``steps`` steps ``step_s`` apart."""
    part = RowPartition.from_shapes([("w", (8, 8))])
    ps = ParameterServer(part, n_workers, make_policy("BSP", None), RawCodec(), wait_timeout_s=TIMEOUT_S,
                         join_timeout_s=TIMEOUT_S)
    start_global_eval(ps, lambda total: (float(np.abs(total).sum()), 50.0), EVERY_S)

    def work(k, end):
        eng = plain_engine(end, part)
        eng.join(TIMEOUT_S)
        for _ in range(steps):
            time.sleep(step_s)
            eng.step(np.full(part.n_elements, 0.1, dtype=np.float32))
        eng.flush()
        eng.close()

    run_threads(ps, work, n_workers)
    return ps.global_evals


def grid_figures() -> list[dict]:
    """Grid points skipped at an evaluation cost far below the grid step: none."""
    recs = grid_run()
    return [figure("global_eval.skipped", recs[-1]["skipped"] if recs else float("nan"), 0, 0, n_evals=len(recs),
                   every_s=EVERY_S)]
