"""DynaComm's rules 2 and 3 (rog.papers.dynacomm.scaling, the dynacomm-scaled item): the paper's per-layer compute,
the scaled delay and the Jetson-class ratio against hand arithmetic, and the graded rows of hand-made result folders."""

from __future__ import annotations

import json

import pytest

from rog.analysis.grades import AGREES, REDUCED, REPRODUCED
from rog.papers.dynacomm import grading as G
from rog.papers.dynacomm import item as DI
from rog.papers.dynacomm import scaled_item as SI
from rog.papers.dynacomm import scaling as SC


def test_paper_layer_forward_compute_by_hand():
    # 4 cores x 3.0e9 Hz x 32 = 384e9 FLOP/s, half of it 192e9; ResNet-152: 32 x 2 x 11.3e9 = 7.232e11 over 152 layers
    assert SC.CPU_PEAK_FLOPS == 384e9
    assert SC.paper_layer_forward_s("ResNet-152") == pytest.approx(7.232e11 / 192e9 / 152)
    assert SC.PAPER_LAYER_FORWARD_MS["ResNet-152"] == pytest.approx(24.7807, abs=1e-4)
    # VGG-19: 32 x 2 x 19.6e9 = 1.2544e12 over 19 layers: 6.5333 s / 19 = 343.86 ms
    assert SC.PAPER_LAYER_FORWARD_MS["VGG-19"] == pytest.approx(343.8596, abs=1e-4)
    assert SC.paper_layer_forward_s("VGG-19", 1.0) == pytest.approx(SC.paper_layer_forward_s("VGG-19") / 2)
    with pytest.raises(ValueError):
        SC.paper_layer_forward_s("VGG-19", 0.0)


def test_scaled_delay_by_hand():
    # resnet152_mini: 0.155 s of forward over 155 layers = 1 ms a layer; 10 ms x 1 / 24.7807 = 0.40354 ms
    assert SC.scaled_delay_ms({"mean_fwd_compute_s": 0.155}, "resnet152_mini") == pytest.approx(0.40354, abs=1e-5)
    # vgg_mini: 0.2 s over 9 layers = 22.222 ms; 10 x 22.222 / 343.860 = 0.64626 ms
    assert SC.scaled_delay_ms({"mean_fwd_compute_s": 0.2}, "vgg_mini") == pytest.approx(0.64626, abs=1e-5)
    assert SC.setting_ratio_and_delay("r1-d10", {"mean_fwd_compute_s": 0.2}, "vgg_mini") == (1.0, 10.0)
    with pytest.raises(ValueError):
        SC.scaled_delay_ms({"mean_fwd_compute_s": 0.0}, "vgg_mini")


def test_jetson_ratio_is_the_artifacts_bsp_communication_over_compute_and_sets_the_rate():
    from rog.papers.rog.references import ARTIFACT

    assert SC.JETSON_RATIO == pytest.approx(ARTIFACT["BSP"]["comm_s"] / ARTIFACT["BSP"]["compute_s"])
    assert SC.JETSON_RATIO == pytest.approx(4.6306, abs=1e-4)
    # 1 MB each way, 0.5 s of compute: 2 x 8e6 bits / (4.6306 x 0.5 s) = 6.9106 Mbit/s
    cal = {"mean_fwd_compute_s": 0.2, "mean_bwd_compute_s": 0.3, "payload_bytes": 1e6}
    assert DI.calibrated_rate_mbit(cal, SC.JETSON_RATIO) == pytest.approx(6.9106, abs=1e-4)


def test_the_argument_holds_within_a_factor_two_of_the_scaled_delay():
    assert SC.ARGUMENT_FACTOR == 2.0
    assert SC.argument_holds(0.4, 0.79) and SC.argument_holds(0.4, 0.2)
    assert not SC.argument_holds(0.4, 0.81) and not SC.argument_holds(0.4, 0.19) and not SC.argument_holds(0.4, None)
    assert SC.scaling_argument("resnet152_mini", 0.4, 1.0) == ""
    assert "24.78 ms per layer" in SC.scaling_argument("resnet152_mini", 0.4, 0.5)
    # a measured cost below the delay the transport adds (0.3 < 0.4 ms) still holds by the rule, and says so
    assert "below the delay the transport adds" in SC.scaling_argument("resnet152_mini", 0.4, 0.3)
    assert "below the delay" not in SC.scaling_argument("resnet152_mini", 0.4, 0.5)


FIELDS = ("stall_s", "overlap_s", "compute_only_s", "comm_only_s", "predicted_fwd_s", "predicted_bwd_s",
          "fwd_segments", "bwd_segments")


def _run(folder, model, schedule, fwd, it, dt_s=None, delay_ms=0.4):
    folder.mkdir(parents=True)
    d = dict(model=model, schedule=schedule, workers=2, rate_mbit=10.0, link_delay_ms=delay_ms, payload_bytes=1e6,
             mean_fwd_s=fwd, mean_bwd_s=it - fwd, mean_iteration_s=it, mean_dt_s=dt_s, **{f"mean_{k}": 0.0 for k in FIELDS})
    (folder / "result.json").write_text(json.dumps(d))


def _setting(base, model, dt_s, delay_ms):
    # Sequential forward 0.5 s, iteration 1.0 s; DynaComm forward 0.30 (-40 %), iteration 0.65 (-35 %); LBL forward
    # 0.45 (-10 %): DynaComm leads LBL's forward by 30 points
    for sch, fwd, it in (("sequential", 0.5, 1.0), ("lbl", 0.45, 1.1), ("ibatch", 0.40, 0.9), ("dynacomm", 0.30, 0.65)):
        _run(base / f"{model}-{sch}-r0", model, sch, fwd, it, dt_s if sch == "dynacomm" else None, delay_ms)


@pytest.fixture
def results(tmp_path):
    cal = tmp_path / "dynacomm" / "calibrate-resnet152_mini"
    cal.mkdir(parents=True)
    (cal / "result.json").write_text(json.dumps({"mean_fwd_compute_s": 0.155, "mean_bwd_compute_s": 0.2,
                                                 "mean_iteration_s": 0.36, "payload_bytes": 1e6,
                                                 "model": "resnet152_mini", "schedule": "sequential"}))
    return tmp_path


def test_a_reached_scaled_delay_is_reproduced_where_the_null_does_not_agree(results):
    _setting(results / "dynacomm" / "r1-scaled", "resnet152_mini", 0.0005, 0.40354)  # measured 0.5 ms vs d_ours 0.4035
    rows = {r.claim: r for r in G.setting_rows(results)}
    lbl = rows["ResNet-152: LBL's forward far behind DynaComm's (ratio 1.00, 0.404 ms)"]
    # the L x d null: 100 x 155 x 0.40354 ms / 0.5 s = 12.5 points, short of 15: only the measurement agrees
    assert lbl.ours == "lead 30.0 pp" and lbl.outcome == AGREES and lbl.grade == REPRODUCED
    assert lbl.nulls[0].value == "lead 12.5 pp" and lbl.counted
    it = rows["ResNet-152: iteration time -37.06 % vs Sequential (ratio 1.00, 0.404 ms)"]
    assert it.ours == "-35.0 %" and it.grade == REPRODUCED and "0.404 ms per transfer scaled" in it.scaled_setting


def test_a_scaled_delay_the_transport_does_not_reach_is_reduced_and_says_why(results):
    _setting(results / "dynacomm" / "r1-scaled", "resnet152_mini", 0.002, 0.40354)  # 2 ms measured: 5x d_ours
    rows = G.setting_rows(results)
    assert rows and {r.grade for r in rows} == {REDUCED}
    assert all(r.sentence.startswith("Not the scaled setting: the plans measured 2.000 ms") for r in rows)


def test_the_jetson_ratio_rows_are_beside_and_the_10_ms_rows_step_aside(results):
    _setting(results / "dynacomm" / "r1-scaled", "resnet152_mini", 0.0005, 0.40354)
    _setting(results / "dynacomm" / "jetson-scaled", "resnet152_mini", 0.0005, 0.40354)
    _setting(results / "dynacomm", "resnet152_mini", 0.011, 10.0)  # the item's own 10 ms rounds
    rows = G.graded_rows(results)
    jetson = [r for r in rows if r.extra.get("setting") == "jetson-scaled"]
    assert jetson and not any(r.counted for r in jetson) and "ratio 4.63" in jetson[0].claim
    assert "4.63 x its compute" in jetson[0].scaled_setting
    ten = [r for r in rows if "(ratio 1.00, 10.000 ms)" in r.claim]
    assert ten and not any(r.counted for r in ten) and ten[0].reading == "10 ms unscaled, beside the scaled delay"
    assert [r.counted for r in rows if r.extra.get("setting") == "r1-scaled"] == [True, True]
    assert "ratio 1.00, 0.404 ms" in G.scaled_markdown(results)


def test_the_scaled_item_plans_every_setting_and_resumes(results, capsys):
    _setting(results / "dynacomm" / "r1-scaled", "resnet152_mini", 0.0005, 0.40354)
    assert SI.main(["--result-dir", str(results), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "[dynacomm] run: calibration of vgg_mini" in out  # no calibration of vgg_mini yet
    # 2 x 8e6 bits / (0.155 + 0.2 s) = 45.07 Mbit/s at ratio 1; / 4.6306 = 9.73 Mbit/s at the Jetson ratio
    assert "[dynacomm] r1-scaled resnet152_mini: ratio 1.00, 45.1 Mbit/s, 0.404 ms per transfer" in out
    assert "[dynacomm] jetson-scaled resnet152_mini: ratio 4.63, 9.7 Mbit/s, 0.404 ms per transfer" in out
    assert "[dynacomm] r1-d10 resnet152_mini: ratio 1.00, 45.1 Mbit/s, 10.000 ms per transfer" in out
    assert "[dynacomm] skip (done): r1-scaled resnet152_mini sequential round 0" in out
    assert "[dynacomm] run: r1-scaled resnet152_mini sequential round 1" in out
    assert "[dynacomm] run: r1-d10 resnet152_mini paired" in out
    assert SI.setting_dir(results, "r1-d10") == results / "dynacomm"
