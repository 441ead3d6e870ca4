"""ADSP's Theorem 2 precondition (every worker commits about equally often), checked end to end: PS +
three worker engines in process, compute paced equally and unequally (one worker 5x slower per
mini-batch), the PS's commit counts at every checkpoint read back by rog.papers.adsp.theorem2.

The bound, derived from the timer rule (not fitted to runs):

* A worker at rate d commits when ``Gamma/d - O_prev`` has passed since its last commit ended, checked
  at its mini-batch boundaries, and the commit takes ``O_cur``; so the time from one commit's start to
  the next one's start is ``P in [Gamma/d - dO, Gamma/d + s_i + dO]`` (``s_i``: its mini-batch time,
  the overshoot past the timer; ``dO``: how much the round trip varies).
* In any stretch of length Gamma it therefore starts between ``floor(Gamma/P_max)`` and
  ``ceil(Gamma/P_min)`` commits, which lie in ``[d - 1, d + 1]`` when ``s_i + dO <= Gamma/(d(d-1))``
  and ``dO <= Gamma/(d(d+1))``.  With k = 2 the catch-up rule hands out ``d <= 2k = 4``; with
  Gamma = 2 s these need ``s_i + dO <= 0.16 s`` and ``dO <= 0.1 s`` (here ``s_i <= 0.05 s``; an
  in-process round trip varies by milliseconds, tens on a loaded machine).
* Catch-up: at a checkpoint with spread ``D <= k``, the leader gets ``d = k`` (so at most ``k + 1``
  more commits), a worker ``D_i`` behind gets ``d = D_i + k`` (at least ``D_i + k - 1`` more), so
  the next spread is at most ``D_i + (k + 1) - (D_i + k - 1) = 2``; the first period starts at
  spread 0 with ``d = k`` for all, so it ends at most 2.  Hence **spread <= 2 at every checkpoint**,
  whatever the compute speeds, where a rule counting local steps (commit every tau steps) would give
  counts in the ratio of the speeds (5:1 here).
"""

from __future__ import annotations

import pandas as pd
import pytest

from rog.papers.adsp.theorem2 import commit_spread
from rog.runtime import read_events

from test_adsp import _run

GAMMA_S, K = 2.0, 2
SPREAD_BOUND = 2  # derived above


@pytest.mark.parametrize("pauses, steps", [
    ([0.02, 0.02, 0.02], [215, 215, 215]),  # equal speeds
    ([0.01, 0.01, 0.05], [400, 400, 90]),  # worker 2: 5x slower per mini-batch
], ids=["equal", "unequal"])
def test_commit_spread_bounded_by_the_timer_rule(tmp_path, pauses, steps):
    opts = dict(gamma_s=GAMMA_S, floor_s=0.0, fixed_rate=K)
    _run("ADSP", 0, opts, steps, pauses, events_dir=tmp_path)
    _, recs = read_events(tmp_path / "events-ps.jsonl")
    sp = commit_spread(pd.DataFrame.from_records(recs))
    assert len(sp["checkpoints"]) >= 2, sp  # at least two checkpoints before the first flush
    print("commit counts per checkpoint:", [(round(c["t_s"], 2), c["commits"]) for c in sp["checkpoints"]])
    for c in sp["checkpoints"]:
        assert c["spread"] <= SPREAD_BOUND, sp
    # every worker committed about K per check period, the slow one included (not 1/5 of the others)
    last = sp["checkpoints"][-1]
    periods = round(last["t_s"] / GAMMA_S)
    assert min(last["commits"]) >= K * periods - SPREAD_BOUND, sp


def test_commit_spread_reads_checkpoints_before_the_first_flush():
    recs = [dict(kind="schedule", t_s=1.0, event="checkpoint", commits=[2, 1, 2]),
            dict(kind="schedule", t_s=2.0, event="checkpoint", commits=[4, 4, 3]),
            dict(kind="flush", t_s=2.5, worker=0, direction="push"),
            dict(kind="schedule", t_s=3.0, event="checkpoint", commits=[4, 6, 6])]
    sp = commit_spread(pd.DataFrame.from_records(recs))
    assert [c["spread"] for c in sp["checkpoints"]] == [1, 1] and sp["max_spread"] == 1
    assert sp["final_commits"] == [4, 4, 3] and commit_spread(None)["max_spread"] is None


def test_theorem2_table_in_the_summary():
    from rog.papers.adsp.summary import adsp_markdown

    row = dict(run_id="r1", tag="fig1", seed=0, checkpoints=3, max_spread=1, median_spread=0.0, final_commits=[5, 5, 4],
               delivery=dict(median_s=0.05, max_s=0.2, windows=4, remeasured=1))
    md = adsp_markdown(dict(fig1=[], fig1_target={}, ushape=dict(rows=[]), outdoors=[], theorem2=[row]))
    assert "| r1 | fig1 | 3 | 1 | 0.0 | [5, 5, 4] | 0.050 / 0.200 | 4 (1) |" in md


def test_rate_delivery_from_the_logs(tmp_path):
    from rog.papers.adsp.delivery import rate_delivery
    from rog.analysis.load import RunData

    ps = pd.DataFrame.from_records([
        dict(kind="rate_push", t_s=1.0, worker=0, seq=1, rate=1.0, restart=True),
        dict(kind="rate_push", t_s=1.0, worker=1, seq=1, rate=1.0, restart=True),
        dict(kind="rate_push", t_s=5.0, worker=0, seq=2, rate=2.0, restart=False, error="LinkClosed: gone"),
        dict(kind="schedule", t_s=7.0, event="window", held_s=0.5, remeasure=True),
        dict(kind="schedule", t_s=9.0, event="window", held_s=1.5)])
    w0 = pd.DataFrame.from_records([dict(kind="rate", t_s=1.25, seq=1, rate=1.0, restart=True)])
    w1 = pd.DataFrame.from_records([dict(kind="rate", t_s=1.05, seq=1, rate=1.0, restart=True)])
    run = RunData(tmp_path, "r", {}, "done", 0.0, None, events={"ps": ps, "w0": w0, "w1": w1})
    d = rate_delivery(run)
    assert d["pushes"] == 2 and d["delivered"] == 2  # the failed send is no push
    assert d["median_s"] == pytest.approx(0.15) and d["max_s"] == pytest.approx(0.25)
    assert d["windows"] == 2 and d["remeasured"] == 1 and d["held_median_s"] == pytest.approx(1.0)
