"""The analysis puts event logs written on hosts with their own (skewed) clocks back onto the PS's clock
(rog.analysis.clock_align via rog.analysis.load.load_run).

The synthetic run: the PS's origin is at Unix time U.  Worker k's process started ``START_S[k]`` s later
(its own origin, its own monotonic clock) and its wall clock is off by ``SKEW_S[k]``; every worker does
iteration 1 at the same true times (on the PS's run clock: compute at 10.0 for 0.5 s, push 10.5 for 0.2 s,
pull 10.7 for 0.3 s), written in its own ``t_s``.  The PS estimated each offset (PS clock - worker clock
= -SKEW_S[k], off by ``EST_ERR_S``)."""

from __future__ import annotations

import json

import pytest

from rog.analysis.clock_align import rank_shifts_s
from rog.analysis.load import load_run

U = 1_790_000_000.0
START_S = {"w0": 3.0, "w1": 1.25}
SKEW_S = {"w0": 7.5, "w1": -4.25}
EST_ERR_S = {"w0": 0.002, "w1": -0.001}  # the estimate's error (within delay/2 of the truth)
TRUE_T = {"run_start": 10.0, "compute": 10.0, "push": 10.5, "pull": 10.7}


def _transfer(it: int, dur: float) -> dict:
    return dict(iteration=it, rows_planned=10, rows_delivered=10, bytes=100, deadline_s=None, delivered_share=1.0,
                duration_s=dur, mandatory_s=None)


def _write_log(path, rank: str, origin_mono: float, origin_unix: float, shift_s: float) -> None:
    """Records at the true times, written as ``t_s`` = true time - shift_s (the rank's own origin)."""
    t = {k: v - shift_s for k, v in TRUE_T.items()}
    w = int(rank[1:]) if rank != "ps" else 0
    lines = [dict(kind="header", schema=1, rank=rank, run_id="r", origin_monotonic_s=origin_mono,
                  origin_unix_s=origin_unix, pid=1)]
    if rank != "ps":
        lines += [dict(kind="run_start", t_s=t["run_start"], worker=w),
                  dict(kind="compute", t_s=t["compute"], iteration=1, duration_s=0.5),
                  dict(kind="push", t_s=t["push"], **_transfer(1, 0.2)),
                  dict(kind="pull", t_s=t["pull"], **_transfer(1, 0.3))]
    else:
        lines += [dict(kind="pull", t_s=t["pull"] + 0.05, worker=0, **_transfer(1, 0.25))]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _run_dir(tmp_path, offsets: bool, shared_origin: bool = False):
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.yaml").write_text("run_id: r\nlibrary: BSP\nworkers: 2\n")
    _write_log(d / "events-ps.jsonl", "ps", 1000.0, U, 0.0)
    for rank in ("w0", "w1"):
        if shared_origin:  # one machine: the PS's origin, its monotonic clock (only the wall clock is skewed)
            _write_log(d / f"events-{rank}.jsonl", rank, 1000.0, U + SKEW_S[rank], 0.0)
        else:  # its own host: its own origin, START_S later, on a wall clock SKEW_S off
            _write_log(d / f"events-{rank}.jsonl", rank, 50_000.0 + START_S[rank], U + START_S[rank] + SKEW_S[rank],
                       START_S[rank])
    if offsets:
        workers = {r: {"join": {"offset_s": -SKEW_S[r] + EST_ERR_S[r], "delay_s": 0.01, "exchanges": 8},
                       "end": {"offset_s": -SKEW_S[r] + EST_ERR_S[r], "delay_s": 0.012, "exchanges": 8}}
                   for r in ("w0", "w1")}
        (d / "clock_offsets.json").write_text(json.dumps({"reference": "ps", "workers": workers}))
    return d


def test_skewed_host_logs_are_aligned_to_the_ps_clock(tmp_path):
    run = load_run(_run_dir(tmp_path, offsets=True))
    assert run.t0_s == pytest.approx(10.0 + min(EST_ERR_S.values()), abs=1e-6)  # w1's run_start, estimate error included
    for rank in ("w0", "w1"):
        ev = run.events[rank].set_index("kind")["t_s"]
        for kind, true_t in TRUE_T.items():  # every record back at its true time, up to the estimate's error
            assert ev[kind] == pytest.approx(true_t + EST_ERR_S[rank], abs=1e-6), (rank, kind)
        assert run.clock_offsets_s[rank] == pytest.approx(-SKEW_S[rank] + EST_ERR_S[rank])
    it = run.iterations.set_index("worker")
    # iteration 1 starts together on the aligned clock (raw t_s: 1.75 s apart; by the wall clocks alone: 11.75 s)
    assert abs(it.loc[0, "t_start_s"] - it.loc[1, "t_start_s"]) == pytest.approx(0.003, abs=1e-6)
    assert it.loc[0, "pull_t_s"] - it.loc[0, "t_start_s"] == pytest.approx(0.7, abs=1e-9)
    assert run.origin_unix_s == U
    assert not run.warnings


def test_without_offsets_the_wall_clocks_are_taken_as_right_and_named(tmp_path):
    run = load_run(_run_dir(tmp_path, offsets=False))
    for rank in ("w0", "w1"):  # off by exactly the skew of that host's wall clock
        assert run.events[rank].set_index("kind")["t_s"]["compute"] == pytest.approx(10.0 + SKEW_S[rank], abs=1e-6)
    assert sorted(w.split(":")[0] for w in run.warnings) == ["w0", "w1"]


def test_ranks_sharing_the_ps_clock_are_left_alone(tmp_path):
    run = load_run(_run_dir(tmp_path, offsets=True, shared_origin=True))
    for rank in ("w0", "w1"):  # one machine's monotonic clock: t_s already line up, the offsets are not applied
        assert run.events[rank].set_index("kind")["t_s"]["compute"] == pytest.approx(10.0, abs=1e-12)
    assert rank_shifts_s(run.headers, None) == ({}, {}, [])
