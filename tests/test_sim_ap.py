"""The shared access point of the simulator (rog/sim_links.py): fair sharing by hand, the deadline rule, a BSP run."""

import math

import numpy as np
import pytest
import simpy

from rog.links import RateTrace, constant_link
from rog.local_update import LocalUpdateConfig
from rog.policies.registry import make_policy
from rog.rows import RowPartition
from rog.sim import SimConfig, simulate
from rog.sim_links import SharedAccessPoint, deliver_chunks, max_min_shares, next_change_s

MB = 1e6 / 8  # bytes per second at 1 Mbit/s


def _run(ap, jobs):
    """Start each (start_s, link, sizes, mandatory, deadline_s) at its time; the deliveries in job order."""
    env = simpy.Environment()
    ap.attach(env)
    out = [None] * len(jobs)

    def one(i, start, link, sizes, m, dl):
        yield env.timeout(start)
        out[i] = yield from ap.transmit(link, np.asarray(sizes), m, dl)

    for i, j in enumerate(jobs):
        env.process(one(i, *j))
    env.run()
    return out


def test_max_min_shares_by_hand():
    # capacity 60: the 10-limited transfer keeps 10, the other two split the remaining 50
    assert np.allclose(max_min_shares(np.array([100.0, 10.0, 100.0]), 60.0), [25.0, 10.0, 25.0])
    assert np.allclose(max_min_shares(np.array([5.0, 7.0]), 100.0), [5.0, 7.0])  # capacity not binding
    assert np.allclose(max_min_shares(np.array([math.inf, math.inf]), 8.0), [4.0, 4.0])


def test_one_transfer_under_a_wide_ap_matches_its_own_link():
    link = RateTrace([0.0, 0.3, 0.7], [40.0, 5.0, 80.0], loop=True, period_s=1.0)
    sizes = np.full(12, 20_000)
    ref = deliver_chunks(link, 0.25, sizes, 3, 0.5)
    (got,) = _run(SharedAccessPoint(1000.0), [(0.25, link, sizes, 3, 0.5)])
    assert got.n_delivered == ref.n_delivered
    assert got.end_s == pytest.approx(ref.end_s)
    assert got.mandatory_end_s == pytest.approx(ref.mandatory_end_s)


def test_two_transfers_share_the_ap_fairly_by_hand():
    # own links 100 Mbit/s, AP 100 Mbit/s. A: 1.25e6 B from t=0; B: 0.625e6 B from t=0.05.
    # 0..0.05: A alone at 100 -> 0.625e6 B sent; then both at 50 Mbit/s (6.25e6 B/s):
    # B needs 0.625e6 / 6.25e6 = 0.1 s -> ends at 0.15; A has 0.625e6 - 0.625e6 = 0 left at 0.15 too.
    fast = constant_link(100.0)
    a, b = _run(SharedAccessPoint(100.0), [(0.0, fast, [1_250_000], 1, None), (0.05, fast, [625_000], 1, None)])
    assert b.end_s == pytest.approx(0.15)
    assert a.end_s == pytest.approx(0.15)


def test_slow_own_link_keeps_its_rate_the_rest_goes_to_the_other():
    # AP 60, own links 10 and 100: rates 10 and 50. 1.25e6 B at 50 Mbit/s = 0.2 s; 0.125e6 B at 10 = 0.1 s,
    # after which the other gets min(100, 60) = 60: 0.1 s at 50 (0.625e6) then 0.625e6 at 60 -> 0.0833 s
    ap = SharedAccessPoint(60.0)
    a, b = _run(ap, [(0.0, constant_link(100.0), [1_250_000], 1, None), (0.0, constant_link(10.0), [125_000], 1, None)])
    assert b.end_s == pytest.approx(0.1)
    assert a.end_s == pytest.approx(0.1 + 625_000 / (60 * MB))
    assert ap.bytes_carried == pytest.approx(1_375_000)


def test_deadline_rule_under_contention():
    # two equal transfers of 4 chunks of 125e3 B on 100 Mbit/s links through a 100 Mbit/s AP: 50 each,
    # a chunk every 0.02 s. Deadline 0.05 s: 2 chunks through (0.02, 0.04), the third in flight is dropped;
    # 1 mandatory chunk: delivered 2, end at the deadline.
    fast = constant_link(100.0)
    x, y = _run(SharedAccessPoint(100.0), [(0.0, fast, [125_000] * 4, 1, 0.05)] * 2)
    for d in (x, y):
        assert d.n_delivered == 2 and d.end_s == pytest.approx(0.05)
        assert d.mandatory_end_s == pytest.approx(0.02)
    # 3 mandatory chunks: the third is sent on past the deadline, alone at the rate still shared (0.06)
    x, y = _run(SharedAccessPoint(100.0), [(0.0, fast, [125_000] * 4, 3, 0.05)] * 2)
    assert x.n_delivered == 3 and x.end_s == pytest.approx(0.06)


def test_capacity_from_a_trace_changes_the_rate():
    # AP 10 Mbit/s for 0.1 s then 100: a 250e3 B transfer sends 125e3 B by 0.1, the rest at 100 in 0.01 s
    cap = RateTrace([0.0, 0.1], [10.0, 100.0])
    (d,) = _run(SharedAccessPoint(cap), [(0.0, constant_link(1000.0), [250_000], 1, None)])
    assert d.end_s == pytest.approx(0.11)
    assert next_change_s(cap, 0.05) == pytest.approx(0.1) and next_change_s(cap, 0.2) == math.inf


def test_bsp_push_phase_is_n_payloads_over_the_ap():
    part = RowPartition.from_shapes([("a", (40, 50)), ("b", (30,))])
    W, ap_mbit = 4, 20.0
    sims = {}
    for ap in (None, SharedAccessPoint(ap_mbit)):
        cfg = SimConfig(partition=part, n_workers=W, policy=make_policy("BSP"), iterations=3, compute_s=0.5,
                        gradient_fn=lambda r, p, n: np.full(part.n_elements, 0.01 * (r + 1), np.float32),
                        uplinks=constant_link(1000.0), downlinks=constant_link(1000.0), shared_ap=ap,
                        local_update=LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.0, milestones=()))
        sims[ap is None] = simulate(cfg, flush=False)
    alone, shared = sims[True], sims[False]
    for rec_a, rec_s in zip(sorted(alone.records, key=lambda r: (r.iteration, r.worker)),
                            sorted(shared.records, key=lambda r: (r.iteration, r.worker))):
        # every worker pushes at once: the AP carries W pushes at ap_mbit
        assert rec_s.push_s == pytest.approx(W * rec_a.push_bytes / (ap_mbit * MB), rel=1e-6)
        assert rec_s.pull_s == pytest.approx(W * rec_a.pull_bytes / (ap_mbit * MB), rel=1e-6)


@pytest.mark.parametrize("name,threshold", [("BSP", None), ("SSP", 2), ("ROG", 2)])
def test_aggregate_pending_gives_the_per_worker_buffers_values(name, threshold):
    part = RowPartition.from_shapes([("a", (30, 40)), ("b", (20,)), ("c", (12, 25))])
    links = [RateTrace([0.0, 0.4, 0.9], [rate, rate / 8, rate * 2], loop=True, period_s=1.3) for rate in (3.0, 1.5, 6.0)]
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(part.n_elements).astype(np.float32) for _ in range(5)]
    out = {}
    for agg in (False, True):
        cfg = SimConfig(partition=part, n_workers=3, policy=make_policy(name, threshold), iterations=6,
                        compute_s=[0.2, 0.3, 0.25], gradient_fn=lambda r, p, n: grads[(r + n) % 5] + 0.01 * p,
                        uplinks=links, downlinks=links, aggregate_pending=agg,
                        local_update=LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.0,
                                                       milestones=()))
        out[agg] = simulate(cfg)  # flushed: every push and pull applied
    a, b = out[False], out[True]
    for r in range(3):
        assert np.allclose(a.params[r], b.params[r], rtol=1e-5, atol=1e-6)
        assert np.allclose(a.pending[r], b.pending[r], atol=1e-6)  # both flushed: the residuals of the codec
    key = lambda rec: (rec.worker, rec.iteration)  # noqa: E731
    for x, y in zip(sorted(a.records, key=key), sorted(b.records, key=key)):
        assert (x.t_end_s, x.push_rows, x.pull_rows) == pytest.approx((y.t_end_s, y.push_rows, y.pull_rows))
