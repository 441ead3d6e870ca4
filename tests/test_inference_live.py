"""Intra-DP live executor on a real netns link: outputs equal the whole forward, transfers take bytes /
rate, the testbed is gone afterwards (about 6 s here: both processes run SCHED_FIFO)."""

from __future__ import annotations

import pytest

from rog.inference.costmodel import Plan, WIRE_FACTOR, cut_plan, local_plan




def test_live_plans_match_reference_and_clean_up(tmp_path):
    from rog.testbed.netns import have_root_netns

    if not have_root_netns():
        pytest.skip("needs root and network namespaces")
    from rog.experiment.emulated import leftovers
    from rog.inference import runner as R

    prep = R.prepare("resnet18", ["all"], [50], robot_factor=4.0, server_factor=2.0, repeats=3)
    plans = [local_plan(prep.graph), cut_plan(0), Plan(0, 4, 0.5, "server"), Plan(0, 4, 0.5, "robot")]
    with R.LiveSession(prep, tmp_path) as s:
        prefix = s.net.prefix
        for p in plans:
            s.run_fixed(p, 40.0, 2)
    assert leftovers(prefix) == []
    recs = R.read_records(tmp_path / "records.jsonl")
    assert len(recs) == 2 * len(plans)
    for r in recs:  # the split outputs equal the whole forward (same checksum as the robot's reference)
        assert r["out_checksum"] == pytest.approx(s.reference, rel=1e-5, abs=1e-3)
        assert r["output_match"] is True  # allclose with the whole forward, checked by the robot
    offload = [r for r in recs if r["label"] == "cut@0"]
    for r in offload:  # the image cannot cross a 40 Mbit/s link faster than bytes / rate
        assert r["transfer_s"] >= 0.95 * 3 * 224 * 224 * 4 * WIRE_FACTOR * 8 / 40e6


def test_output_check_compares_with_the_whole_model():
    import types

    import torch

    from rog.inference.experiment import output_check
    from rog.inference.live import OUTPUT_TOL, Robot

    ref = torch.linspace(-3, 3, 10).reshape(1, 10)
    me = types.SimpleNamespace(reference_out=ref, out_tol=OUTPUT_TOL["cpu"])
    ok = Robot.check_output(me, ref + 1e-7)
    assert ok["output_match"] and ok["output_max_abs_diff"] < 1e-6  # float32 rounding of 1e-7
    bad = Robot.check_output(me, ref + torch.tensor([0.0] * 9 + [1e-3]))  # one logit off by 1e-3 > atol 1e-5 + rtol * 3
    assert not bad["output_match"] and bad["output_max_abs_diff"] == pytest.approx(1e-3, rel=1e-3)
    assert not Robot.check_output(me, ref.reshape(10, 1))["output_match"]  # wrong shape
    # the run's count: a record without the check counts as a mismatch
    recs = [{"output_match": True, "output_max_abs_diff": 0.0}, {"output_match": False, "output_max_abs_diff": 0.5}, {}]
    assert output_check(recs) == {"output_checked": 3, "output_mismatches": 2, "output_max_abs_diff": 0.5}
