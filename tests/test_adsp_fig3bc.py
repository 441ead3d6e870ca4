"""ADSP's Figs. 3b/3c (rog.papers.adsp.fig3bc): Eq. (3)'s implicit momentum from measured steps per commit, by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from rog.analysis.load import RunData
from rog.papers.adsp.fig3bc import fig3bc_markdown, fig3bc_rows, implicit_momentum, steps_per_commit


def _run(tmp_path, run_id, per_worker):  # per_worker: [(steps, commits)]
    events = {}
    for w, (steps, commits) in enumerate(per_worker):
        events[f"w{w}"] = pd.DataFrame.from_records([dict(kind="compute")] * steps + [dict(kind="push")] * commits
                                                    + [dict(kind="pull")] * commits)
    return RunData(tmp_path / run_id, run_id, dict(workers=len(per_worker)), "done", 0.0, None, events=events)


def test_implicit_momentum_of_eq3_by_hand():
    # p = 1 / (1 + (1 - 1/m) * sum tau): m = 3 workers committing every step: p = 1 / (1 + 2/3 * 3) = 1/3
    assert implicit_momentum([1.0, 1.0, 1.0]) == pytest.approx(2 / 3)
    assert implicit_momentum([1.0]) == 0.0  # one worker: no asynchrony, no implicit momentum
    assert implicit_momentum([10.0, 10.0, 4.0]) == pytest.approx(1 - 1 / (1 + 2 / 3 * 24))
    assert implicit_momentum([]) is None


def test_rows_follow_the_grid_and_fall_with_the_commit_rate(tmp_path):
    r1 = _run(tmp_path, "k1", [(60, 1), (60, 1), (20, 1)])
    r4 = _run(tmp_path, "k4", [(60, 6), (60, 6), (20, 5)])
    assert steps_per_commit(r4) == [10.0, 10.0, 4.0]
    ushape = dict(by_seed=[dict(seed=0, best_k=4, rows=[dict(k=1, run_id="k1", time_to_target_s=25.0),
                                                        dict(k=4, run_id="k4", time_to_target_s=18.0)])])
    rows = fig3bc_rows(ushape, [r1, r4])
    assert [x["k"] for x in rows] == [1, 4] and rows[1]["best"] and not rows[0]["best"]
    assert rows[0]["implicit_momentum"] == pytest.approx(1 - 1 / (1 + 2 / 3 * 140))
    assert rows[0]["implicit_momentum"] > rows[1]["implicit_momentum"]
    md = "\n".join(fig3bc_markdown(rows))
    assert "| 0 | 4 | 10.0, 10.0, 4.0 | 0.941 | 18.0 s (fastest) |" in md
