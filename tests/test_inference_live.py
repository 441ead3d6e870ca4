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
    offload = [r for r in recs if r["label"] == "cut@0"]
    for r in offload:  # the image cannot cross a 40 Mbit/s link faster than bytes / rate
        assert r["transfer_s"] >= 0.95 * 3 * 224 * 224 * 4 * WIRE_FACTOR * 8 / 40e6
