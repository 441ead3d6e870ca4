"""The in-process simulator: hand-computed timelines, conservation, degenerate cases, RSP bound, sign codec.

Every run uses the real policies (rog.policies.registry), the real codecs and chunk planner.
"""

import math

import numpy as np
import pytest

from rog.chunks import plan_chunks
from rog.codecs.compression import RawCodec, SignCodec
from rog.links import InfiniteLink, RateTrace, constant_link
from rog.local_update import LocalUpdateConfig
from rog.policies.registry import make_policy
from rog.rows import RowPartition
from rog.sim import (
    SimConfig,
    SimDeadlock,
    Simulation,
    SimulationError,
    _delivered,
    deliver_chunks,
    simulate,
)
from rog.wire import encode_frame

PART = RowPartition.from_shapes([("a", (20, 50)), ("b", (50,)), ("c", (25, 40)), ("d", (7,))])  # 47 rows
LU = LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, milestones=())
POLICIES = [("BSP", None), ("SSP", 2), ("FLOWN", 2), ("ROG", 2), ("ROG", 4)]


def make_grad(partition, n_workers, noise=0.1, seed=0):
    """A quadratic per worker (pull towards its own target) plus deterministic noise per (worker, n)."""
    targets = np.random.default_rng(seed).standard_normal((n_workers, partition.n_elements)).astype(np.float32)

    def grad(r, w, n):
        eps = np.random.default_rng(10_000 * seed + 1000 * r + n).standard_normal(w.size).astype(np.float32)
        return (w - targets[r]) + np.float32(noise) * eps

    return grad


def bad_links(n_workers, seed):
    """Slow, fluctuating links with outages, different per worker (8-9 KB raw pushes take ~0.1-1 s)."""
    rng = np.random.default_rng(seed)
    links = []
    for _ in range(n_workers):
        times = np.concatenate([[0.0], np.cumsum(rng.uniform(0.05, 0.4, 30))])
        rates = rng.choice([0.0, 0.05, 0.2, 0.5, 2.0], size=times.size)
        rates[0] = 0.5
        links.append(RateTrace(times, rates, loop=True, period_s=float(times[-1] + 0.3)))
    return links


def slow_worker(r, n):
    return 0.6 if r == 0 else 0.2


def random_compute(r, n):
    return float(np.random.default_rng(7 + 31 * r + 1009 * n).uniform(0.1, 0.8))


def config(policy, *, W=4, N=12, codec=None, compute=slow_worker, up=None, down=None, record=True, **kw):
    name, s = policy
    part = kw.pop("partition", PART)
    return SimConfig(
        partition=part,
        n_workers=W,
        policy=make_policy(name, s, **kw.pop("policy_options", {})),
        gradient_fn=kw.pop("gradient_fn", None) or make_grad(part, W),
        codec=codec or RawCodec(),
        iterations=N,
        compute_s=compute,
        uplinks=up,
        downlinks=down,
        chunk_bytes=kw.pop("chunk_bytes", 1024),
        local_update=kw.pop("local_update", LU),
        record_updates=record,
        **kw,
    )


def tview(flat, t):
    """Tensor t of a flat buffer as a flat float64 vector."""
    return PART.tensor_view(flat, t).reshape(-1).astype(np.float64)


def reference_params(sim):
    """w0 - sum over every worker and iteration of u / W, computed in float64 from the records."""
    ref = sim.initial_params.astype(np.float64)
    for rec in sim.updates:
        ref -= rec.update.astype(np.float64) / sim.n_workers
    return ref


# ---------------------------------------------------------------------------- chunk delivery by hand
def test_deliver_chunks_by_hand():
    link = constant_link(8.0)  # 1e6 B/s
    sizes = [1000, 1000, 1000, 500]  # chunk ends at 1.001, 1.002, 1.003, 1.0035
    d = deliver_chunks(link, 1.0, sizes, 1, 0.0025)
    assert (d.n_delivered, d.bytes_delivered) == (2, 2000)
    assert d.end_s == pytest.approx(1.0025) and d.mandatory_end_s == pytest.approx(1.001)
    d = deliver_chunks(link, 1.0, sizes, 3, 0.0015)  # mandatory part outlasts the deadline
    assert d.n_delivered == 3 and d.end_s == pytest.approx(1.003)
    d = deliver_chunks(link, 1.0, sizes, 0, None)
    assert d.n_delivered == 4 and d.end_s == pytest.approx(1.0035) and d.mandatory_end_s is None
    d = deliver_chunks(link, 1.0, sizes, 0, 10.0)  # everything through early: ends with the last byte
    assert d.n_delivered == 4 and d.end_s == pytest.approx(1.0035)
    d = deliver_chunks(link, 1.0, sizes, 0, 0.0)
    assert (d.n_delivered, d.end_s, d.bytes_delivered) == (0, 1.0, 0)
    d = deliver_chunks(InfiniteLink(), 2.0, sizes, 0, 0.0)  # infinite rate: all through at the start
    assert (d.n_delivered, d.end_s) == (4, 2.0)
    assert deliver_chunks(link, 1.0, [], 0, 0.5).end_s == 1.0


def test_deliver_chunks_outages():
    # 1000 B/s for 1 s, then dead forever
    link = RateTrace([0.0, 1.0], [0.008, 0.0])
    d = deliver_chunks(link, 0.0, [600, 600], 1, 5.0)  # the second chunk never gets through: dropped
    assert d.n_delivered == 1 and d.end_s == 5.0 and d.mandatory_end_s == pytest.approx(0.6)
    with pytest.raises(SimulationError, match="mandatory"):
        deliver_chunks(link, 0.0, [600, 600], 2, 5.0)
    with pytest.raises(SimulationError, match="never"):
        deliver_chunks(link, 0.0, [600, 600], 0, None)
    # an outage in the middle: the transfer waits
    link = RateTrace([0.0, 1.0, 3.0], [0.008, 0.0, 0.008])
    d = deliver_chunks(link, 0.0, [600, 600], 0, None)
    assert d.end_s == pytest.approx(3.2)


# ---------------------------------------------------------------------------- a timeline by hand
def test_bsp_timeline_by_hand():
    # one (40, 25) tensor = 40 rows of 100 raw bytes, plus a 7-element bias row (28 B).  With
    # 1000-byte chunks: 4 chunks of 10 rows (28 + 12 + 1000 B each) and the bias alone (28 + 12 + 28):
    # 4228 frame bytes per transfer; at 8 Mbit/s = 1e6 B/s that is 4.228 ms.
    part = RowPartition.from_shapes([("w", (40, 25)), ("b", (7,))])
    cfg = config(
        ("BSP", None), W=2, N=2, partition=part, compute=[1.0, 2.0], up=constant_link(8.0), down=constant_link(8.0),
        chunk_bytes=1000,
    )
    sim = simulate(cfg)
    x = 0.004228
    recs = {(r.worker, r.iteration): r for r in sim.records}
    r01, r11, r02, r12 = recs[0, 1], recs[1, 1], recs[0, 2], recs[1, 2]
    assert r01.push_bytes == r01.pull_bytes == 4228
    assert r01.push_s == pytest.approx(x) and r01.pull_s == pytest.approx(x)
    # worker 0 waits at the barrier from 1 + x until worker 1's push lands at 2 + x
    assert r01.gate_s == pytest.approx(1.0) and r01.stall_s == pytest.approx(1.0)
    assert r11.gate_s == 0.0
    assert r01.t_end_s == pytest.approx(2 + 2 * x) and r11.t_end_s == pytest.approx(2 + 2 * x)
    assert r02.gate_s == pytest.approx(1.0) and r12.t_end_s == pytest.approx(4 + 4 * x)
    assert r02.iteration_s == pytest.approx(2 + 2 * x)
    assert r01.gate_staleness == 0 and r01.push_share == 1.0 and math.isnan(r01.push_deadline_s)
    # the same bytes as real frames of the real codec
    cp = plan_chunks(part, np.arange(part.n_rows), part.n_rows, RawCodec().row_wire_bytes(part), 1000)
    codec, acc = RawCodec(), part.new_flat()
    scales = codec.tensor_scales(part, acc)
    frames = [encode_frame(codec.encode(part, acc, scales, ch), codec, 1, k) for k, ch in enumerate(cp.chunks)]
    assert sum(map(len, frames)) == 4228
    s = sim.summary()
    assert s["records"] == 4 and s["gate_s"] == pytest.approx(0.5) and s["end_s"] == pytest.approx(4 + 4 * x)
    assert s["push_bytes"] == 4228
    by_n = sim.summary(by_iteration=True)
    assert sorted(by_n) == [1, 2] and by_n[1]["stall_s"] == pytest.approx(0.5)


@pytest.mark.parametrize("codec", [RawCodec(), SignCodec()], ids=["raw", "sign"])
def test_frame_bytes_match_encoded_frames(codec):
    sim = simulate(config(("SSP", 1), W=2, N=1, codec=codec, chunk_bytes=300), flush=False)
    cp = plan_chunks(PART, np.arange(PART.n_rows), PART.n_rows, codec.row_wire_bytes(PART), 300)
    acc = np.random.default_rng(1).standard_normal(PART.n_elements).astype(np.float32)
    scales = codec.tensor_scales(PART, acc)
    frames = [encode_frame(codec.encode(PART, acc, scales, ch), codec, 1, k) for k, ch in enumerate(cp.chunks)]
    expected = sum(map(len, frames))
    assert {r.push_bytes for r in sim.records} == {expected}
    assert {r.pull_bytes for r in sim.records} == {expected}


@pytest.mark.parametrize("codec", [RawCodec(), SignCodec()], ids=["raw", "sign"])
def test_delivered_chunks_applied_together_equal_one_by_one(codec):
    # the simulator applies a transmission's delivered chunks in one codec call; that must give
    # bit-identical buffers to applying them chunk by chunk (as a real receiver does)
    rng = np.random.default_rng(4)
    acc = rng.standard_normal(PART.n_elements).astype(np.float32)
    order = rng.permutation(PART.n_rows)
    cp = plan_chunks(PART, order, 10, codec.row_wire_bytes(PART), 300 if isinstance(codec, RawCodec) else 40)
    k = cp.n_chunks - 2
    assert k >= 2
    scales = codec.tensor_scales(PART, acc)
    out1, acc1 = np.zeros_like(acc), acc.copy()
    for ch in cp.chunks[:k]:
        enc = codec.encode(PART, acc1, scales, ch)
        codec.decode_into(PART, enc, (out1,), weight=0.25)
        codec.commit(PART, acc1, enc)
    out2, acc2 = np.zeros_like(acc), acc.copy()
    enc = codec.encode(PART, acc2, scales, _delivered(cp, k))
    codec.decode_into(PART, enc, (out2,), weight=0.25)
    codec.commit(PART, acc2, enc)
    np.testing.assert_array_equal(out1, out2)
    np.testing.assert_array_equal(acc1, acc2)
    assert out1.any() and (out1 == 0).any()  # some rows delivered, some not


# ---------------------------------------------------------------------------- conservation
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p[0]}{p[1] if p[1] is not None else ''}")
def test_conservation_raw_codec_bad_links(policy):
    W, N = 4, 12
    cfg = config(policy, W=W, N=N, up=bad_links(W, 1), down=bad_links(W, 2), compute=random_compute)
    sim = simulate(cfg)
    assert len(sim.updates) == W * N and len(sim.records) == W * N
    ref = reference_params(sim)
    moved = np.linalg.norm(ref - sim.initial_params)
    assert moved > 1.0  # the updates are not negligible next to float32 rounding of w
    for r in range(W):
        rel = np.linalg.norm(sim.params[r] - ref) / moved
        assert rel <= 1e-5, (r, rel)
        assert not sim.acc[r].any() and not sim.pending[r].any()  # nothing left anywhere
    if policy[0] == "ROG":
        # deadlines really cut transmissions, both ways
        assert any(rec.push_rows < rec.push_rows_planned for rec in sim.records)
        assert any(rec.pull_rows < rec.pull_rows_planned for rec in sim.records)
    else:
        # whole-model systems never cut a transmission
        assert all(rec.push_share == rec.pull_share == 1.0 for rec in sim.records)
    if policy[0] == "FLOWN":
        assert sim.max_in_flight <= 2 and any(rec.admission_s > 0 for rec in sim.records)


def test_conservation_fails_without_the_flush():
    # a control: before the flush, ROG's cut transmissions leave parameters apart from the reference
    W = 3
    sim = simulate(config(("ROG", 2), W=W, N=8, up=bad_links(W, 5), down=bad_links(W, 6)), flush=False)
    ref = reference_params(sim)
    moved = np.linalg.norm(ref - sim.initial_params)
    assert max(np.linalg.norm(p - ref) / moved for p in sim.params) > 1e-3
    sim.flush()
    assert max(np.linalg.norm(p - ref) / moved for p in sim.params) <= 1e-5


# ---------------------------------------------------------------------------- degenerate cases
def _timeline(sim):
    return [
        (r.worker, r.iteration, r.t_start_s, r.t_push_start_s, r.t_pull_start_s, r.t_end_s)
        + (r.gate_s, r.stall_s, r.gate_staleness)
        for r in sim.records
    ]


@pytest.mark.parametrize("compute", [slow_worker, random_compute], ids=["slow-worker", "random"])
def test_bsp_is_ssp0_step_for_step(compute):
    W = 3
    runs = [
        simulate(config(p, W=W, N=8, compute=compute, up=bad_links(W, 3), down=bad_links(W, 4)))
        for p in [("BSP", None), ("SSP", 0)]
    ]
    a, b = runs
    assert a.records == b.records and a.gate_log == b.gate_log
    assert any(not g.ready for g in a.gate_log)  # the barrier did hold workers back
    for pa, pb in zip(a.params, b.params):
        np.testing.assert_array_equal(pa, pb)


@pytest.mark.parametrize("s", [1, 2, 4])
@pytest.mark.parametrize("compute", [slow_worker, random_compute], ids=["slow-worker", "random"])
def test_rog_on_perfect_links_is_ssp(s, compute):
    W, N = 4, 12
    # infinite links: every row of every transmission arrives the moment it is sent
    ssp = simulate(config(("SSP", s), W=W, N=N, compute=compute), flush=False)
    rog = simulate(config(("ROG", s), W=W, N=N, compute=compute), flush=False)
    assert _timeline(rog) == _timeline(ssp)
    assert rog.gate_log == ssp.gate_log
    for pa, pb in zip(rog.params, ssp.params):
        np.testing.assert_array_equal(pa, pb)
    assert all(r.push_share == 1.0 and r.pull_share == 1.0 and r.push_rows == PART.n_rows for r in rog.records)
    if compute is slow_worker:
        assert any(not g.ready for g in rog.gate_log)  # staleness gate did block


# ---------------------------------------------------------------------------- RSP bound
@pytest.mark.parametrize("s", [2, 4])
def test_rog_staleness_bounded_on_bad_links(s):
    W, N = 4, 15
    cfg = config(("ROG", s), W=W, N=N, up=bad_links(W, 11), down=bad_links(W, 12), compute=random_compute)
    sim = simulate(cfg, flush=False)
    assert len(sim.records) == W * N  # no deadlock: every worker finished
    assert all(rec.gate_staleness <= s for rec in sim.records)  # n - min(versions) when the pull went
    assert max(rec.gate_staleness for rec in sim.records) >= 1
    assert any(rec.push_rows < rec.push_rows_planned for rec in sim.records)
    assert all(rec.row_staleness_max <= s for rec in sim.records)  # within one worker too


# ---------------------------------------------------------------------------- sign codec
def test_sign_codec_error_feedback_bound_and_identity():
    """Stated bound: DEFSGDM's per-tensor compressor C(d) = mean|d| * sign(d) leaves
    ||d - C(d)||^2 = ||d||^2 - ||d||_1^2 / n  <=  q^2 ||d||^2 with q = sqrt(1 - 1/n) (n = tensor size).
    With full pushes (BSP), the residual after push n is e_n = d_n - C(d_n), d_n = e_{n-1} + u_n, so
    ||e_n|| <= q (||e_{n-1}|| + ||u_n||) and for the whole run ||e_n|| <= q / (1 - q) * max_k ||u_k||.
    We check the identity at every step and the bound over the run."""
    W, N = 3, 25
    snaps = {}

    base = make_grad(PART, W, noise=0.3)

    def grad(r, w, n):
        snaps[r, n] = holder["sim"].acc[r].copy()  # e_{n-1}: the residual left by push n-1
        return base(r, w, n)

    holder = {}
    cfg = config(("BSP", None), W=W, N=N, codec=SignCodec(), gradient_fn=grad, compute=random_compute)
    sim = Simulation(cfg)
    holder["sim"] = sim
    sim.run()
    n_t = PART.tensor_elements
    q = np.sqrt(1 - 1 / n_t)
    updates = {(u.worker, u.iteration): u.update for u in sim.updates}
    for r in range(W):
        umax = np.zeros(PART.n_tensors)
        for n in range(1, N + 1):
            d = snaps[r, n] + updates[r, n]  # float32, as the worker computes it
            e = snaps[r, n + 1] if n < N else sim.acc[r]
            for t in range(PART.n_tensors):
                dt = tview(d, t)
                et = tview(e, t)
                ut = tview(updates[r, n], t)
                umax[t] = max(umax[t], np.linalg.norm(ut))
                expected_sq = dt @ dt - np.abs(dt).sum() ** 2 / n_t[t]
                assert et @ et == pytest.approx(expected_sq, rel=1e-4, abs=1e-12)
                assert np.linalg.norm(et) <= q[t] / (1 - q[t]) * umax[t] * (1 + 1e-6)
                assert np.linalg.norm(et) > 0  # really compressed: a residual is left
    sim.flush()


def test_sign_codec_rog_workers_agree_up_to_the_residual():
    W, N = 4, 12
    cfg = config(("ROG", 2), W=W, N=N, codec=SignCodec(), up=bad_links(W, 21), down=bad_links(W, 22))
    cfg.compute_s = random_compute
    sim = simulate(cfg, flush=False)
    assert any(rec.push_rows < rec.push_rows_planned for rec in sim.records)
    before = [a.copy() for a in sim.acc]
    sim.flush()
    # the flush push of each worker is one full compression: its residual obeys the identity above
    for r in range(W):
        for t in range(PART.n_tensors):
            d = tview(before[r], t)
            e = tview(sim.acc[r], t)
            assert e @ e == pytest.approx(d @ d - np.abs(d).sum() ** 2 / d.size, rel=1e-4, abs=1e-12)
    # accounting: w_q = w0 - sum(u)/W + sum_r acc_r / W + pending_q  (nothing lost, nothing twice)
    ref = reference_params(sim)
    moved = np.linalg.norm(ref - sim.initial_params)
    worker_residual = sum(a.astype(np.float64) for a in sim.acc) / W
    for q in range(W):
        expected = ref + worker_residual + sim.pending[q]
        assert np.linalg.norm(sim.params[q] - expected) / moved <= 1e-5
    # so workers agree with each other up to the PS residuals
    for q in range(1, W):
        gap = np.linalg.norm(sim.params[q].astype(np.float64) - sim.params[0])
        bound = np.linalg.norm(sim.pending[q]) + np.linalg.norm(sim.pending[0])
        assert gap <= bound * (1 + 1e-4) + 1e-6 * moved
        assert gap > 0  # the sign codec does leave a residual (the check above is not vacuous)


# ---------------------------------------------------------------------------- plumbing
def test_deterministic_given_the_seed():
    W = 3

    def run(seed):
        cfg = config(("ROG", 2), W=W, N=6, up=bad_links(W, 8), down=bad_links(W, 9), codec=SignCodec(), record=False)
        cfg.seed = seed
        return simulate(cfg)

    a, b, c = run(1), run(1), run(2)
    assert a.records == b.records and a.gate_log == b.gate_log
    for pa, pb in zip(a.params, b.params):
        np.testing.assert_array_equal(pa, pb)
    assert not np.array_equal(a.initial_params, c.initial_params)


def test_deadlock_is_reported():
    # BSP with one worker running fewer iterations: the other waits at the barrier forever
    cfg = config(("BSP", None), W=2, N=[3, 2])
    with pytest.raises(SimDeadlock, match="worker 0 in iteration 3 waiting in gate"):
        Simulation(cfg).run()


def test_link_that_never_delivers_is_an_error():
    cfg = config(("SSP", 1), W=2, N=2, up=RateTrace([0.0, 0.01], [1.0, 0.0]))
    with pytest.raises(SimulationError, match="never"):
        Simulation(cfg).run()


def test_policy_views_are_copies():
    W = 2
    sim = Simulation(config(("SSP", 1), W=W, N=1))
    v = sim._server_view()
    v.versions[:] = 99
    assert not sim.versions.any()


def test_flown_stalled_workers_give_their_slot_back():
    # FLOWN(1), 2 slots, one slow worker: the fast workers reach the gate holding both slots; if
    # they kept them while stalled, the slow worker they wait for could never be admitted
    W, N = 4, 6
    sim = simulate(config(("FLOWN", 1), W=W, N=N, compute=slow_worker, up=constant_link(1.0), down=constant_link(1.0)))
    assert len(sim.records) == W * N and sim.max_in_flight <= 2
    assert any(rec.gate_s > 0 for rec in sim.records)
    assert all(rec.gate_staleness <= 1 for rec in sim.records)


def test_required_rows_reach_the_lagging_worker():
    # ROG(2) with one worker on a crawling uplink: the PS asks it for its lagging rows
    W = 3
    ups = bad_links(W, 31)
    ups[0] = RateTrace([0.0, 0.5, 2.0], [0.05, 0.0, 0.02], loop=True, period_s=4.0)
    sim = simulate(config(("ROG", 2), W=W, N=10, up=ups, compute=[0.2, 0.2, 0.2]), flush=False)
    assert all(rec.gate_staleness <= 2 for rec in sim.records)
    assert any(rec.push_required_rows > 0 for rec in sim.records if rec.worker == 0)


@pytest.mark.parametrize(
    "change, word",
    [
        (dict(n_workers=0), "n_workers"),
        (dict(chunk_bytes=0), "chunk_bytes"),
        (dict(iterations=-1), "iterations"),
        (dict(iterations=[1, 2]), "iterations"),
        (dict(uplinks=[InfiniteLink()]), "uplinks"),
        (dict(downlinks=[1.0, 2.0, 3.0]), "downlinks"),
        (dict(compute_s=[1.0]), "compute_s"),
        (dict(initial_params=np.zeros(5)), "initial_params"),
        (dict(policy="ROG"), "policy"),
        (dict(codec="sign"), "codec"),
        (dict(gradient_fn=None), "gradient_fn"),
    ],
)
def test_config_validation(change, word):
    cfg = config(("SSP", 1), W=3, N=2)
    for k, v in change.items():
        setattr(cfg, k, v)
    with pytest.raises(ValueError, match=word):
        Simulation(cfg)


def test_runtime_validation():
    with pytest.raises(ValueError, match="compute_s"):
        Simulation(config(("SSP", 1), W=2, N=1, compute=lambda r, n: -1.0)).run()
    with pytest.raises(ValueError, match="shape"):
        Simulation(config(("SSP", 1), W=2, N=1, gradient_fn=lambda r, w, n: np.zeros(3))).run()
    with pytest.raises(ValueError, match="non-finite"):
        Simulation(config(("SSP", 1), W=2, N=1, gradient_fn=lambda r, w, n: np.full(w.size, np.nan))).run()
    with pytest.raises(ValueError):  # gradient_fn must not write into the worker's parameters
        Simulation(config(("SSP", 1), W=2, N=1, gradient_fn=lambda r, w, n: w.__iadd__(1))).run()
    sim = Simulation(config(("SSP", 1), W=2, N=1))
    with pytest.raises(SimulationError, match="after run"):
        sim.flush()
    sim.run()
    with pytest.raises(SimulationError, match="already"):
        sim.run()


# ---------------------------------------------------------------------------- heavier variants
@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES + [("ROG", 8), ("SSP", 4), ("FLOWN", 4)], ids=str)
@pytest.mark.parametrize("codec", [RawCodec(), SignCodec()], ids=["raw", "sign"])
def test_long_runs_on_the_repository_traces(policy, codec):
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "configs" / "traces"
    traces = [folder / "outdoors-synth.csv", folder / "indoors-synth.csv"]  # shipped with the repository
    W, N = 6, 60
    # the traces (medians 42 and 64 Mbit/s) scaled so a raw push (~8.6 KB) takes about a sample period at the median
    base = [RateTrace.from_csv(p) for p in traces]
    ups = [base[k % len(base)].scaled(rate_factor=0.003, time_factor=0.2 + 0.05 * k) for k in range(W)]
    downs = [base[(k + 1) % len(base)].scaled(rate_factor=0.003, time_factor=0.25 + 0.05 * k) for k in range(W)]
    sim = simulate(config(policy, W=W, N=N, codec=codec, up=ups, down=downs, compute=random_compute))
    assert len(sim.records) == W * N
    bound = 0 if policy[0] == "BSP" else policy[1]
    assert all(rec.gate_staleness <= bound for rec in sim.records)
    if policy[0] == "ROG":
        assert any(rec.push_rows < rec.push_rows_planned for rec in sim.records)
    ref = reference_params(sim)
    moved = np.linalg.norm(ref - sim.initial_params)
    if isinstance(codec, RawCodec):
        assert max(np.linalg.norm(p - ref) / moved for p in sim.params) <= 1e-5
    else:
        worker_residual = sum(a.astype(np.float64) for a in sim.acc) / W
        for q in range(W):
            assert np.linalg.norm(sim.params[q] - (ref + worker_residual + sim.pending[q])) / moved <= 1e-5
