"""Parameter server + worker engines over the in-process transport: push/pull cycles computed by hand,
the staleness gate (stalls, and the invariant it guarantees), lagging-row requests, FLOWN admission,
flush and conservation (w0 - sum of all updates / W), refusals and a worker that leaves early.

Workers run as threads, each with its own in-process connection to the PS (:func:`inproc_pair`).
Scenarios that need an order of events (a worker stalled at the gate) are arranged with explicit
waits on PS state, never with sleeps or timing thresholds.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from rog.codecs.compression import RawCodec, SignCodec
from rog.local_update import LocalUpdate, LocalUpdateConfig
from rog.policies import make_policy
from rog.policies.base import Policy, TransmitPlan
from rog.rows import RowPartition
from rog.runtime import EventLog, ParameterServer, RuntimeFailure, WorkerEngine, aligned_zeros, read_events
from rog.transport import TransportConfig, inproc_pair

PART = RowPartition.from_shapes([("a", (20, 50)), ("b", (50,)), ("c", (25, 40)), ("d", (7,))])  # 47 rows
RULE = LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, milestones=())
CHUNK = 1024  # small chunks: many per transmission


class Spy(Policy):
    """Wraps a policy; records every decision it makes; optionally rewrites push plans."""

    def __init__(self, inner: Policy, push_rewrite=None) -> None:
        super().__init__(inner.threshold)
        self.inner, self.name, self.push_rewrite = inner, inner.name, push_rewrite
        self.views, self.pull_checks, self.pull_plans, self.observed, self.admits = [], [], [], [], []
        self.lock = threading.Lock()

    def push_plan(self, view):
        plan = self.inner.push_plan(view)
        with self.lock:
            self.views.append(view)
        return plan if self.push_rewrite is None else self.push_rewrite(view, plan)

    def pull_plan(self, view, worker, tensor_scale):
        self.pull_plans.append((worker, view.push_iter.copy()))
        return self.inner.pull_plan(view, worker, tensor_scale)

    def pull_ready(self, view, worker):
        ready = self.inner.pull_ready(view, worker)
        self.pull_checks.append((worker, view.push_iter.copy(), ready))
        return ready

    def lagging_rows(self, view, worker):
        return self.inner.lagging_rows(view, worker)

    def push_budget_s(self, view, worker):
        return self.inner.push_budget_s(view, worker)

    def admit(self, view, waiting, in_flight):
        chosen = self.inner.admit(view, waiting, in_flight)
        self.admits.append((list(waiting), in_flight, list(chosen)))
        return chosen

    def observe(self, report):
        with self.lock:
            self.observed.append(report)
        self.inner.observe(report)


class Recording(LocalUpdate):
    """A local update rule that keeps a copy of every update it returns (for conservation checks)."""

    def __init__(self, n, config):
        super().__init__(n, config)
        self.updates = []

    def step(self, grad, params, iteration, out=None):
        u = super().step(grad, params, iteration, out)
        self.updates.append(u.copy())
        return u


def quadratic_grad(partition, n_workers, seed=0):
    """Each worker pulls towards its own target, plus deterministic noise per (worker, iteration)."""
    targets = np.random.default_rng(seed).standard_normal((n_workers, partition.n_elements)).astype(np.float32)

    def grad(r, w, n):
        eps = np.random.default_rng(1000 * r + n).standard_normal(w.size).astype(np.float32)
        return (w - targets[r]) + np.float32(0.1) * eps

    return grad


class Run:
    """One PS and ``W`` worker threads over in-process connections (or given ``(worker_end, ps_end)`` pairs)."""

    def __init__(self, name, s=None, *, W=3, N=6, codec=None, rate_mbit=None, grad=None, policy_options=None,
                 push_rewrite=None, before_step=None, after_step=None, events_dir=None, worker_iterations=None,
                 flush=True, part=PART, rule=RULE, pull_rates=None, pairs=None):
        self.W, self.N, self.part = W, N, part
        self.codec = codec or RawCodec()
        opts = policy_options or {}
        self.ps_policy = Spy(make_policy(name, s, **opts))
        self.worker_policies = [Spy(make_policy(name, s, **opts), push_rewrite) for _ in range(W)]
        cfg = TransportConfig(rate_mbit_at=rate_mbit) if rate_mbit else None
        pull_cfg = [TransportConfig(rate_mbit_at=x) if x else cfg for x in (pull_rates or [None] * W)]
        self.pairs = pairs or [inproc_pair(r, worker_config=cfg, ps_config=pull_cfg[r]) for r in range(W)]
        self.ps_events = EventLog(events_dir / "events-ps.jsonl", "ps", "t") if events_dir else None
        self.ps = ParameterServer(part, W, self.ps_policy, self.codec, events=self.ps_events, chunk_bytes=CHUNK,
                                  wait_timeout_s=30.0, join_timeout_s=30.0)
        self.w0 = np.random.default_rng(42).standard_normal(part.n_elements).astype(np.float32)
        self.grad = grad or quadratic_grad(part, W)
        self.before_step, self.after_step = before_step, after_step
        self.iterations = worker_iterations or [N] * W
        self.flush = flush
        self.rule = rule
        self.events_dir = events_dir
        self.engines: list[WorkerEngine | None] = [None] * W
        self.params = [None] * W
        self.errors: dict[int, BaseException] = {}
        self.done = [threading.Event() for _ in range(W)]

    def _worker(self, r):
        try:
            params = aligned_zeros(self.part.n_elements)
            params[:] = self.w0
            events = EventLog(self.events_dir / f"events-w{r}.jsonl", f"w{r}", "t") if self.events_dir else None
            eng = WorkerEngine(self.pairs[r][0], self.part, params, self.worker_policies[r], self.codec,
                               Recording(self.part.n_elements, self.rule), chunk_bytes=CHUNK, wait_timeout_s=30.0,
                               events=events)
            self.engines[r], self.params[r] = eng, params
            eng.join(30.0)
            for n in range(1, self.iterations[r] + 1):
                if self.before_step:
                    self.before_step(self, r, n)
                eng.step(self.grad(r, params, n))
                if self.after_step:
                    self.after_step(self, r, n)
            self.done[r].set()
            if self.flush:
                eng.flush()
            eng.close()
            if events:
                events.close()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors[r] = e
            self.done[r].set()
            self.pairs[r][0].abort()

    def go(self, expect_ps_error=False):
        ps_thread = self.ps.start([p[1] for p in self.pairs])
        threads = [threading.Thread(target=self._worker, args=(r,), daemon=True) for r in range(self.W)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        ps_thread.join(60)
        assert not any(t.is_alive() for t in threads) and not ps_thread.is_alive(), "run did not finish"
        if self.ps_events:
            self.ps_events.close()
        if not expect_ps_error:
            assert not self.errors, self.errors
            assert not self.ps.errors, self.ps.errors
        return self

    def updates(self, r):
        return self.engines[r].local.updates

    def expected_params(self):
        total = sum(u for r in range(self.W) for u in self.updates(r))
        return self.w0 - total / np.float32(self.W)


def assert_conserved(run: Run):
    """Compression off: after the flush every worker holds w0 - (sum of every update) / W, buffers empty."""
    expected = run.expected_params()
    scale = float(np.abs(expected).max())
    for r in range(run.W):
        np.testing.assert_allclose(run.params[r], expected, rtol=1e-5, atol=1e-5 * scale, err_msg=f"worker {r}")
        assert not run.engines[r].acc.any(), f"worker {r} still holds undelivered updates"
        assert not run.ps.state.pending[r].any(), f"the PS still holds updates for worker {r}"


# ----------------------------------------------------------------------------- push/pull cycles by hand
def test_bsp_push_pull_cycle_matches_hand_computation():
    """W=2, constant gradients, no weight decay: u1 = lr*1.9*g, u2 = lr*(1 + 0.9*1.9)*g (Nesterov, m0 = 0)."""
    g = np.random.default_rng(3).standard_normal((2, PART.n_elements)).astype(np.float32)
    seen = {}

    def after(run, r, n):
        seen[(r, n)] = run.params[r].copy()

    def before(run, r, n):
        # A pull encodes pending[r] chunk by chunk as it sends, so a push of iteration 2 that lands while
        # the other worker's pull of iteration 1 is on the wire reaches that pull's later chunks (by
        # design: rows go out as fresh as they are).  The hand computation is for the order in which
        # every pull of iteration 1 completes before any push of iteration 2.
        if n == 2:
            _wait_until(lambda: (1 - r, 1) in seen or run.done[1 - r].is_set(), f"worker {1 - r}'s first pull")

    rule = LocalUpdateConfig(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.0, milestones=())
    run = Run("BSP", W=2, N=2, grad=lambda r, w, n: g[r], before_step=before, after_step=after, rule=rule).go()
    mean_g = (g[0].astype(np.float64) + g[1]) / 2
    after1 = run.w0 - 0.1 * 1.9 * mean_g
    after2 = after1 - 0.1 * (1 + 0.9 * 1.9) * mean_g
    for r in range(2):
        np.testing.assert_allclose(seen[(r, 1)], after1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(seen[(r, 2)], after2, rtol=1e-5, atol=1e-6)
    assert_conserved(run)
    # every transmission was reported to the PS's policy: one push and one pull per worker and iteration
    kinds = sorted((rep.direction, rep.worker, rep.iteration) for rep in run.ps_policy.observed)
    assert kinds == sorted((d, r, n) for d in ("push", "pull") for r in range(2) for n in (1, 2))
    assert all(rep.rows_delivered == rep.rows_planned == PART.n_rows for rep in run.ps.reports)


@pytest.mark.parametrize("name, s", [("BSP", None), ("SSP", 1), ("FLOWN", 1), ("ROG", 2)])
def test_conservation_after_flush_every_policy(name, s):
    run = Run(name, s, W=3, N=6, worker_iterations=[6, 4, 5]).go()  # unequal iteration counts too
    assert_conserved(run)


class HeldWrite:
    """Wraps the PS end's pipe to one worker: the first write made while ``hold_when()`` is true waits until
    ``release`` is set before it goes out.  No timing: the hold ends on an event the test sets from another
    worker's progress, or after ``limit_s`` (then the test fails on its assertions, never hangs)."""

    def __init__(self, inner, hold_when, release, limit_s=30.0) -> None:
        self.inner, self.hold_when, self.release, self.limit_s = inner, hold_when, release, limit_s
        self.held = 0

    def write(self, data):
        if not self.held and self.hold_when():
            self.held = 1
            self.release.wait(self.limit_s)
        self.inner.write(data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_pushes_that_land_during_a_pull_are_kept():
    """A pull subtracts exactly what it sent from pending[r], never zeroes it: the PS's first write of a pull to
    worker 0 is held until worker 1 has pushed (and finished a step), and conservation still holds."""
    overlaps = []
    release = threading.Event()

    def pulls_in_flight(run):
        planned = sum(1 for w, _ in run.ps_policy.pull_plans if w == 0)
        done = sum(1 for rep in run.ps_policy.observed if rep.direction == "pull" and rep.worker == 0)
        return planned > done

    def after(run, r, n):
        if r == 1 and held.held and not release.is_set():
            overlaps.append(pulls_in_flight(run))  # worker 1's push was applied while worker 0's pull is out
            release.set()

    run = Run("SSP", 5, W=2, N=4, after_step=after)
    ps_end = run.pairs[0][1]
    held = ps_end.pipe = HeldWrite(ps_end.pipe, lambda: pulls_in_flight(run), release)
    run.go()
    assert held.held == 1, "no pull to worker 0 was held (the scenario did not happen)"
    assert overlaps == [True], "worker 1 did not finish a step while worker 0's pull was held"
    assert_conserved(run)


def test_sign_codec_invariant_after_flush():
    """1-bit: w_r = w0 - sum(U)/W + sum_o acc_o / W + pending_r (error feedback keeps every residual)."""
    run = Run("ROG", 2, W=3, N=5, codec=SignCodec(), policy_options=dict(initial_budget_s=0.0)).go()
    base = run.expected_params().astype(np.float64)
    residual = sum(run.engines[o].acc.astype(np.float64) for o in range(3)) / 3
    for r in range(3):
        np.testing.assert_allclose(run.params[r], base + residual + run.ps.state.pending[r], rtol=1e-5,
                                   atol=1e-5 * float(np.abs(base).max()))
    assert max(float(np.abs(run.engines[o].acc).max()) for o in range(3)) > 0  # compression left residuals


# ----------------------------------------------------------------------------- the staleness gate
def _wait_until(cond, what, timeout_s=20.0):
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def test_gate_stalls_the_fast_worker_and_never_lets_it_run_more_than_s_ahead(tmp_path):
    """SSP(1), W=2: worker 1 starts iteration n only once worker 0 is stalled at the gate (or done)."""

    def before(run, r, n):
        if r == 1 and n > 1:
            _wait_until(lambda: run.done[0].is_set() or _stalled(run, 0), "worker 0 to stall")

    def _stalled(run, w):
        checks = [c for c in run.ps_policy.pull_checks if c[0] == w]
        return bool(checks) and not checks[-1][2]

    run = Run("SSP", 1, W=2, N=6, before_step=before, events_dir=tmp_path).go()
    closed = [c for c in run.ps_policy.pull_checks if not c[2]]
    assert closed, "the gate never closed"
    for worker, push_iter, ready in run.ps_policy.pull_checks:
        assert ready == (push_iter[worker] - push_iter.min() <= 1)
    for worker, push_iter in run.ps_policy.pull_plans:  # every pull that went ahead respected s = 1
        assert push_iter[worker] - push_iter.min() <= 1
    _, recs = read_events(tmp_path / "events-w0.jsonl")
    gate = [r for r in recs if r["kind"] == "stall" and r["reason"] == "gate"]
    assert len(gate) == 6  # one gate record per iteration
    assert_conserved(run)


def test_lagging_rows_are_requested_and_sent_first():
    """ROG(2), W=2: worker 1 sends only its mandatory rows (deadline 0), so its rows lag; worker 0 stalls;
    the PS asks worker 1 for the lagging rows, they arrive with its next PullReply and go out mandatory."""
    zero_deadline = lambda view, plan: TransmitPlan(plan.order, plan.mandatory_rows, 0.0)  # noqa: E731
    required_log = []

    def before(run, r, n):
        if r == 1:
            if n > 1:
                _wait_until(lambda: run.done[0].is_set() or run.ps.state.requested[1].any(), "a lagging-row request")
            required_log.append((n, run.engines[1].required_rows.copy()))

    def after(run, r, n):
        if r == 1:
            req = required_log[-1][1]
            assert (run.engines[1].row_push_iter[req] == n).all(), "a requested row was not delivered"

    # lag_lookahead=1: ask one iteration before the gate shuts, so the request reaches worker 1 with its
    # PullReply (with the default 0 its own staleness-first order delivers the rows before any request)
    run = Run("ROG", 2, W=2, N=8, policy_options=dict(extra_share=0.0, lag_lookahead=1), push_rewrite=zero_deadline,
              before_step=before, after_step=after).go()
    asked = [req for _, req in required_log if req.size]
    assert asked, "the PS never asked worker 1 for rows"
    partial = [rep for rep in run.ps.reports if rep.direction == "push" and rep.worker == 1
               and rep.rows_delivered < rep.rows_planned]
    assert partial, "worker 1 never sent a partial push"
    assert_conserved(run)


def test_flown_admits_at_most_max_concurrent():
    run = Run("FLOWN", 1, W=4, N=5, policy_options=dict(max_concurrent=2), rate_mbit=20.0).go()
    assert 1 <= run.ps.max_in_flight <= 2
    for waiting, in_flight, chosen in run.ps_policy.admits:
        assert in_flight + len(chosen) <= 2 and set(chosen) <= set(waiting)
    assert_conserved(run)


# ----------------------------------------------------------------------------- events and reports
def test_event_logs_cover_every_iteration(tmp_path):
    Run("ROG", 2, W=2, N=4, events_dir=tmp_path, codec=SignCodec()).go()
    for r in range(2):
        _, recs = read_events(tmp_path / f"events-w{r}.jsonl")
        kinds = [x["kind"] for x in recs]
        for kind in ("compute", "push", "pull", "staleness"):
            assert [x["iteration"] for x in recs if x["kind"] == kind] == [1, 2, 3, 4], kind
        assert kinds[0] == "run_start" and kinds[-1] == "run_end"
        assert [x["direction"] for x in recs if x["kind"] == "flush"] == ["push", "pull"]
        # one iteration's timed records come in protocol order and never overlap
        timed = [x for x in recs if x["kind"] in ("compute", "stall", "push", "pull")]
        for n in range(1, 5):
            it = [x for x in timed if x["iteration"] == n]
            names = [x["kind"] if x["kind"] != "stall" else x["reason"] for x in it]
            assert names[:4] == ["compute", "admission", "push", "gate"] and names[-1] == "pull", names
            for a, b in zip(it, it[1:]):
                assert a["t_s"] + a["duration_s"] <= b["t_s"] + 1e-9
        for x in recs:
            if x["kind"] in ("push", "pull"):
                assert x["delivered_share"] == pytest.approx(x["rows_delivered"] / x["rows_planned"])
                assert x["bytes"] > 0 and x["rows_planned"] == PART.n_rows
    _, ps_recs = read_events(tmp_path / "events-ps.jsonl")
    assert sum(1 for x in ps_recs if x["kind"] == "push") == 8
    assert sum(1 for x in ps_recs if x["kind"] == "flush") == 4


# ----------------------------------------------------------------------------- refusals and failures
def test_join_refuses_a_different_model_or_policy():
    other = RowPartition.from_shapes([("a", (20, 50)), ("b", (51,))])
    w_end, ps_end = inproc_pair(0)
    ps = ParameterServer(PART, 1, make_policy("ROG", 4), RawCodec(), join_timeout_s=10.0)
    t = ps.start([ps_end])
    eng = WorkerEngine(w_end, other, aligned_zeros(other.n_elements), make_policy("SSP", 2), RawCodec(),
                       LocalUpdate(other.n_elements, RULE))
    with pytest.raises(RuntimeFailure, match=r"model layout differs.*SSP\(2\), the parameter server ROG\(4\)"):
        eng.join(10.0)
    ps.stop()  # the refusal is recorded by now; without this the PS waits its join timeout for a worker
    t.join(10)
    assert not t.is_alive() and ps.errors and "refused" in str(ps.errors[0][1])


def test_a_worker_that_leaves_early_does_not_block_the_others():
    def before(run, r, n):
        if r == 1 and n == 3:
            run.engines[1].close("simulated crash")  # leaves without flushing
            raise SystemExit

    run = Run("BSP", W=2, N=5, before_step=before).go(expect_ps_error=True)
    assert isinstance(run.errors[1], SystemExit)
    assert 0 not in run.errors  # worker 0 finished its iterations and its flush
    assert run.engines[0].iteration == 5
    assert run.ps.failed_workers == [1]
    assert any("left before flushing" in str(e) for _, e in run.ps.errors)
    left = [f for f in run.ps.faults if f["event"] == "worker_left"]
    assert [(f["worker"], f["level"]) for f in left] == [(1, "warning")]  # recorded once, as a fault
    assert not [f for f in run.ps.faults if f["event"] == "worker_lost"]  # leaving is not a broken link


def test_engine_validates_its_input():
    w_end, _ = inproc_pair(0)
    with pytest.raises(ValueError, match="params must be a float32"):
        WorkerEngine(w_end, PART, np.zeros(PART.n_elements), make_policy("BSP"), RawCodec(),
                     LocalUpdate(PART.n_elements, RULE))
    with pytest.raises(ValueError, match="compute_target_s"):
        WorkerEngine(w_end, PART, aligned_zeros(PART.n_elements), make_policy("BSP"), RawCodec(),
                     LocalUpdate(PART.n_elements, RULE), compute_target_s=-1)
    with pytest.raises(ValueError, match="n_workers"):
        ParameterServer(PART, 0, make_policy("BSP"), RawCodec())
    with pytest.raises(ValueError, match="policy must be"):
        ParameterServer(PART, 2, "BSP", RawCodec())
