"""ATP as the original ran it: the speculative budget rules, the mandatory prefix, and both in the simulator.

Expectations are computed by hand from the rules (rog.policies.budget, docs/design.md#artifact-choices) and from the
links' arithmetic (bytes / rate), not read back from the code under test.
"""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rog.chunks import ARTIFACT_CHUNK_SHARE, canonical_segments, chunk_bytes_for_share, plan_chunks
from rog.codecs.compression import SignCodec
from rog.errors import ConfigError
from rog.experiment.run_config import RunConfig
from rog.links import constant_link
from rog.local_update import LocalUpdateConfig
from rog.policies.mta import mandatory_rows, mta_fraction
from rog.policies.base import ServerView, TransferReport, WorkerView
from rog.policies.budget import BUDGET_RULES, MandatoryTimeBudget, WholeTransmissionBudget, make_budget
from rog.policies.registry import make_policy
from rog.policies.rog import PREFIX_ORDERS, ROG
from rog.rows import RowPartition
from rog.sim import SimConfig, simulate
from rog.wire import frame_bytes

CACHE = Path(__file__).resolve().parents[1] / "result" / ".cache"  # the quick workload's cache (payload size)
SMALL = RowPartition.from_shapes([("a", (4, 300)), ("b", (10,)), ("c", (3, 400))])  # 8 rows


def view(push_iter, active=None, part=SMALL):
    push_iter = np.asarray(push_iter, dtype=np.int64)
    w = push_iter.size
    versions = np.repeat(push_iter[:, None], part.n_rows, axis=1)
    active = np.ones(w, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    return ServerView(part, push_iter, versions, np.zeros((w, part.n_rows), dtype=np.int64), active)


def rep(worker, duration_s, mandatory_s=None, direction="push"):
    return TransferReport(worker, direction, 1, 8, 8, 100, duration_s, mandatory_s, None)


# ------------------------------------------------------------------ the artifact budget rule
def test_artifact_rule_initial_budget_until_every_active_worker_transmitted():
    b = WholeTransmissionBudget(initial_budget_s=5.0)
    v = view([3, 2, 2])
    b.observe(rep(0, 1.0))
    b.observe(rep(1, 1.0))
    assert b.budget_s(v, 0) == 5.0  # worker 2 has no step yet
    assert b.last_basis == dict(reason="initial", lead=None)
    # an evicted worker does not count
    assert b.budget_s(view([3, 2, 2], active=[True, True, False]), 0) == 0.0  # steps 1 and 1: lead 0
    b.observe(rep(2, 1.0))
    assert b.budget_s(v, 0) == 0.0  # everybody level: lead 0 < 2


def test_artifact_rule_two_steps_and_whole_durations():
    b = WholeTransmissionBudget(initial_budget_s=5.0, history=30, straggler_steps=2)
    # steps: worker 0 -> 5, worker 1 -> 4, worker 2 -> 3 (pushes and pulls both count)
    durations = {0: [0.4, 0.6, 0.5, 0.7, 0.3], 1: [0.2, 0.2, 0.2, 0.2], 2: [2.0, 0.1, 0.1]}
    for w, ds in durations.items():
        for k, d in enumerate(ds):
            b.observe(rep(w, d, mandatory_s=0.01, direction="push" if k % 2 == 0 else "pull"))
    v = view([3, 2, 2])  # the push counts do not matter to this rule, only the steps
    assert b.budget_s(v, 2) == 0.0 and b.last_basis["lead"] == 0  # the slowest
    assert b.budget_s(v, 1) == 0.0 and b.last_basis["lead"] == 1  # one step ahead (a push): still a straggler
    # two steps ahead: max(longest of the last 30 whole durations, their mean) = max(2.0, 5.6 / 12);
    # mandatory_s (0.01) plays no part
    assert b.budget_s(v, 0) == pytest.approx(2.0)
    assert b.last_basis == dict(reason="history", lead=2)


def test_artifact_rule_history_window_and_mean():
    b = WholeTransmissionBudget(initial_budget_s=5.0, history=3, straggler_steps=2)
    for d in [9.0, 9.0, 9.0, 1.0, 1.0, 1.0]:  # all from worker 0: six steps
        b.observe(rep(0, d))
    b.observe(rep(1, 0.5))  # worker 1: one step
    # last 3 durations: 1.0, 1.0, 0.5 -> 1.0 ; mean of all 7: 30.5 / 7 = 4.357 -> the mean wins
    assert b.budget_s(view([3, 1]), 0) == pytest.approx(30.5 / 7)


def test_mandatory_rule_reads_mandatory_part_and_push_counts():
    b = MandatoryTimeBudget(initial_budget_s=5.0, history=30, straggler_lead=1)
    for w in range(3):
        b.observe(rep(w, duration_s=1.0, mandatory_s=0.25))
    v = view([7, 6, 6])
    assert b.budget_s(v, 1) == 0.0  # tied with the slowest push count
    assert b.budget_s(v, 0) == pytest.approx(0.25)  # one iteration ahead: the mandatory part, not 1.0


def test_budget_rules_are_selected_by_name_and_validated():
    assert BUDGET_RULES[0] == "artifact" and PREFIX_ORDERS[0] == "artifact"  # the defaults
    assert isinstance(make_budget("artifact", 5.0, 30), WholeTransmissionBudget)
    assert isinstance(make_budget("mandatory", 5.0, 30), MandatoryTimeBudget)
    assert ROG(4).budget_rule == "artifact" and ROG(4).prefix_order == "artifact"
    assert make_policy("ROG", 20, budget_rule="mandatory").budget_rule == "mandatory"
    with pytest.raises(ValueError, match="budget_rule"):
        ROG(4, budget_rule="whole")
    with pytest.raises(ValueError, match="prefix_order"):
        ROG(4, prefix_order="magnitude")
    with pytest.raises(ValueError, match="straggler_steps"):
        ROG(4, straggler_steps=-1)
    with pytest.raises(ValueError, match="duration_s"):
        WholeTransmissionBudget().observe(rep(0, float("nan")))


def test_policy_logs_what_decided_the_budget():
    rog = ROG(4, initial_budget_s=2.0)
    v = view([2, 1])
    assert rog.push_budget_s(v, 0) == 2.0
    assert rog.budget_basis == dict(rule="artifact", reason="initial", lead=None)
    for w, n in ((0, 3), (1, 1)):
        for _ in range(n):
            rog.observe(rep(w, 0.5))
    assert rog.push_budget_s(v, 0) == pytest.approx(0.5)
    assert rog.budget_basis == dict(rule="artifact", reason="history", lead=2)


# ------------------------------------------------------------------ the mandatory prefix
def test_prefix_orders_differ_only_in_the_extra_rows():
    # 100 rows of one size in 10 tensors; S=10: MTA 0.1757.. -> 18 rows; extra 0.075 -> 26 mandatory in all
    part = RowPartition.from_shapes([(f"t{k}", (10, 100)) for k in range(10)])
    s = 10
    mta, total = mandatory_rows(100, s, "none"), mandatory_rows(100, s)
    assert (mta, total) == (int(np.ceil(mta_fraction(s) * 100)), 26) and mta == 18
    # importance: staleness by row (row id % 5: 0..4 iterations stale), tensor scale rising with k
    row_push_iter = 10 - (np.arange(100) % 5)
    scale = np.linspace(0.1, 1.0, 10).astype(np.float32)  # tensor 9 is the largest
    wv = WorkerView(part, 0, 11, row_push_iter, scale)
    art = ROG(s, prefix_order="artifact").push_plan(wv)
    imp = ROG(s, prefix_order="importance").push_plan(wv)
    assert art.mandatory_rows == imp.mandatory_rows == 26
    # both: the 18 most important first = the most stale (row_push_iter 6: rows 4, 9, ..., 99: 20 rows)
    # of the largest tensors (9, then 8: rows 94, 99, 84, 89, ...)
    stalest = [r for r in range(100) if r % 5 == 4]  # 20 rows, 4 iterations stale
    by_scale = sorted(stalest, key=lambda r: (-(r // 10), r))
    assert art.order[:18].tolist() == imp.order[:18].tolist() == by_scale[:18]
    # importance: the next 8 are still by importance (the two left of the stalest, then 3-stale rows)
    assert imp.order[18:20].tolist() == by_scale[18:20]
    # artifact: the next 8 are the first of the rest by tensor magnitude: tensor 9's other rows (ids ascending)
    rest9 = [r for r in range(90, 100) if r not in by_scale[:18]]
    assert art.order[18:26].tolist() == rest9[:8]
    # at S <= 4 the extra share is 0: the two orders are the same plan
    wv4 = WorkerView(part, 0, 5, 4 - (np.arange(100) % 3), scale)
    a4, i4 = ROG(4, prefix_order="artifact").push_plan(wv4), ROG(4, prefix_order="importance").push_plan(wv4)
    assert np.array_equal(a4.order, i4.order) and a4.mandatory_rows == i4.mandatory_rows == 32


def test_prefix_holds_required_rows_and_then_the_extra_share():
    part = RowPartition.from_shapes([(f"t{k}", (10, 100)) for k in range(10)])
    required = np.arange(30, 60)  # 30 rows the PS asked for: more than the 18 MTA rows
    wv = WorkerView(part, 0, 3, np.full(100, 2), np.ones(10, dtype=np.float32), required_rows=required)
    art = ROG(10, prefix_order="artifact").push_plan(wv)
    imp = ROG(10, prefix_order="importance").push_plan(wv)
    assert set(art.order[:30].tolist()) == set(required.tolist())
    assert art.mandatory_rows == 30 + (26 - 18)  # the required rows, then the extra share's 8 rows
    assert imp.mandatory_rows == 30  # the required rows already exceed the 26 mandatory rows


# ------------------------------------------------------------------ in the simulator
PART = RowPartition.from_shapes([(f"t{k}", (100, 64)) for k in range(4)])  # 400 rows of 64 elements
LU = LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, milestones=())
CODEC = SignCodec()
CHUNK = chunk_bytes_for_share(CODEC.row_wire_bytes(PART), ARTIFACT_CHUNK_SHARE)
MTA_ROWS = mandatory_rows(PART.n_rows, 4)  # ceil(0.31767 * 400) = 128


def _grad(r, w, n):
    rng = np.random.default_rng(1000 * r + n)
    return (w + rng.standard_normal(w.size).astype(np.float32)).astype(np.float32)


def _sim(rule, compute_s, rates_mbit, iterations=16):
    cfg = SimConfig(partition=PART, n_workers=4, policy=make_policy("ROG", 4, budget_rule=rule), gradient_fn=_grad,
                    codec=CODEC, iterations=iterations, compute_s=compute_s,
                    uplinks=[constant_link(r) for r in rates_mbit], downlinks=[constant_link(r) for r in rates_mbit],
                    chunk_bytes=CHUNK, local_update=LU)
    sim = simulate(cfg)
    return {w: sorted((r for r in sim.records if r.worker == w), key=lambda r: r.iteration) for w in range(4)}


def _full_push_s(rate_mbit):
    """Seconds a push of every row takes: its frames' bytes (header and segment table each) / rate."""
    order = np.arange(PART.n_rows)
    cp = plan_chunks(PART, order, MTA_ROWS, CODEC.row_wire_bytes(PART), CHUNK)
    nbytes = sum(frame_bytes(len(canonical_segments(PART, ch.segments)), CODEC.data_bytes(ch.n_rows * 64))
                 for ch in cp.chunks)
    return nbytes * 8 / (rate_mbit * 1e6)


def test_sim_level_workers_are_all_stragglers_under_the_artifact_rule():
    """Four equal constant links with spare capacity, equal compute: the workers stay level, so after the
    first iterations every worker is less than two transmission steps ahead of the slowest and every
    budget is 0: each push delivers exactly the mandatory (MTA) rows, under both rules."""
    assert MTA_ROWS == 128  # ceil(0.31767 * 400): the MTA share of S=4, no extra share at S <= 4
    assert _full_push_s(4.0) < 0.01  # spare capacity: a full push takes < 1 % of the 1 s iteration
    for rule in BUDGET_RULES:
        recs = _sim(rule, 1.0, [4.0] * 4, iterations=10)
        for w in range(4):
            assert recs[w][0].push_share == 1.0 and recs[w][0].push_deadline_s == 5.0  # the initial budget
            for r in recs[w][2:]:
                assert r.push_rows == MTA_ROWS, (rule, w, r.iteration)
            if rule == "artifact":
                assert all(r.push_deadline_s == 0.0 for r in recs[w][2:])


def test_sim_leaders_send_every_row_under_artifact_and_the_mta_share_under_mandatory():
    """Equal links, worker 3 computes twice as long: the others run ahead (up to the gate, s = 4).
    artifact: the leaders' budget is the longest whole transmission seen, a full push (the first ones
    went whole under the 5 s initial budget), so they deliver every row; worker 3, the slowest, gets 0.
    mandatory: the leaders' budget is the longest mandatory part, so they deliver the MTA share."""
    compute = [1.0, 1.0, 1.0, 2.0]
    art = _sim("artifact", compute, [4.0] * 4)
    man = _sim("mandatory", compute, [4.0] * 4)
    full_s = _full_push_s(4.0)
    for w in range(3):
        later_art = [r for r in art[w] if r.iteration >= 4]
        assert later_art and all(r.push_share == 1.0 for r in later_art)
        assert all(r.push_deadline_s == pytest.approx(full_s, rel=1e-6) for r in later_art)
        later_man = [r for r in man[w] if r.iteration >= 4]
        assert all(r.push_rows == MTA_ROWS for r in later_man)
    for recs in (art, man):
        assert all(r.push_deadline_s == 0.0 and r.push_rows == MTA_ROWS for r in recs[3][1:])


def test_sim_a_slowed_link_gets_budget_zero_by_the_two_step_rule():
    """Worker 3's link is so slow that its mandatory push alone outlasts the others' iterations: it is
    always the slowest (lead 0 < 2 steps), so its budget is 0 after the first pull, while the others,
    several steps ahead, get the history budget (here the slow worker's own long transmissions) and
    send every row."""
    recs = _sim("artifact", 1.0, [4.0, 4.0, 4.0, 0.005], iterations=12)
    mandatory_push_s = _full_push_s(0.005) * MTA_ROWS / PART.n_rows
    assert mandatory_push_s > 1.0  # slower than a whole iteration of the others
    assert all(r.push_deadline_s == 0.0 for r in recs[3][1:])
    assert all(r.push_rows >= MTA_ROWS for r in recs[3][1:])
    for w in range(3):
        assert all(r.push_deadline_s > mandatory_push_s and r.push_share == 1.0 for r in recs[w][4:])


# ------------------------------------------------------------------ config plumbing
def test_config_entry_and_policy_options(run_config):
    from rog.experiment import sync_options as SO  # what the PS and the workers build their policy with
    from rog.experiment.config_upgrade import LEGACY_ATP
    from rog.policies.rog import Options

    assert dataclasses.asdict(Options()) == dict(budget_rule="artifact", prefix_order="artifact")  # the defaults
    with pytest.raises(ConfigError, match=r"--budget-rule \(budget_rule\) must be one of artifact, mandatory"):
        Options("whole")
    cfg = run_config(["--library", "ROG", "--threshold", "4", "--budget-rule", "mandatory"])
    assert cfg.sync.options == cfg.to_dict()["policy_options"] == dict(budget_rule="mandatory", prefix_order="artifact")
    assert make_policy("ROG", 4, **SO.policy_options(cfg)).budget_rule == "mandatory"
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("version", "policy_options")}  # before the atp entry
    assert SO.policy_options(RunConfig.from_dict(old)) == dict(LEGACY_ATP)  # what ROG ran then: the old rule
    assert SO.policy_options(run_config(["--library", "BSP"])) == {}  # BSP declares no options
    assert run_config(["--library", "BSP"]).sync.options is None


def test_run_items_reruns_a_rog_run_of_another_rule(tmp_path):
    import yaml

    from rog.experiment import cli
    from rog.experiment import items as I
    from rog.experiment import resume as R
    from rog.experiment.config import resolve_config

    spec = I.RunSpec("ROG", 4)
    argv = I.run_args(spec, I.PROFILES["quick"], 150.0, tmp_path, "outdoors") + ["--cache-dir", str(CACHE)]
    planned = R.planned_config(argv)
    assert planned["policy_options"] == dict(budget_rule="artifact", prefix_order="artifact")  # run.py's defaults
    bsp = I.run_args(I.RunSpec("BSP"), I.PROFILES["quick"], 150.0, tmp_path, "outdoors") + ["--cache-dir", str(CACHE)]
    assert R.planned_config(bsp)["policy_options"] is None
    legacy = resolve_config(cli.parse_args(argv))  # recorded before config.yaml had the entry (no version, no
    del legacy["version"], legacy["policy_options"]  # options): ROG ran the mandatory rule (LEGACY_ATP)
    for rule, cfg, action in (("artifact", resolve_config(cli.parse_args(argv)), "skip"),
                              ("mandatory", resolve_config(cli.parse_args(argv + ["--budget-rule", "mandatory"])), "rerun"),
                              ("legacy", legacy, "rerun")):
        d = tmp_path / rule / I.run_id(spec)
        d.mkdir(parents=True)
        (d / "config.yaml").write_text(yaml.safe_dump(cfg))
        (d / "DONE").write_text("{}\n")
        dec = R.decide(d, planned)
        assert dec.action == action, (rule, dec.why)
        if rule == "mandatory":
            assert dec.why.endswith("(policy_options.budget_rule: found 'mandatory', planned 'artifact')")
        if rule == "legacy":
            assert dec.why.endswith("(policy_options.budget_rule: found 'mandatory', planned 'artifact'; "
                                    "policy_options.prefix_order: found 'importance', planned 'artifact')")


# ------------------------------------------------------------------ statistics from the event logs
def _run_data(tmp_path, events):
    import pandas as pd

    from rog.analysis.load import RunData

    frames = {rank: pd.DataFrame.from_records(recs) for rank, recs in events.items()}
    cfg = dict(library="ROG", threshold=4, workers=2, policy_options=dict(budget_rule="artifact", prefix_order="artifact"))
    return RunData(run_dir=tmp_path, run_id="ROG4-test", config=cfg, status="done", t0_s=0.0, origin_unix_s=None,
                   events=frames)


def test_atp_stats_by_hand(tmp_path):
    from rog.papers.rog.atp import atp_markdown, atp_stats, atp_table

    def push(it, deadline, delivered):
        return dict(kind="push", t_s=float(it), iteration=it, rows_planned=10, rows_delivered=delivered, bytes=1,
                    deadline_s=deadline, delivered_share=delivered / 10, duration_s=0.1, mandatory_s=0.05)

    def stale(it, mean):
        return dict(kind="staleness", t_s=float(it), iteration=it, max=3, mean=mean)

    def pull(w, it, delivered, reason, lead):
        return dict(kind="pull", t_s=float(it), worker=w, iteration=it, rows_planned=10, rows_delivered=delivered,
                    bytes=1, deadline_s=0.0, delivered_share=delivered / 10, duration_s=0.1, mandatory_s=0.05,
                    budget_s=0.0, budget_rule="artifact", budget_reason=reason, budget_lead=lead)

    events = {
        "w0": [push(1, 5.0, 10), stale(1, 1.0), push(2, 0.0, 3), stale(2, 2.0), push(3, 0.5, 10), push(4, 0.0, 3)],
        "w1": [push(1, 5.0, 10), stale(1, 0.5), push(2, 0.0, 3), stale(2, 0.5), push(3, 2.0, 5), push(4, 1.0, 10)],
        "ps": [pull(0, 1, 10, "initial", None), pull(1, 1, 10, "straggler", 0), pull(0, 2, 3, "history", 3)],
    }
    s = atp_stats(_run_data(tmp_path, events))
    # budgets 5, 0, 0.5, 0, 5, 0, 2, 1: 3 of 8 at 0; sorted 0 0 0 0.5 1 2 5 5 -> median 0.75; p90 at 6.3 -> 5
    assert s["budgets"] == 8 and s["zero_budget_share"] == pytest.approx(3 / 8)
    assert s["budget_median_s"] == pytest.approx(0.75) and s["budget_p90_s"] == pytest.approx(5.0)
    # pushes delivering all 10 rows: 4 of 8; mean share (1 + .3 + 1 + .3 + 1 + .3 + .5 + 1) / 8
    assert s["full_push_share"] == pytest.approx(0.5) and s["mean_push_share"] == pytest.approx(5.4 / 8)
    assert s["pulls"] == 3 and s["full_pull_share"] == pytest.approx(2 / 3)  # the PS's pull records
    assert s["mean_row_staleness"] == pytest.approx((1.0 + 2.0 + 0.5 + 0.5) / 4)
    assert s["straggler_budget_share"] == pytest.approx(1 / 3) and s["median_lead"] == pytest.approx(1.5)
    assert s["budget_rule"] == "artifact" and s["artifact"] == dict(full_push_share=0.36, zero_budget_share=0.55)
    assert s["per_worker"] == [dict(worker=0, pushes=4, full_push_share=0.5, zero_budget_share=0.5),
                               dict(worker=1, pushes=4, full_push_share=0.5, zero_budget_share=0.25)]
    md = atp_markdown(atp_table([_run_data(tmp_path, events)]))
    assert md.rstrip().endswith("| w0 50/50, w1 50/25 |")
    assert "| ROG4-test | ROG-4 | artifact | 8 | 38 % | 55 % | 0.750 | 5.000 | 50 % | 36 % |" in md


# ------------------------------------------------------------------ the runtime logs what decided each budget
def test_runtime_pull_records_name_the_budget_and_its_basis(tmp_path, ps_team):
    import time

    from rog.local_update import LocalUpdate
    from rog.runtime import EventLog, ParameterServer, WorkerEngine, aligned_zeros, read_events

    part = RowPartition.from_shapes([("a", (40, 30)), ("b", (20, 30))])
    W, N = 3, 6
    with EventLog(tmp_path / "events-ps.jsonl", "ps", "t") as ps_log:
        ps = ParameterServer(part, W, make_policy("ROG", 2), CODEC, events=ps_log, chunk_bytes=64,
                             wait_timeout_s=30.0, join_timeout_s=30.0)

        def worker(r, end):
            params = aligned_zeros(part.n_elements)
            eng = WorkerEngine(end, part, params, make_policy("ROG", 2), CODEC, LocalUpdate(part.n_elements, LU),
                               chunk_bytes=64, wait_timeout_s=30.0)
            eng.join(30.0)
            for n in range(1, N + 1):
                if r == 2:
                    time.sleep(0.1)  # the slowest: the others get ahead
                eng.step(_grad(r, params, n))
            eng.flush()
            eng.close()

        ps_team(ps, worker, W)
    _, recs = read_events(tmp_path / "events-ps.jsonl")
    pulls = [r for r in recs if r["kind"] == "pull"]
    assert len(pulls) == W * N
    for p in pulls:
        assert p["budget_rule"] == "artifact" and p["budget_s"] == p["deadline_s"]
        if p["budget_reason"] == "initial":
            assert p["budget_s"] == 5.0 and p["budget_lead"] is None
        elif p["budget_reason"] == "straggler":
            assert p["budget_s"] == 0.0 and 0 <= p["budget_lead"] < 2
        else:
            assert p["budget_reason"] == "history" and p["budget_lead"] >= 2 and p["budget_s"] > 0
    assert {p["budget_reason"] for p in pulls if p["worker"] == 2} <= {"initial", "straggler"}


def test_run_flags_reach_config_yaml(tmp_path):
    from rog.experiment import cli
    from rog.experiment import config as runcfg

    def cfg_of(*flags):
        a = cli.parse_args(["--testbed", "loopback", "-c", "none", "--result-dir", str(tmp_path), *flags])
        return runcfg.resolve_config(a)

    assert cfg_of("--library", "ROG")["policy_options"] == dict(budget_rule="artifact", prefix_order="artifact")
    assert cfg_of("--library", "ROG", "--threshold", "20", "--budget-rule", "mandatory", "--prefix-order",
                  "importance")["policy_options"] == dict(budget_rule="mandatory", prefix_order="importance")
    assert cfg_of("--library", "SSP", "--budget-rule", "mandatory")["policy_options"] is None
    with pytest.raises(SystemExit):
        cli.parse_args(["--budget-rule", "whole"])
