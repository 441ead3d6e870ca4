"""An in-process parameter server and one thread per worker over in-process links, for the timing figures
that need a real training step (the tests use their own harness, ``tests/conftest.py::run_ps_team``)."""

from __future__ import annotations

import threading

from rog.transport import inproc_pair

TIMEOUT_S = 60.0  # joins and waits of the teams: wide (a first torch pass took > 20 s at load average 26)


def run_threads(ps, body, n_workers: int, join_s: float = 2 * TIMEOUT_S) -> None:
    """Start ``ps`` on ``n_workers`` in-process links, run ``body(k, worker_end)`` per worker in a thread, and
    raise the first worker's error (or name the threads still running)."""
    ends = [inproc_pair(k) for k in range(n_workers)]
    ps_thread = ps.start([server for _, server in ends])
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            body(k, ends[k][0])
        except BaseException as e:  # noqa: BLE001 - raised below
            errors.append(e)
            ends[k][0].abort()

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)
    if errors or any(t.is_alive() for t in threads):
        ps.stop()
    ps_thread.join(join_s)
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads) or ps_thread.is_alive():
        raise RuntimeError("a worker or the parameter server was still running after the join timeout")


def plain_engine(end, part, policy: str = "BSP"):
    """A worker engine on ``end`` with plain SGD (lr 0.1, no momentum), raw rows, parameters at zero."""
    from rog.codecs.compression import RawCodec
    from rog.local_update import LocalUpdate, LocalUpdateConfig
    from rog.policies import make_policy
    from rog.runtime import WorkerEngine, aligned_zeros

    rule = LocalUpdateConfig(lr=0.1, momentum=0.0, nesterov=False, weight_decay=0.0, milestones=())
    return WorkerEngine(end, part, aligned_zeros(part.n_elements), make_policy(policy, None), RawCodec(),
                        LocalUpdate(part.n_elements, rule), wait_timeout_s=TIMEOUT_S)
