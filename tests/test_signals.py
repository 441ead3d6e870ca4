"""SIGINT/SIGTERM at seeded random moments: tc_replay.py restores every qdisc (root; short), testbed.py
create removes every namespace of its prefix (root; slow), run.py keeps its partial results marked
INCOMPLETE and reruns to DONE (slow), run_all.sh marks its current run INCOMPLETE (slow)."""

from __future__ import annotations

import os

import pytest

from benchmarks.faults import signals
from benchmarks.faults.registry import ScenarioContext

root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tc, ip netns)")


def ctx(tmp_path, quick=True, seed=0):
    return ScenarioContext(work_dir=tmp_path, quick=quick, seed=seed, prefix="rgzq")


@root
def test_tc_replay_restores_qdiscs_after_signals(tmp_path):
    out = signals.signals_tc_replay(ctx(tmp_path))
    assert out["passed"], out.get("error")
    trials = out["details"]["trials"]
    assert {t["signal"] for t in trials} == {"SIGINT", "SIGTERM"} and {t["phase"] for t in trials} == {"running"}
    for t in trials:
        assert t["restored"] and not t["ifb_left"]
        if t["landed"] and t["phase"] == "running":
            assert t["exit"] == 128 + (2 if t["signal"] == "SIGINT" else 15)
    assert out["details"]["rerun_ok"]


@pytest.mark.slow  # two testbed creations: about a minute on a loaded 2-core machine
@root
def test_testbed_create_interrupted_leaves_nothing(tmp_path):
    out = signals.signals_testbed(ctx(tmp_path, seed=3))
    assert out["passed"], out.get("error")
    trials = out["details"]["trials"]
    assert all(not t["left"] for t in trials)
    building = [t for t in trials if t["phase"] == "building" and t["landed"]]
    assert building, "no signal arrived while namespaces were being built"
    assert all(t["exit"] == 128 + (2 if t["signal"] == "SIGINT" else 15) for t in building)


@pytest.mark.slow
def test_run_py_loopback_interrupted_then_rerun(tmp_path):
    out = signals.signals_run_loopback(ctx(tmp_path))
    assert out["passed"], out.get("error")
    t = out["details"]["trials"][0]
    assert t["incomplete"].startswith("terminated") and "config.yaml" in t["kept"]
    assert out["details"]["rerun_done"]


@pytest.mark.slow
@root
def test_run_py_emulated_interrupted_then_rerun(tmp_path):
    out = signals.signals_run_emulated(ctx(tmp_path))
    assert out["passed"], out.get("error")
    assert out["details"]["trials"][0]["left"] == []


@pytest.mark.slow
@root
def test_run_all_interrupted_marks_its_run_incomplete(tmp_path):
    out = signals.signals_run_all(ctx(tmp_path))
    assert out["passed"], out.get("error")
