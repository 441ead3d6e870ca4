"""The global model evaluated at the parameter server on one time grid, the same for every system.

The PS holds no model, only ``total`` (the sum of every committed push, weighted 1/W): the global
model is the initial one minus it.  :func:`start_global_eval` starts a thread that, from the moment
every worker has joined (the same origin as :mod:`rog.runtime.scheduler`), evaluates
``evaluate(total)`` at run times ``0, every_s, 2 every_s, ...`` and logs each result as a
``global_eval`` event: the grid time ``t_grid_s``, ``loss``, ``accuracy`` (per cent), and what the
evaluation cost (``duration_s`` wall, ``cpu_s`` of this thread).  The copy of ``total`` is taken under
the server's lock; the evaluation runs outside it, in the PS process, so it costs the workers nothing
but the shared cores.  A grid point whose evaluation would start more than ``every_s`` late (the
previous one overran) is skipped and counted (``skipped`` on the next record), never run late.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

from .scheduler import wait_until_joined

_END_CHECK_S = 0.1  # a waiting evaluator notices the end of the run within this long
STOP_JOIN_S = 10.0  # how long stop_global_eval waits for an evaluation under way


def start_global_eval(ps, evaluate: Callable, every_s: float) -> threading.Thread:
    """Start the evaluator thread for ``ps`` (a ParameterServer); ``evaluate(total) -> (loss, accuracy_pct)``.
    Results are also kept in ``ps.global_evals`` (dicts as logged)."""
    if not (every_s > 0 and math.isfinite(every_s)):
        raise ValueError(f"every_s must be a positive number of seconds, got {every_s!r}")
    ps.global_evals = []
    t = threading.Thread(target=_loop, args=(ps, evaluate, float(every_s)), name="rog-ps-global-eval", daemon=True)
    t.start()
    return t


def stop_global_eval(ps, thread: threading.Thread | None) -> None:
    """After ``ps`` has finished: wait for the evaluator (and the PS's scheduler) to leave torch, so that the
    process never exits while a daemon thread is inside a torch operation (which aborts the process)."""
    ps.stopping.set()
    for t in (thread, getattr(ps, "_sched_thread", None)):
        if t is not None:
            t.join(STOP_JOIN_S)


def _loop(ps, evaluate: Callable, every_s: float) -> None:
    wait_until_joined(ps)
    t0 = time.monotonic()
    n, skipped = 0, 0
    while not (ps.ended or ps.stopping.is_set()):
        t_grid = n * every_s
        while not ps.ended and (wait := t0 + t_grid - time.monotonic()) > 0:  # wake soon after the run ends
            if ps.stopping.wait(min(wait, _END_CHECK_S)):
                return
        if ps.ended:
            return
        if time.monotonic() - (t0 + t_grid) > every_s:  # more than a grid step late: skip, never run late
            n, skipped = n + 1, skipped + 1
            continue
        with ps.cond:
            total = ps.state.total.copy()
        w0, c0 = time.monotonic(), time.thread_time()
        try:
            loss, acc = evaluate(total)
        except Exception as e:  # noqa: BLE001 - reported through ps.errors; training goes on
            with ps.cond:
                ps.errors.append((-1, e))
            return
        rec = dict(t_grid_s=t_grid, loss=float(loss), accuracy=float(acc), duration_s=time.monotonic() - w0,
                   cpu_s=time.thread_time() - c0, skipped=skipped)
        ps.global_evals.append(rec)
        ps.log("global_eval", w0, **rec)
        n += 1
