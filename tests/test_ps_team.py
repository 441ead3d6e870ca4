"""The in-process team harness of tests/conftest.py (``ps_team``): it runs a real parameter server and
its workers, returns quietly when all finish, and fails naming a worker that raised."""

from __future__ import annotations

import numpy as np
import pytest

from rog.codecs.compression import RawCodec
from rog.local_update import LocalUpdate, LocalUpdateConfig
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import ParameterServer, WorkerEngine, aligned_zeros

RULE = LocalUpdateConfig(lr=0.1, momentum=0.0, nesterov=False, weight_decay=0.0, milestones=())


def _partition() -> RowPartition:
    from torch import nn

    return RowPartition.from_module(nn.Linear(40, 30))


def _engine(part, link):
    params = aligned_zeros(part.n_elements)
    return WorkerEngine(link, part, params, make_policy("BSP"), RawCodec(), LocalUpdate(part.n_elements, RULE),
                        wait_timeout_s=10.0)


def test_a_team_trains_and_every_worker_ends_with_the_server_model(ps_team):
    part = _partition()
    ps = ParameterServer(part, 2, make_policy("BSP"), RawCodec(), join_timeout_s=10.0, wait_timeout_s=10.0)
    engines = {}

    def body(k, link):
        e = engines[k] = _engine(part, link)
        e.join(10.0)
        for n in range(3):
            e.step(np.full(part.n_elements, k + 1, dtype=np.float32))
        e.flush()
        e.close()

    ps_team(ps, body, 2)
    # plain SGD at lr 0.1 on constant gradients 1 and 2: each worker's model is 0 - 3 * 0.1 * (1 + 2) / 2
    for e in engines.values():
        np.testing.assert_allclose(e.params, -0.45, rtol=1e-6)
    assert ps.finished_workers == [0, 1]


def test_a_worker_that_raises_fails_the_harness_by_name(ps_team):
    part = _partition()
    ps = ParameterServer(part, 1, make_policy("BSP"), RawCodec(), join_timeout_s=5.0, wait_timeout_s=5.0)

    def body(k, link):
        raise RuntimeError(f"worker {k} broke before joining")

    with pytest.raises(AssertionError, match="worker 0 broke before joining"):
        ps_team(ps, body, 1, worker_join_s=20.0, ps_join_s=10.0)
