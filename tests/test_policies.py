"""BSP, SSP, FLOWN and ROG behind the Policy interface, on small hand-built states."""

import numpy as np
import pytest

from rog.policies.mta import mandatory_rows
from rog.policies.base import Policy, ServerView, TransferReport, WorkerView
from rog.policies.bsp import BSP
from rog.policies.flown import FLOWN
from rog.policies.registry import POLICIES, make_policy
from rog.policies.rog import ROG
from rog.policies.ssp import SSP
from rog.rows import RowPartition

SCALE = np.array([0.4, 0.1, 0.9], dtype=np.float32)


@pytest.fixture
def part():
    # a: (4,300) -> rows 0..3 ; b: (10,) -> row 4 ; c: (3,400) -> rows 5..7
    return RowPartition.from_shapes([("a", (4, 300)), ("b", (10,)), ("c", (3, 400))])


def server_view(part, push_iter, versions=None, active=None, updates=None):
    push_iter = np.asarray(push_iter, dtype=np.int64)
    w = push_iter.size
    if versions is None:  # full delivery: every row at its worker's push count
        versions = np.repeat(push_iter[:, None], part.n_rows, axis=1)
    if updates is None:
        updates = np.zeros((w, part.n_rows), dtype=np.int64)
    if active is None:
        active = np.ones(w, dtype=bool)
    return ServerView(part, push_iter, np.asarray(versions, dtype=np.int64), np.asarray(updates), np.asarray(active))


def report(worker, nbytes=0, duration_s=1.0, mandatory_s=None, direction="push", **kw):
    fields = dict(iteration=1, rows_planned=8, rows_delivered=8, deadline_s=None)
    fields.update(kw)
    return TransferReport(worker, direction, bytes_delivered=nbytes, duration_s=duration_s, mandatory_s=mandatory_s, **fields)


# ------------------------------------------------------------------ BSP / SSP
def test_bsp_is_ssp_zero(part):
    bsp = BSP()
    assert isinstance(bsp, SSP) and bsp.threshold == 0 and bsp.name == "BSP"
    assert BSP(threshold=0).threshold == 0
    with pytest.raises(ValueError, match="threshold"):
        BSP(threshold=2)
    ssp0 = SSP(0)
    states = [([3, 3, 3], None), ([4, 3, 3], None), ([4, 4, 3], [True, True, False]), ([0, 0, 0], None), ([5, 2, 5], [True, False, True])]
    for push_iter, active in states:
        view = server_view(part, push_iter, active=active)
        for w in range(3):
            assert bsp.pull_ready(view, w) == ssp0.pull_ready(view, w)
    # and by hand: [4, 3, 3] -> worker 0 waits, workers 1 and 2 may pull
    view = server_view(part, [4, 3, 3])
    assert [bsp.pull_ready(view, w) for w in range(3)] == [False, True, True]


def test_ssp_whole_model_plans_and_gate(part):
    ssp = SSP(2)
    wview = WorkerView(part, 0, 5, np.full(8, 4), SCALE, budget_s=0.5, required_rows=np.array([3]))
    for plan in (ssp.push_plan(wview), ssp.pull_plan(server_view(part, [5, 3]), 0, SCALE)):
        assert plan.order.tolist() == list(range(8)) and plan.mandatory_rows == 8 and plan.deadline_s is None
    view = server_view(part, [5, 3, 4])
    assert ssp.pull_ready(view, 0)  # 5 - 3 == 2 passes
    assert not SSP(1).pull_ready(view, 0)  # == s + 1 blocks
    assert ssp.lagging_rows(view, 1).size == 0
    assert ssp.push_budget_s(view, 0) is None
    assert ssp.admit(view, [2, 0], 5) == [2, 0]  # no admission control


# ------------------------------------------------------------------ FLOWN
def test_flown_far_behind_workers_first(part):
    flown = FLOWN(3)
    view = server_view(part, [6, 3, 5, 2])  # behind the fastest: [0, 3, 1, 4]
    assert flown.admit(view, [0, 1, 2, 3], 0) == [3, 1]  # most behind first
    assert flown.admit(view, [0, 1, 2, 3], 1) == [3]
    assert flown.admit(view, [0, 1, 2, 3], 2) == []
    assert flown.admit(view, [], 0) == []
    # ties in "behind" go by worker id; exactly s behind counts
    tie = server_view(part, [6, 3, 3, 6])
    assert flown.admit(tie, [2, 1, 0], 0) == [1, 2]
    # an evicted fastest worker does not set "behind": fastest active is 5 -> only worker 3 (3 behind)
    ev = server_view(part, [9, 3, 5, 2], active=[False, True, True, True])
    assert flown.admit(ev, [1, 3], 1) == [3]


def test_flown_bandwidth_ranking_from_observed_reports(part):
    flown = FLOWN(10)  # nobody is 10 behind: pure bandwidth ranking
    view = server_view(part, [5, 5, 5, 5])
    assert flown.admit(view, [2, 0], 1) == [0]  # nobody measured: by id
    flown.observe(report(0, nbytes=1_000_000, duration_s=1.0))  # 8 Mbit/s
    flown.observe(report(2, nbytes=2_500_000, duration_s=2.0))  # 10 Mbit/s
    assert flown.bandwidth_mbit(0) == pytest.approx(8.0)
    assert flown.bandwidth_mbit(2) == pytest.approx(10.0)
    assert flown.bandwidth_mbit(1) is None
    assert flown.admit(view, [0, 2], 1) == [2]
    flown.observe(report(2, nbytes=500_000, duration_s=1.0, direction="pull"))  # 4 Mbit/s -> EWMA 7
    assert flown.bandwidth_mbit(2) == pytest.approx(7.0)
    assert flown.admit(view, [0, 2], 1) == [0]
    # an unmeasured worker ranks before everyone measured
    assert flown.admit(view, [0, 1, 2], 0) == [1, 0]
    three = FLOWN(10, max_concurrent=3)
    assert three.admit(view, [2, 1, 0], 0) == [0, 1, 2]  # nobody measured: by id
    three.observe(report(0, nbytes=1_000_000, duration_s=1.0))  # 8 Mbit/s
    three.observe(report(2, nbytes=2_500_000, duration_s=2.0))  # 10 Mbit/s
    assert three.admit(view, [2, 1, 0], 0) == [1, 2, 0]


def test_flown_ignores_everything_but_bytes_and_duration(part):
    a, b = FLOWN(4), FLOWN(4)
    a.observe(report(1, nbytes=3_000_000, duration_s=2.0))
    b.observe(report(1, nbytes=3_000_000, duration_s=2.0, mandatory_s=0.1, deadline_s=0.2, rows_planned=1, rows_delivered=1, iteration=9))
    b.observe(report(1, nbytes=10**9, duration_s=0.0))  # nothing measurable: ignored
    assert a.bandwidth_mbit(1) == pytest.approx(12.0) and b.bandwidth_mbit(1) == pytest.approx(12.0)
    # a far-behind worker beats a fast one regardless of bandwidth
    a.observe(report(0, nbytes=10**8, duration_s=1.0))
    view = server_view(part, [9, 5, 9])
    assert a.admit(view, [0, 1], 1) == [1]


def test_flown_gate_and_plans(part):
    flown = FLOWN(2)
    view = server_view(part, [5, 3, 4])
    assert flown.pull_ready(view, 0) and not FLOWN(1).pull_ready(view, 0)
    assert flown.pull_plan(view, 1, SCALE).deadline_s is None
    with pytest.raises(ValueError, match="max_concurrent"):
        FLOWN(2, max_concurrent=0)
    with pytest.raises(ValueError, match="alpha"):
        FLOWN(2, alpha=0.0)
    with pytest.raises(ValueError, match="waiting"):
        flown.admit(view, [7], 0)


# ------------------------------------------------------------------ ROG
ROW_PUSH_ITER = np.array([5, 1, 5, 3, 2, 5, 5, 4])
# iteration 6, s = 4: overdue = rows with row_push_iter < 2 -> row 1 only
# importance (max 5): staleness [0,4,0,2,3,0,0,1] + scale/(0.9+0.1) -> [0.4,4.4,0.4,2.4,3.1,0.9,0.9,1.9]


def test_rog_push_plan_prefix_holds_required_and_overdue_rows(part):
    rog = ROG(4)
    assert mandatory_rows(8, 4) == 3  # ceil(0.3177 * 8)
    plan = rog.push_plan(WorkerView(part, 0, 6, ROW_PUSH_ITER, SCALE, budget_s=1.25, required_rows=np.array([6])))
    assert plan.order.tolist() == [1, 6, 4, 5, 7, 0, 2, 3]
    assert plan.mandatory_rows == 3 and plan.deadline_s == 1.25
    # more forced rows than the MTA count: the prefix grows to hold them all
    plan = rog.push_plan(WorkerView(part, 0, 6, ROW_PUSH_ITER, SCALE, required_rows=np.array([0, 2, 5])))
    assert plan.order.tolist() == [1, 5, 0, 2, 6, 7, 3, 4]
    assert plan.mandatory_rows == 4
    assert plan.deadline_s == 5.0  # no budget handed out yet: the initial budget, never "no deadline"
    # nothing forced: top 3 by importance
    plan = ROG(4, initial_budget_s=0.7).push_plan(WorkerView(part, 0, 5, ROW_PUSH_ITER, SCALE))
    assert plan.order.tolist() == [1, 4, 3, 5, 6, 7, 0, 2]
    assert plan.mandatory_rows == 3 and plan.deadline_s == 0.7


def test_rog_push_plan_many_overdue_rows_are_all_mandatory(part):
    # iteration 10, s = 4: rows with row_push_iter < 6 are overdue -> rows 0, 1, 2, 4, 6 (5 > MTA count 3)
    row_push_iter = np.array([5, 2, 3, 9, 1, 9, 5, 8])
    plan = ROG(4).push_plan(WorkerView(part, 0, 10, row_push_iter, SCALE, budget_s=0.0))
    # importance (max 9): staleness [4,7,6,0,8,0,4,1] + scale term [.4,.4,.4,.4,.1,.9,.9,.9]
    assert plan.mandatory_rows == 5
    assert plan.order[:5].tolist() == [4, 1, 2, 6, 0]
    assert plan.order.tolist() == [4, 1, 2, 6, 0, 5, 7, 3]
    assert plan.deadline_s == 0.0


def test_rog_pull_plan_server_importance(part):
    rog = ROG(4)
    updates = np.zeros((2, 8), dtype=np.int64)
    updates[1] = [2, 0, 1, 2, 0, 0, 3, 1]
    view = server_view(part, [3, 3], updates=updates)
    plan = rog.pull_plan(view, 1, SCALE)
    # importance [2.21,0.21,1.21,2.21,0.05,0.47,3.47,1.47]: top 3 = 6, 0, 3 (tie by id);
    # then the rest by tensor scale: c (5, 7), a (1, 2), b (4)
    assert plan.order.tolist() == [6, 0, 3, 5, 7, 1, 2, 4]
    assert plan.mandatory_rows == 3 and plan.deadline_s == 5.0


def test_rog_gate_and_lagging_rows(part):
    rog = ROG(2, lag_lookahead=1)
    versions = np.array([[5] * 8, [3, 4, 4, 4, 4, 4, 4, 4], [5] * 8])
    view = server_view(part, [5, 4, 5], versions=versions)
    assert rog.pull_ready(view, 0)  # 5 - 3 == 2
    assert not ROG(1).pull_ready(view, 0)
    assert rog.lagging_rows(view, 1).tolist() == [0]  # 5 - 3 > 1
    assert ROG(1, lag_lookahead=1).lagging_rows(view, 1).tolist() == list(range(8))


def test_rog_asks_only_for_rows_that_block_by_default(part):
    # the fastest worker (5) waits on worker 1's row 0 (version 3) only when 5 - 3 > s
    versions = np.array([[5] * 8, [3, 4, 4, 4, 4, 4, 4, 4], [5] * 8])
    view = server_view(part, [5, 4, 5], versions=versions)
    assert ROG(2).lag_lookahead == 0
    assert ROG(2).lagging_rows(view, 1).tolist() == []  # 5 - 3 == 2: nothing blocks, nothing asked
    assert ROG(1).lagging_rows(view, 1).tolist() == [0]  # 5 - 3 > 1: row 0 blocks; 5 - 4 does not
    assert not ROG(1).pull_ready(view, 0) and ROG(2).pull_ready(view, 0)
    with pytest.raises(ValueError, match="lag_lookahead"):
        ROG(2, lag_lookahead=-1)


def test_rog_straggler_lead(part):
    M = dict(budget_rule="mandatory")
    rog, default = ROG(4, initial_budget_s=2.0, straggler_lead=2, **M), ROG(4, initial_budget_s=2.0, **M)
    for w in range(3):
        for p in (rog, default):
            p.observe(TransferReport(w, "push", 1, 8, 8, 100, 0.5, 0.25, None))
    view = server_view(part, [7, 6, 5])
    assert rog.push_budget_s(view, 2) == 0.0  # the slowest
    assert rog.push_budget_s(view, 1) == 0.0  # one ahead, below the lead of 2
    assert rog.push_budget_s(view, 0) == pytest.approx(0.25)  # two ahead: max(recent mandatory_s, mean)
    assert default.push_budget_s(view, 1) == pytest.approx(0.25)  # default lead 1: one ahead has a budget
    assert default.push_budget_s(view, 2) == 0.0
    with pytest.raises(ValueError, match="straggler_lead"):
        ROG(4, straggler_lead=1.5)


def test_rog_with_full_delivery_gates_like_ssp(part):
    rng = np.random.default_rng(3)
    for _ in range(100):
        push_iter = rng.integers(0, 10, 4)
        active = rng.random(4) < 0.8
        view = server_view(part, push_iter, active=active)
        s = int(rng.integers(0, 5))
        for w in range(4):
            assert ROG(s).pull_ready(view, w) == SSP(s).pull_ready(view, w)


def test_rog_budget_sequence(part):
    rog = ROG(4, initial_budget_s=2.0, budget_rule="mandatory")
    view = server_view(part, [7, 5, 6])
    assert [rog.push_budget_s(view, w) for w in range(3)] == [2.0, 2.0, 2.0]  # nobody transmitted yet
    for w in (0, 1):
        rog.observe(report(w, mandatory_s=10.0))
    assert rog.push_budget_s(view, 0) == 2.0  # worker 2 not yet seen
    # an evicted worker need not have transmitted
    assert rog.push_budget_s(server_view(part, [7, 5, 6], active=[True, True, False]), 0) == 10.0
    rog.observe(report(2, mandatory_s=10.0, direction="pull"))
    assert rog.push_budget_s(view, 1) == 0.0  # the slowest: only its mandatory rows
    assert rog.push_budget_s(view, 2) == 10.0  # one iteration ahead: max(10, 10)
    assert rog.push_budget_s(view, 0) == 10.0
    for w in (0, 1):
        rog.observe(report(w, mandatory_s=10.0))
    rog.observe(report(0, mandatory_s=None))  # counts as a transmission, carries no MTA time
    for k in range(30):
        rog.observe(report(k % 3, mandatory_s=1.0))
    # 35 times: 5 x 10 s then 30 x 1 s. last 30 -> max 1.0 ; mean = 80 / 35
    assert rog.push_budget_s(view, 0) == pytest.approx(80 / 35)
    # the pull to a worker uses the same budget as its deadline
    assert rog.pull_plan(view, 0, SCALE).deadline_s == pytest.approx(80 / 35)
    assert rog.pull_plan(view, 1, SCALE).deadline_s == 0.0
    # everybody level: everybody is a straggler
    assert rog.push_budget_s(server_view(part, [6, 6, 6]), 2) == 0.0


def test_rog_budget_recent_max_wins(part):
    rog = ROG(4, history=30, budget_rule="mandatory")
    view = server_view(part, [3, 2])
    times = [1.0] * 5 + [0.5] * 29 + [3.0]  # 35 reports
    for k, t in enumerate(times):
        rog.observe(report(k % 2, mandatory_s=t))
    # last 30: max 3.0 ; mean (5 + 14.5 + 3) / 35 = 0.643
    assert rog.push_budget_s(view, 0) == pytest.approx(3.0)
    short = ROG(4, history=2, budget_rule="mandatory")
    for k, t in enumerate([9.0, 9.0, 9.0, 1.0, 2.0]):
        short.observe(report(k % 2, mandatory_s=t))
    assert short.push_budget_s(view, 0) == pytest.approx(max(2.0, 30 / 5))  # mean 6 beats recent max 2


def test_rog_constructor_validation():
    with pytest.raises(ValueError, match="initial_budget_s"):
        ROG(4, initial_budget_s=-1)
    with pytest.raises(ValueError, match="history"):
        ROG(4, history=0)
    with pytest.raises(ValueError, match="extra"):
        ROG(4, extra_share="lots")
    with pytest.raises(ValueError, match="threshold"):
        ROG(-1)


# ------------------------------------------------------------------ all policies
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_plan_is_a_permutation_of_all_rows(part, name):
    rng = np.random.default_rng(7)
    policy = make_policy(name)
    for _ in range(20):
        n = int(rng.integers(1, 12))
        row_push_iter = rng.integers(0, n, part.n_rows)
        required = rng.choice(part.n_rows, size=int(rng.integers(0, 4)), replace=False)
        scale = rng.random(part.n_tensors)
        push = policy.push_plan(WorkerView(part, 0, n, row_push_iter, scale, required_rows=required))
        updates = rng.integers(0, 5, (3, part.n_rows))
        pull = policy.pull_plan(server_view(part, rng.integers(0, n, 3), updates=updates), 1, scale)
        for plan in (push, pull):
            assert plan.order.dtype == np.int64
            assert np.array_equal(np.sort(plan.order), np.arange(part.n_rows))
        # mandatory rows include every required row
        assert set(required.tolist()) <= set(push.order[: push.mandatory_rows].tolist())


def test_registry():
    from rog.policies.adacomm import ADACOMM
    from rog.policies.adacomm_adaptive import AdaptiveADACOMM
    from rog.policies.adsp import ADSP

    assert POLICIES == {"BSP": BSP, "SSP": SSP, "FLOWN": FLOWN, "ROG": ROG, "ADSP": ADSP, "ADACOMM": ADACOMM,
                        "ADAPTIVE_ADACOMM": AdaptiveADACOMM}
    assert all(issubclass(c, Policy) for c in POLICIES.values())
    defaults = {name: make_policy(name.lower()).threshold for name in POLICIES}
    assert defaults == {"BSP": 0, "SSP": 4, "FLOWN": 4, "ROG": 4, "ADSP": 0, "ADACOMM": 40, "ADAPTIVE_ADACOMM": 40}
    assert type(make_policy("Rog", 20, initial_budget_s=0.5)) is ROG
    assert make_policy("rog", 20, initial_budget_s=0.5).initial_budget_s == 0.5
    assert make_policy("ssp", 20).threshold == 20
    assert make_policy("flown", 2, max_concurrent=3).max_concurrent == 3
    with pytest.raises(ValueError, match="BSP, SSP, FLOWN, ROG, ADSP, ADACOMM"):
        make_policy("DDP")
    with pytest.raises(ValueError, match="max_concurrent"):
        make_policy("ssp", max_concurrent=3)
    with pytest.raises(ValueError, match="threshold"):
        make_policy("bsp", 4)
