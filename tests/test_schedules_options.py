"""--schedule's checks, the time composition, the link estimate, the item's calibration rule and analysis."""

from __future__ import annotations

import argparse
import json

import pytest

from rog.errors import ConfigError
from rog.experiment import schedule_options as SCH
from rog.experiment.cli import build_parser
from rog.papers.dynacomm.item import calibrated_rate_mbit
from rog.schedules.composition import compose, length
from rog.schedules.estimate import LinkEstimate


def ns(**kw):
    base = dict(schedule="dynacomm", schedule_epoch_iterations=None, library="BSP", batchsize=1)
    base.update(kw)
    return argparse.Namespace(**base)


def test_flag_parses_and_defaults_to_sequential():
    assert build_parser().parse_args([]).schedule == "sequential"
    assert build_parser().parse_args(["--schedule", "dynacomm-iter"]).schedule == "dynacomm-iter"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--schedule", "bogus"])


@pytest.mark.parametrize("kw,compute_s,device,needle", [
    (dict(library="ROG"), None, "cpu", "--library BSP"),
    (dict(batchsize=2), None, "cpu", "-b 1"),
    ({}, 0.5, "cpu", "--compute-s 0"),
    ({}, None, "cuda:0", "--device cpu"),
])
def test_bad_combinations_name_the_flag(kw, compute_s, device, needle):
    with pytest.raises(ConfigError, match=needle.replace("-", r"\-")):
        SCH.check(ns(**kw), compute_s, device)


def test_a_bad_schedule_option_is_refused_by_its_dataclass():
    with pytest.raises(ConfigError, match=r"^--schedule-epoch-iterations must be >= 1, got 0"):
        SCH.check(ns(schedule_epoch_iterations=0), None, "cpu")
    with pytest.raises(ConfigError, match=r"^--schedule-epoch-iterations must be >= 1, got -2"):
        SCH.resolve(ns(schedule="sequential", schedule_epoch_iterations=-2), None, "cpu")  # recorded for any schedule
    assert SCH.resolve(ns(pacing="layer", schedule_epoch_iterations=7), 0.5, "cpu") == dict(name="dynacomm",
                                                                                          epoch_iterations=7)


def test_sequential_accepts_anything_and_is_recorded():
    SCH.check(ns(schedule="sequential", library="ROG", batchsize=4), 1.0, "cuda:0")
    assert SCH.resolve(ns(schedule="lbl", library="SSP"), 0.0, "cpu") == dict(name="lbl", epoch_iterations=None)
    with pytest.raises(ConfigError, match="^--schedule dynacomm"):
        SCH.resolve(ns(library="ROG"), None, "cpu")


def test_composition_by_hand():
    # compute [0,2] and [5,6]; comm [1,4]; stall [4,5]; window [0,6]
    parts = compose([(0, 2), (5, 6)], [(1, 4)], [(4, 5)], (0, 6))
    assert parts == dict(compute_only_s=2.0, overlap_s=1.0, comm_only_s=2.0, stall_s=1.0)
    assert length([(0, 1), (0.5, 2), (3, 4)]) == 3.0  # [0, 2] and [3, 4]


def test_link_estimate_recovers_overhead_and_rate():
    est = LinkEstimate()
    for nbytes in (1e3, 1e4, 5e4, 1e5):
        est.add("push", nbytes, 0.002 + nbytes / 1e6)  # dt 2 ms, 1 MB/s
    dt, rate = est.fit("push")
    assert dt == pytest.approx(0.002, abs=1e-9) and rate == pytest.approx(1e6, rel=1e-9)
    est.observe_iteration("push", 1e6, 1.0)
    est.observe_iteration("push", 1e6, 0.5)
    assert est.rate("push", moving=True) == pytest.approx(0.3 * 2e6 + 0.7 * 1e6)


def test_calibration_rule():
    # 1 MB payload, 0.2 + 0.6 s compute: 2 x 8 Mbit / 0.8 s = 20 Mbit/s
    assert calibrated_rate_mbit(dict(mean_fwd_compute_s=0.2, mean_bwd_compute_s=0.6, payload_bytes=1e6)) == pytest.approx(20.0)


def _result(model, schedule, fwd, bwd, it, **kw):
    d = dict(model=model, schedule=schedule, workers=2, rate_mbit=10.0, payload_bytes=1e6, mean_fwd_s=fwd,
             mean_bwd_s=bwd, mean_iteration_s=it, mean_stall_s=0.0, mean_overlap_s=0.0, mean_compute_only_s=0.0,
             mean_comm_only_s=0.0, mean_predicted_fwd_s=kw.get("pf"), mean_predicted_bwd_s=kw.get("pb"),
             mean_fwd_segments=1.0, mean_bwd_segments=1.0)
    return d


def test_analysis_normalises_and_judges(tmp_path):
    from rog.papers.dynacomm.grading import graded_rows
    from rog.papers.dynacomm.summary import dynacomm_markdown, dynacomm_summary

    # the ResNet-152 claims are graded on the 155-layer resnet152_mini (ResNet-152's depth)

    runs = [("sequential", 1.0, 1.0, 2.0, {}), ("lbl", 0.9, 0.8, 1.8, {}), ("ibatch", 0.7, 0.8, 1.5, {}),
            ("dynacomm", 0.5, 0.7, 1.2, dict(pf=0.52, pb=0.8))]
    for sch, f, b, it, kw in runs:
        d = tmp_path / "dynacomm" / f"resnet152_mini-{sch}"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps(_result("resnet152_mini", sch, f, b, it, **kw)))
    m = dynacomm_summary(tmp_path)["models"]["resnet152_mini"]
    assert m["rows"]["dynacomm"]["it_red"] == pytest.approx(40.0)  # 1 - 1.2 / 2.0
    assert m["rows"]["lbl"]["fwd"] == pytest.approx(0.9)
    assert m["checks"]["dynacomm_le_min_x1.03"] is True  # 1.2 <= 1.5 x 1.03
    assert m["checks"]["dynacomm_fwd_error"] == pytest.approx(0.04)
    assert m["checks"]["dynacomm_bwd_error"] == pytest.approx(0.8 / 0.7 - 1)
    md = dynacomm_markdown(tmp_path, graded_rows(tmp_path))
    assert "-37.06 % vs Sequential | -40.0 % | agrees" in md  # 2.9 pp from the paper's
    assert "DynaComm leads by 40.0 pp" in md and "| LBL +10.0 %, DynaComm +50.0 % | agrees" in md
    from rog.papers.dynacomm.summary import plot_dynacomm

    (fig,) = plot_dynacomm(tmp_path, tmp_path / "figure")
    assert fig.name == "dynacomm_resnet152_mini.png" and fig.stat().st_size > 10_000


def test_analysis_per_round_check_and_load(tmp_path):
    from rog.papers.dynacomm.grading import graded_rows
    from rog.papers.dynacomm.summary import dynacomm_markdown, dynacomm_summary

    # round 0: DynaComm 1.2 <= 1.5 x 1.03; round 1: LBL 1.0, so 1.2 > 1.03 fails; over rounds the medians
    # are LBL (1.8 + 1.0) / 2 = 1.4, iBatch 1.5, DynaComm 1.2 <= 1.4 x 1.03
    its = {"sequential": (2.0, 2.0), "lbl": (1.8, 1.0), "ibatch": (1.5, 1.5), "dynacomm": (1.2, 1.2)}
    for sch, pair in its.items():
        for rnd, it in enumerate(pair):
            d = tmp_path / "dynacomm" / f"vgg_mini-{sch}-r{rnd}"
            d.mkdir(parents=True)
            (d / "result.json").write_text(json.dumps(dict(_result("vgg_mini", sch, 1.0, 1.0, it),
                                                           median_iteration_s=it, other_busy_cores=0.5 + rnd)))
    m = dynacomm_summary(tmp_path)["models"]["vgg_mini"]
    assert m["rows"]["lbl"]["iteration_s"] == pytest.approx(1.4)
    assert (m["rows"]["lbl"]["iteration_min_s"], m["rows"]["lbl"]["iteration_max_s"]) == (1.0, 1.8)
    assert m["checks"]["dynacomm_le_min_x1.03"] is True
    assert m["checks"]["dynacomm_le_min_x1.03_rounds"] == (1, 2)
    assert m["round_load"] == {0: 0.5, 1: 1.5}
    md = dynacomm_markdown(tmp_path, graded_rows(tmp_path))
    assert "- dynacomm_le_min_x1.03: holds in 1 of 2 rounds" in md
    assert "| 1 | 1.50 | 2.000 | 1.000 | 1.500 | 1.200 |" in md
    assert "| lbl | 1.00 | 1.00 | 0.70 | 1.400 (1.000–1.800) |" in md


def test_round_order_rotates():
    from rog.papers.dynacomm.item import SCHEDULES, round_order

    assert round_order(0) == SCHEDULES
    assert round_order(2) == ("ibatch", "dynacomm", "dynacomm-iter", "sequential", "lbl")
    assert round_order(5) == SCHEDULES
    assert sorted(round_order(3)) == sorted(SCHEDULES)


def test_model_margins_by_hand(tmp_path):
    from rog.papers.dynacomm.summary import model_margins

    # two layers, dt 0: pt = gt = (1, 1), fc = bc = (1, 1). DP/LBL (two segments each way): forward
    # arrivals 1, 2 -> compute 1..2, 2..3 = 3; backward: layer 1 done at 1, push 1..2, layer 0 done at 2,
    # push 2..3 = 3; total 6.  Sequential: forward 2 + 2 = 4, backward 2 + 2 = 4: 8 / 6.
    d = tmp_path / "dynacomm" / "vgg_mini-dynacomm-r0"
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps(dict(model="vgg_mini")))
    plan = dict(iteration=3, pt=[1.0, 1.0], fc=[1.0, 1.0], bc=[1.0, 1.0], gt=[1.0, 1.0], dt_s=0.0,
                predicted_fwd_s=3.0, predicted_bwd_s=3.0, fwd_segments=[[0, 0], [1, 1]], bwd_segments=[[1, 1], [0, 0]])
    (d / "worker-0.json").write_text(json.dumps(dict(rows=[], plan_log=[plan])))
    m = model_margins(tmp_path)["vgg_mini"]
    assert m["sequential"] == pytest.approx(8 / 6) and m["lbl"] == pytest.approx(1.0)
