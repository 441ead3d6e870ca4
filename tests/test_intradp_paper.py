"""The paper's yardstick: Table 6 values pinned against the paper's text (read by hand), the row ratios
and reductions computed by hand, the verdict rule, and the application range kept to its applications."""

from __future__ import annotations

import json

import pytest

from rog.papers.intradp.summary import intradp_markdown, intradp_summary
from rog.papers.intradp.paper import (PAPER_TABLE6, app_claim, paper_ratios, paper_row, row_ratios, spread, verdict,
                                        yardstick)


def test_table6_as_printed_in_the_paper():
    # VGG19 (143M) rows of the paper's Table 6: ms indoors / outdoors, J per inference indoors / outdoors
    assert PAPER_TABLE6["vgg19"]["local"] == (96.34, 96.34, 0.94, 0.94)
    assert PAPER_TABLE6["vgg19"]["all"] == (87.90, 96.35, 0.51, 0.57)  # outdoors 0.57 J (not 0.51)
    assert PAPER_TABLE6["vgg19"]["layer-latency"] == (71.97, 76.92, 0.38, 0.37)
    assert PAPER_TABLE6["vgg19"]["layer-energy-deadline"] == (69.08, 73.77, 0.46, 0.51)
    assert PAPER_TABLE6["vgg19"]["intra-dp"] == (54.62, 58.82, 0.32, 0.38)
    # DenseNet (7.98M)
    assert PAPER_TABLE6["densenet"]["local"] == (56.29, 56.29, 0.46, 0.46)
    assert PAPER_TABLE6["densenet"]["all"] == (115.18, 128.50, 0.63, 0.70)
    assert PAPER_TABLE6["densenet"]["layer-latency"] == (95.25, 100.73, 0.48, 0.48)
    assert PAPER_TABLE6["densenet"]["layer-energy-deadline"] == (98.69, 106.73, 0.68, 0.73)
    assert PAPER_TABLE6["densenet"]["intra-dp"] == (85.86, 92.35, 0.41, 0.48)


@pytest.mark.parametrize("model,env,best,lat_pct,low,en_pct", [
    # best layer partition is SPSO-GA for VGG19: 1 - 54.62/69.08, 1 - 58.82/73.77; lowest energy DSCCS 0.38 / 0.37
    ("vgg19", "indoors", "layer-energy-deadline", 20.93, "layer-latency", 15.79),
    ("vgg19", "outdoors", "layer-energy-deadline", 20.27, "layer-latency", -2.70),
    # DenseNet: DSCCS both ways: 1 - 85.86/95.25, 1 - 92.35/100.73; energy 1 - 0.41/0.48, 1 - 0.48/0.48
    ("densenet", "indoors", "layer-latency", 9.86, "layer-latency", 14.58),
    ("densenet", "outdoors", "layer-latency", 8.32, "layer-latency", 0.0),
])
def test_paper_reductions_by_hand(model, env, best, lat_pct, low, en_pct):
    p = paper_ratios(model, env)
    assert p["best_layer"] == best and p["lowest_energy_layer"] == low
    assert p["latency_reduction_pct"] == pytest.approx(lat_pct, abs=0.01)
    assert p["energy_reduction_pct"] == pytest.approx(en_pct, abs=0.01)


def test_paper_row_ratios_and_missing_rows():
    p = paper_ratios("densenet", "indoors")
    assert p["latency_ratio"]["local"] == pytest.approx(56.29 / 95.25)  # the paper's Local beats every offload
    assert p["energy_ratio"]["all"] == pytest.approx(0.63 / 0.48)
    assert paper_row("resnet18", "indoors") is None and paper_row("vgg19", "other") is None
    assert row_ratios({"intra-dp": 1.0}, {"intra-dp": 1.0}) is None  # no layer partition to compare with


def test_verdict_rule_and_spread():
    assert verdict(14.5, 20.93) == "below" and verdict(17.0, 20.93) == "matches" and verdict(26.0, 20.93) == "above"
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert spread([]) is None


def test_application_range_only_for_the_applications():
    assert app_claim("kapao")["indoors"] == (16.3, 14.9) and app_claim("AGRNav")["outdoors"] == (41.1, 30.8)
    assert app_claim("vgg19") is None and app_claim("densenet") is None


def _method(lat, energy):
    return {"n": 10, "mean_latency_s": lat, "mean_energy_j": energy, "robot_compute_s": lat / 2, "transfer_s": lat / 2,
            "server_compute_s": 0.0, "robot_compute_share": 0.5, "transfer_share": 0.5, "server_compute_share": 0.0,
            "share_sum": 1.0, "plans": {"x": 10}}


def _run(tmp_path, name, idp_lat):
    d = tmp_path / "intradp" / name
    d.mkdir(parents=True)
    doc = {"mode": "trace", "model": "vgg19", "trace": "t/outdoors-seed1.csv", "duration_s": 60,
           "emulation": {"estimate": "passive", "server_device": "cpu-paced", "split_costs": "measured"},
           "output_mismatches": 0,
           "methods": {"local": _method(0.4, 4.0), "all": _method(0.3, 2.0), "layer-latency": _method(0.2, 1.0),
                       "layer-energy-deadline": _method(0.25, 0.8), "intra-dp": _method(idp_lat, 1.2)}}
    (d / "result.json").write_text(json.dumps(doc))


def test_replicates_pooled_against_the_paper_row(tmp_path):
    for k, lat in enumerate((0.18, 0.16, 0.19)):  # reductions vs DSCCS-like 0.2: 10, 20, 5 %
        _run(tmp_path, f"trace-vgg19-outdoors-seed{k}-passive", lat)
    (y,) = yardstick(intradp_summary(tmp_path)["table6"])
    assert y["n"] == 3
    assert y["latency_reduction_pct"]["median"] == pytest.approx(10.0)
    assert (y["latency_reduction_pct"]["min"], y["latency_reduction_pct"]["max"]) == pytest.approx((5.0, 20.0))
    assert y["energy_reduction_pct"]["median"] == pytest.approx(-50.0)  # 1 - 1.2 / 0.8
    assert y["paper"]["latency_reduction_pct"] == pytest.approx(20.27, abs=0.01)
    assert y["latency_verdict"] == "below" and y["energy_verdict"] == "below"
    assert y["latency_ratio"]["local"]["median"] == pytest.approx(2.0)
    md = intradp_markdown(tmp_path)
    assert "10.0 [5.0, 20.0] \\| 20.3 | below" in md
    assert "14.9-41.1" not in md  # the applications' range is not used for VGG19
