"""Conservation end to end over real loopback TCP sockets, compression off, with the transport's rate
limit on both directions of every link: for ROG (whose deadlines cut transmissions: asserted) and for a
whole-model policy (SSP), every worker finally holds w0 - (sum of all updates every worker produced) / W."""

from __future__ import annotations

import secrets

import pytest

from rog.transport import Listener, TransportConfig, connect
from test_runtime_server import Run, assert_conserved

SECRET = secrets.token_bytes(32)  # per test run, never written down
RATE_MBIT = 4.0  # a full raw push of the test model (8.2 KB) takes about 17 ms


def socket_pairs(n_workers: int, rate_mbit: float):
    cfg = TransportConfig(secret=SECRET, rate_mbit_at=rate_mbit)
    listener = Listener("127.0.0.1", 0, config=cfg, worker_ids=set(range(n_workers)))
    try:
        workers = [connect(*listener.address, worker_id=r, config=cfg) for r in range(n_workers)]
        ps_ends = sorted((listener.accept(10) for _ in range(n_workers)), key=lambda c: c.worker_id)
    finally:
        listener.close()
    return list(zip(workers, ps_ends))


@pytest.mark.parametrize("name, s, options", [("ROG", 2, dict(initial_budget_s=0.004)), ("SSP", 1, {})])
def test_conservation_over_sockets_with_rate_limit(name, s, options):
    W = 3
    run = Run(name, s, W=W, N=8, pairs=socket_pairs(W, RATE_MBIT), policy_options=options).go()
    assert_conserved(run)
    cut = [rep for rep in run.ps.reports if rep.rows_delivered < rep.rows_planned]
    if name == "ROG":
        assert cut, "no ROG transmission was cut by its deadline (the scenario did not happen)"
        assert all(rep.deadline_s is not None for rep in cut)
    else:
        assert not cut and all(rep.deadline_s is None for rep in run.ps.reports)
