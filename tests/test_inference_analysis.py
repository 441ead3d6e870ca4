"""Intra-DP summary rows and the opt-in item: values from hand-made result files."""

from __future__ import annotations

import json

import pytest

from rog.papers.intradp.summary import intradp_markdown, intradp_summary
from rog.experiment import items as I


def _method(lat, energy, robot, xfer, server, plans):
    return {"n": 10, "mean_latency_s": lat, "mean_energy_j": energy, "robot_compute_s": robot, "transfer_s": xfer,
            "server_compute_s": server, "robot_compute_share": robot / lat, "transfer_share": xfer / lat,
            "server_compute_share": server / lat, "share_sum": (robot + xfer + server) / lat, "plans": plans}


def test_summary_reductions_by_hand(tmp_path):
    d = tmp_path / "intradp" / "trace-vgg19-indoors-synth-passive"
    d.mkdir(parents=True)
    doc = {"mode": "trace", "model": "vgg19", "trace": "configs/traces/indoors-synth.csv", "duration_s": 30,
           "emulation": {"estimate": "passive"},
           "methods": {"local": _method(0.6, 8.0, 0.6, 0, 0, {"local": 10}),
                       "all": _method(0.2, 1.0, 0, 0.15, 0.05, {"cut@0": 10}),
                       "layer-latency": _method(0.2, 1.0, 0, 0.15, 0.05, {"cut@0": 10}),
                       "layer-energy-deadline": _method(0.25, 0.9, 0.05, 0.15, 0.05, {"cut@9": 10}),
                       "intra-dp": _method(0.15, 1.2, 0.1, 0.1, 0.03, {"split": 9, "local": 1})}}
    (d / "result.json").write_text(json.dumps(doc))
    s = intradp_summary(tmp_path)
    (row,) = s["table6"]
    assert row["best_layer"] == "layer-latency"
    assert row["latency_reduction_pct"] == pytest.approx(25.0)  # 1 - 0.15 / 0.2
    assert row["energy_reduction_pct"] == pytest.approx(100 * (1 - 1.2 / 0.9))
    assert row["faster_than_all"] and row["faster_than_every_layer"]
    assert row["intra_dp_local_share"] == pytest.approx(0.1)
    md = intradp_markdown(tmp_path)
    # graded against the paper's same row (VGG19 indoors: 1 - 54.62 / 69.08 = 20.9 %), not the applications' range
    assert "25.0 % below the best layer partition (DSCCS-like); the paper's same row: 20.9 % (matches" in md
    assert "14.9-41.1" not in md
    assert "= 153 %" in md  # Intra-DP's shares (0.1 + 0.1 + 0.03) / 0.15 overlap
    assert "54.6" in md  # the paper's Intra-DP indoors latency for VGG19


def test_intradp_item_is_opt_in():
    assert "intradp" not in I.ITEM_NAMES  # not in the default plan
    assert I.items_for(["intradp"]) == []  # known by name, no run.py runs
    with pytest.raises(ValueError, match="unknown item"):
        I.items_for(["intradpx"])


def test_replicate_steps_use_fresh_seeds_and_leave_the_default_steps_alone(tmp_path):
    from rog.papers.intradp import item as IT

    default = IT.steps(tmp_path)
    rep = IT.replicate_steps(tmp_path, [101, 102, 103], ["vgg19"], ["indoors", "outdoors"])
    assert len(rep) == 6 and [s for *_, s in rep] == [101, 102, 103] * 2
    for d, args, trace, env, seed in rep:
        assert trace.name == f"synth-{env}-seed{seed}.csv" and args[args.index("--trace") + 1] == str(trace)
        assert args[args.index("--duration-s") + 1] == "60" and args[-1] == d
    assert IT.steps(tmp_path) == default and all("--replicate-seeds" not in a for _, a in default)
    cuda = IT.replicate_steps(tmp_path, [101], ["densenet"], ["outdoors"], "cuda")
    assert cuda[0][0].endswith("-passive-cuda") and "cuda" in cuda[0][1]


def test_table6_runs_both_intra_dp_planners_unless_told(tmp_path):
    from rog.papers.intradp import item as IT

    def planners(args):
        return args[args.index("--planners") + 1].split(",")

    for d, args in IT.steps(tmp_path):
        if args[0] == "trace":
            assert planners(args)[-2:] == ["intra-dp", "intra-dp-loss"] and "layer-latency" in planners(args)
    one = IT.replicate_steps(tmp_path, [101], ["vgg19"], ["indoors"], intra_dp_plans="one-segment")
    assert "intra-dp-loss" not in planners(one[0][1]) and "intra-dp" in planners(one[0][1])
