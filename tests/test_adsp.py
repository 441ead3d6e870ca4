"""ADSP and Fixed ADACOMM: the commit interval, the catch-up rule, the reward fit, the rate search on a
scripted loss curve, the scheduler's checkpoints, the code-mode pause, and conservation end to end
(PS + worker engines over the in-process transport, compression off)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rog.codecs.compression import RawCodec
from rog.local_update import LocalUpdate, LocalUpdateConfig
from rog.policies import make_policy
from rog.policies.adsp import ADSP
from rog.policies.adsp_search import CommitRateSearch, catch_up, commit_interval_s, fit_reward, loss_curve, reward_of
from rog.policies.base import CommitView, ServerView, TransferReport
from rog.rows import RowPartition
from rog.runtime import EventLog, ParameterServer, WorkerEngine, aligned_zeros, read_events
from rog.transport import inproc_pair
from conftest import run_ps_team

PART = RowPartition.from_shapes([("a", (20, 50)), ("b", (50,)), ("c", (7,))])
RULE = LocalUpdateConfig(lr=0.05, momentum=0.0, nesterov=False, weight_decay=0.0, milestones=())


# ----------------------------------------------------------------------------- pure pieces
@pytest.mark.parametrize("gamma, dc, o, floor, expected", [
    (60.0, 4, 2.0, 10.0, 13.0),  # 60/4 - 2
    (60.0, 6, 1.0, 10.0, 10.0),  # 60/6 - 1 = 9 < floor 10
    (60.0, 4, None, 10.0, 15.0),  # no commit yet: O = 0
    (6.0, 1, 0.5, 0.0, 5.5),
])
def test_commit_interval(gamma, dc, o, floor, expected):
    assert commit_interval_s(gamma, dc, o, floor) == pytest.approx(expected)


def test_commit_due_uses_control_and_default_rate():
    p = ADSP(gamma_s=6.0, floor_s=0.5)
    v = lambda since, control, o=0.5: CommitView(0, 5, 5, since, o, control)  # noqa: E731
    assert not p.commit_due(v(5.4, None)) and p.commit_due(v(5.5, None))  # default rate 1: 6/1 - 0.5
    assert not p.commit_due(v(0.99, 4.0)) and p.commit_due(v(1.0, 4.0))  # 6/4 - 0.5 = 1.0
    assert p.commit_due(v(0.9, 4.0, o=0.6))  # a longer round trip shortens the wait: 6/4 - 0.6
    assert ADSP(gamma_s=6.0, floor_s=0.0, fixed_rate=3).commit_due(v(1.5, None))  # 6/3 - 0.5


def test_catch_up_rule():
    assert catch_up([5, 3, 7], 2) == [4, 4, 2]  # C_target 9: 4, 6 -> 2k = 4, 2
    assert catch_up([7, 7, 7], 3) == [3, 3, 3]
    assert catch_up([5, 3, 20], 2, active=[True, True, False]) == [2, 4, 1]  # an inactive worker sets no target
    assert catch_up([5, 3, 7], 2, k_max=10) == [4, 6, 2]


def test_reward_fit_recovers_known_curve():
    a1, a2, a3, target = 0.5, 2.0, 0.3, 0.5
    expected = a1 ** 2 / (1.0 / (target - a3) - a2)  # 0.25 / 3
    for t in (np.array([0.0, 30.0, 60.0]), np.linspace(10.0, 70.0, 7)):
        fit = fit_reward(t, loss_curve(t, a1, a2, a3), target)
        assert fit.ok
        assert abs(fit.a1) == pytest.approx(a1, rel=1e-4) and fit.a2 == pytest.approx(a2, rel=1e-4)
        assert fit.a3 == pytest.approx(a3, rel=1e-4)
        assert fit.reward == pytest.approx(expected, rel=1e-4)
    assert not fit_reward([0.0, 1.0], [1.0, 0.9], 0.5).ok  # too few points
    assert not reward_of(0.5, 2.0, 0.3, 0.2)[1]  # target below the fitted floor: never reached


@pytest.mark.parametrize("mode, windows", [("paper", [1, 2, 2, 3, 3, 4]), ("code", [1, 2, 3, 4])])
def test_search_state_machine_on_scripted_curve(mode, windows):
    # inside a window of rate k the loss follows 1/(a1_k^2 (t - t_b) + 1/(l_b - a3)) + a3 from the window's
    # start (t_b, l_b): continuous at boundaries, falling fastest at k = 3; the target lies ahead of every loss
    a1sq, a3, target = {1: 0.05, 2: 0.2, 3: 0.6, 4: 0.3, 5: 0.1}, 0.2, 0.25
    search = CommitRateSearch(window_s=10.0, epoch_s=1000.0, points_per_window=3, mode=mode, target_loss=target)
    cur = dict(k=1, tb=0.0, lb=2.0)
    t, seen = 0.0, []
    while search.searching:
        assert search.sample_due(t) and not search.sample_due(t - 1.0)
        loss = 1.0 / (a1sq[cur["k"]] * (t - cur["tb"]) + 1.0 / (cur["lb"] - a3)) + a3
        window = search.window
        seen += [r for r in search.add_loss(t, loss) if r["event"] == "window"]
        if search.searching and search.window is not window:  # a new window began at t
            cur.update(k=search.k, tb=t, lb=loss)
        t += 5.0
    assert [w.k for w in search.history] == windows
    assert search.k == 3 and search.decisions[-1][2] == 3
    for w in search.history:  # each reward is 1 / (the time its window's curve reaches the target)
        (tb, lb) = w.points[0]
        t_star = tb + (1.0 / (target - a3) - 1.0 / (lb - a3)) / a1sq[w.k]
        assert w.fit.reward == pytest.approx(1.0 / t_star, rel=1e-3)
    assert len(seen) == len(windows)
    # the next epoch restarts at 1 (paper: Alg. 1's C <- max_i c_i + 1) or at the choice (code)
    search.start_epoch(1000.0)
    assert search.k == (1 if mode == "paper" else 3) and search.searching


def test_search_target_defaults_to_first_window_minus_10pct():
    search = CommitRateSearch(window_s=2.0, epoch_s=100.0)
    for t, loss in ((0.0, 1.0), (1.0, 0.9), (2.0, 0.85)):
        search.add_loss(t, loss)
    assert search.target_loss == pytest.approx(0.765) and search.k == 2


def _view(commits_len=3, active=None):
    W = commits_len
    return ServerView(PART, np.zeros(W, dtype=np.int64), np.zeros((W, PART.n_rows), dtype=np.int64),
                      np.zeros((W, PART.n_rows), dtype=np.int64),
                      np.ones(W, dtype=bool) if active is None else np.asarray(active))


def _commit(p, w, n=1):
    for _ in range(n):
        p.observe(TransferReport(w, "push", 1, 1, 1, 1, 0.1, None, None))


def test_scheduler_checkpoints_apply_catch_up():
    p = ADSP(gamma_s=1.0, fixed_rate=2)
    recs = p.schedule(0.1, _view(), None)
    assert [r["event"] for r in recs] == ["rates"] and p.delta_c[0] == 2  # everyone starts at k
    _commit(p, 0, 3), _commit(p, 1, 1), _commit(p, 2, 2)
    assert p.schedule(0.5, _view(), None) == []  # no checkpoint yet
    recs = p.schedule(1.0, _view(), None)
    ck = [r for r in recs if r["event"] == "checkpoint"][0]
    assert ck["commits"] == [3, 1, 2] and ck["delta_c"] == [2, 4, 3] and ck["spread"] == 2
    assert [p.delta_c[w] for w in range(3)] == [2, 4, 3]
    code = ADSP(gamma_s=1.0, fixed_rate=2, mode="code")
    _commit(code, 0, 3)
    code.schedule(1.0, _view(), None)
    assert [code.delta_c[w] for w in range(3)] == [2, 2, 2]  # the released code: k for all


def test_code_mode_pauses_at_window_boundaries():
    p = ADSP(gamma_s=100.0, window_s=2.0, epoch_s=1000.0, mode="code")
    v = _view()
    p.schedule(0.0, v, 1.0)  # first sample of the first window
    for w in range(3):  # the window is judged once every worker committed twice at its rate
        _commit(p, w, 2)
    p.schedule(1.0, v, 0.8)
    assert p._pause is None
    p.schedule(2.0, v, 0.7)  # window over: pause until everyone committed once more
    assert p._pause is not None
    assert p.pull_ready(v, 0)  # worker 0 has not committed since: it may go on
    _commit(p, 0)
    assert not p.pull_ready(v, 0)  # committed: waits for the others
    _commit(p, 1), _commit(p, 2)
    assert p.pull_ready(v, 0) and p._pause is None
    paper = ADSP(gamma_s=100.0, window_s=2.0, epoch_s=1000.0)
    for w in range(3):
        _commit(paper, w, 2)
    for t, l in ((0.0, 1.0), (1.0, 0.8), (2.0, 0.7)):
        paper.schedule(t, v, l)
    _commit(paper, 0)
    assert paper.pull_ready(v, 0)  # paper mode never blocks


def test_bad_options():
    with pytest.raises(ValueError, match="gamma_s"):
        ADSP(gamma_s=-1.0)
    with pytest.raises(ValueError, match="threshold"):
        make_policy("ADSP", 3)
    with pytest.raises(ValueError, match="tau"):
        make_policy("ADACOMM", 0)
    assert make_policy("ADACOMM").threshold == 40 and make_policy("ADSP").threshold == 0


# ----------------------------------------------------------------------------- end to end
class Recording(LocalUpdate):
    def __init__(self, n, config):
        super().__init__(n, config)
        self.updates = []

    def step(self, grad, params, iteration, out=None):
        u = super().step(grad, params, iteration, out)
        self.updates.append(u.copy())
        return u


def _run(name, threshold, options, steps, step_sleep_s=0.0, W=3, events_dir=None, global_loss=None, on_ps=None):
    """PS + W worker engines in process; ``step_sleep_s``: one pause per step, or one per worker; ``on_ps(ps)``
    runs once the PS exists, before any worker joins."""
    pairs = [inproc_pair(r) for r in range(W)]
    ps_events = EventLog(events_dir / "events-ps.jsonl", "ps", "t") if events_dir else None
    ps = ParameterServer(PART, W, make_policy(name, threshold, **options), RawCodec(), events=ps_events,
                         wait_timeout_s=30.0, join_timeout_s=30.0, global_loss=global_loss)
    if on_ps is not None:
        on_ps(ps)
    w0 = np.random.default_rng(7).standard_normal(PART.n_elements).astype(np.float32)
    targets = np.random.default_rng(8).standard_normal((W, PART.n_elements)).astype(np.float32)
    engines, locals_ = [], []
    for r in range(W):
        params = aligned_zeros(PART.n_elements)
        params[:] = w0
        loc = Recording(PART.n_elements, RULE)
        locals_.append(loc)
        engines.append(WorkerEngine(pairs[r][0], PART, params, make_policy(name, threshold, **options), RawCodec(),
                                    loc, wait_timeout_s=30.0))

    def body(r, _link):
        e = engines[r]
        e.join(30.0)
        pause_s = step_sleep_s[r] if isinstance(step_sleep_s, (list, tuple)) else step_sleep_s
        for _ in range(steps[r]):
            time.sleep(pause_s)
            e.step(e.params - targets[r])
        e.flush()
        e.close()

    try:
        run_ps_team(ps, body, W, ends=pairs)
    finally:
        if ps_events:
            ps_events.close()
    return ps, engines, locals_, w0


@pytest.mark.parametrize("name, threshold, options, steps, sleep_s", [
    ("ADSP", 0, dict(gamma_s=0.06, floor_s=0.0, fixed_rate=1), [12, 12, 8], 0.02),
    ("ADACOMM", 3, {}, [9, 9, 9], 0.0),
])
def test_conservation(name, threshold, options, steps, sleep_s):
    ps, engines, locals_, w0 = _run(name, threshold, options, steps, sleep_s)
    committed = sum(sum(loc.updates) for loc in locals_) / len(engines)  # every update, flushed at the end
    np.testing.assert_allclose(ps.state.total, committed, rtol=1e-5, atol=1e-6)
    for e in engines:  # every worker holds the server's model: initial minus exactly what was committed
        np.testing.assert_allclose(e.params, w0 - ps.state.total, rtol=1e-5, atol=1e-6)
        assert not e.acc.any()
    commits = [e.commits for e in engines]
    if name == "ADACOMM":
        assert commits == [3, 3, 3] and ps.state.push_iter.tolist() == [9, 9, 9]  # a barrier at steps 3, 6, 9
    else:
        assert all(1 <= c < s for c, s in zip(commits, steps))  # the timer folds several steps into a commit


def test_adsp_search_runs_and_logs(tmp_path):
    calls = []

    def global_loss(total):
        calls.append(float(np.abs(total).sum()))
        return 1.0 / (1.0 + 0.5 * len(calls)) + 0.1

    opts = dict(gamma_s=0.1, floor_s=0.0, window_s=0.1, epoch_s=10.0)
    ps, engines, _, _ = _run("ADSP", 0, opts, [40, 40, 20], 0.01, events_dir=tmp_path, global_loss=global_loss)
    _, recs = read_events(tmp_path / "events-ps.jsonl")
    sched = [r for r in recs if r["kind"] == "schedule"]
    windows = [r for r in sched if r["event"] == "window"]
    assert windows and all(len(r["losses"]) == 3 for r in windows)
    assert any(r["event"] == "checkpoint" for r in sched)
    assert calls  # the scheduler sampled the global model
    assert all(e.control is not None and e.rates_received for e in engines)  # rates pushed to every worker


def test_profile_compute_ratios_and_worker_pacing(run_config):
    from rog.errors import ConfigError
    from rog.experiment.sync_options import parse_ratios, worker_compute_s
    from rog.testbed.profiles import ProfileError, load_profile, profile_from_dict

    d = load_profile("quick-cpu").to_dict()
    assert profile_from_dict(dict(d, compute_ratios=[1, 1, 3])).compute_ratios == (1.0, 1.0, 3.0)
    with pytest.raises(ProfileError, match="compute_ratios"):
        profile_from_dict(dict(d, compute_ratios=[1, 0]))
    assert parse_ratios("1,1,3", 3) == [1.0, 1.0, 3.0]
    with pytest.raises(ConfigError, match="--compute-ratios: every ratio must be a positive number"):
        parse_ratios("1,0", 2)
    with pytest.raises(ConfigError, match="2 ratio"):
        parse_ratios("1,3", 3)
    cfg = run_config(["--workers", "3"]).replace(compute_s=0.1, compute_ratios=[1.0, 1.0, 3.0])
    assert [worker_compute_s(cfg, k) for k in range(3)] == pytest.approx([0.1, 0.1, 0.3])
    assert worker_compute_s(cfg.replace(compute_s=None), 1) is None


def test_ushape_summary_on_synthetic_runs(tmp_path):
    import pandas as pd

    from rog.papers.adsp.summary import adsp_markdown, search_landing, ushape_rows, ushape_verdict
    from rog.analysis.load import RunData

    def run(name, tag, records, **cfg):
        ps = pd.DataFrame.from_records([dict(kind="schedule", **r) for r in records])
        return RunData(tmp_path / name, name, dict(note=tag, seed=cfg.pop("seed", 0), **cfg), "done", 0.0, None,
                       events={"ps": ps})

    slope = {1: 0.05, 2: 0.2, 4: 0.1}  # loss 2 - slope * t, sampled every second for 10 s
    grid = [run(f"k{k}", f"ushape-k{k}", [dict(t_s=float(t), event="loss", loss=2.0 - a * t, k=k) for t in range(11)],
                policy_options=dict(fixed_rate=k)) for k, a in slope.items()]
    search = run("s", "ushape-search", [dict(t_s=1.0, event="rates", k=1), dict(t_s=5.0, event="decision", k=4)], seed=2)
    undecided = run("u", "ushape-search", [dict(t_s=1.0, event="rates", k=1), dict(t_s=3.0, event="rates", k=3)])
    assert search_landing(search) == (4, True) and search_landing(undecided) == (3, False)
    u = ushape_rows(grid + [search])
    # smoothed over 3 samples, k = 1's lowest is its last two samples' mean (1.55 + 1.5) / 2 = 1.525, so the
    # target is 2 - 0.8 x (2 - 1.525) = 1.62, crossed at (2 - 1.62) / slope = 7.6 and 3.8 s for k = 1, 4; for
    # k = 2 the sample at 1 s is smoothed to (1.8 + 1.6) / 2 = 1.7 (the first sample is not averaged in),
    # so the crossing interpolates between 1.7 at 1 s and 1.6 at 2 s: 1.8 s
    assert u["target_loss"] == pytest.approx(1.62)
    assert [(x["k"], round(x["time_to_target_s"], 6)) for x in u["rows"]] == [(1, 7.6), (2, 1.8), (4, 3.8)]
    assert u["best_k"] == 2 and u["interior_minimum"]
    # landed at 4 with the best at 2: a neighbour on the grid (1, 2, 4), reported apart, not agreement
    assert u["searches"] == [dict(run_id="s", seed=2, k=4, decided=True, grid_seed=0, verdict="neighbour")]
    md = adsp_markdown(dict(fig1=[], fig1_target={}, ushape=u, outdoors=[]))
    assert "an interior minimum" in md and "fastest rate in 0 of 1 seeds" in md and "neighbouring rate in 1" in md
    assert u["verdict"] == "not decidable (1 of 3 seeds)" and u["searches"][0]["grid_seed"] == 0  # seed 2: no grid
    exact = run("e", "ushape-search", [dict(t_s=5.0, event="decision", k=2)], seed=1)
    assert ushape_rows(grid + [exact])["searches"][0]["verdict"] == "agrees"
    # seeds 1 and 2 with grids of their own: seed 1's fastest is k = 4 (slopes 0.05, 0.1, 0.2), an end of the
    # grid, so no U there; seed 2's is k = 2 as seed 0's.  The search of seed 1 that landed on 2 is judged
    # against seed 1's grid (neighbour of 4), the one of seed 2 that landed on 4 against seed 2's (neighbour of 2)
    more = [run(f"k{k}s{seed}", f"ushape-k{k}", [dict(t_s=float(t), event="loss", loss=2.0 - a * t, k=k)
                                                  for t in range(11)], policy_options=dict(fixed_rate=k), seed=seed)
            for seed, slopes in ((1, {1: 0.05, 2: 0.1, 4: 0.2}), (2, slope)) for k, a in slopes.items()]
    u3 = ushape_rows(grid + more + [exact, search])
    assert [(g["seed"], g["best_k"], g["interior_minimum"]) for g in u3["by_seed"]] == [(0, 2, True), (1, 4, False),
                                                                                       (2, 2, True)]
    assert u3["verdict"] == "does not agree (U in 2 of 3 seeds)"
    assert [(x["seed"], x["grid_seed"], x["verdict"]) for x in u3["searches"]] == [(1, 1, "neighbour"),
                                                                                   (2, 2, "neighbour")]
    md3 = adsp_markdown(dict(fig1=[], fig1_target={}, ushape=u3, outdoors=[]))
    assert "| 1 | " in md3 and "does not agree (U in 2 of 3 seeds)" in md3
    assert ushape_verdict([dict(interior_minimum=True)] * 3) == "agrees"


def test_landing_verdicts():
    from rog.papers.adsp.summary import landing_verdict

    grid = [1, 2, 4, 8, 16]
    assert landing_verdict(4, True, grid, 4) == "agrees"
    assert [landing_verdict(k, True, grid, 4) for k in (2, 3, 5, 8)] == ["neighbour"] * 4
    assert [landing_verdict(k, True, grid, 4) for k in (1, 9, 16)] == ["disagrees"] * 3
    assert landing_verdict(1, True, grid, 1) == "agrees" and landing_verdict(3, True, grid, 1) == "disagrees"
    assert landing_verdict(4, False, grid, 4) == "not decided"  # never decided: no verdict on where it sat
    assert landing_verdict(None, True, grid, 4) == "no grid" and landing_verdict(2, True, grid, None) == "no grid"


def _fig1_row(system, waiting, stall_share=0.1):
    it = 1.0
    return dict(system=system, run_id=system, iter_s=it, compute_s=it * (1 - waiting),
                comm_s=it * (waiting - stall_share), stall_s=it * stall_share, waiting_share=waiting, stall_share=stall_share, steps=10,
                time_to_target_s=None, adsp_time_reduction=None)


@pytest.mark.parametrize("bsp, ssp, verdict", [
    (0.538, 0.51, "agrees"),
    (0.538, 0.463, "does not agree"),  # SSP's 46.3 % is not "more than 50 %"
    (0.50, 0.60, "does not agree"),  # exactly 50 % is not more than 50 %
])
def test_fig1_waiting_threshold(bsp, ssp, verdict):
    from rog.papers.adsp.summary import adsp_markdown

    rows = [_fig1_row("BSP", bsp, 0.3), _fig1_row("SSP-40", ssp, 0.3), _fig1_row("ADSP", 0.02, 0.007)]
    md = adsp_markdown(dict(fig1=rows, fig1_target=dict(rule="r"), ushape=dict(rows=[]), outdoors=[]))
    line = next(x for x in md.splitlines() if x.startswith("Measured: waiting"))
    assert f": {verdict} with the paper's picture" in line and "waiting > 50 %" in line
