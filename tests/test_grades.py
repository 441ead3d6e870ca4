"""The grade rules (rog/analysis/grades.py), one test per rule on hand-made rows, and the null models computed
by hand (rog/papers/*/nulls.py)."""

import json

import pandas as pd
import pytest

from rog.analysis.grades import (AGREES, BUILT_IN, DOES_NOT, NOT_DECIDABLE, REDUCED, REPRODUCED, GradedRow, NullResult,
                                 counts, outcome_of, papers_table)


def row(outcome=AGREES, **kw):
    return GradedRow("P", "claim", "10 %", "9 %", outcome, **kw)


# --- one test per grade rule ---------------------------------------------------------------------------------------

def test_a_row_the_null_also_passes_is_built_in():
    r = row(AGREES, scaled_setting="3 workers", nulls=(NullResult("pacing alone", "44 %", AGREES),))
    assert r.grade == BUILT_IN and "pacing alone" in r.why
    # the same row whose null gets the other verdict is not built in
    assert row(AGREES, scaled_setting="3 workers", nulls=(NullResult("pacing alone", "44 %", DOES_NOT),)).grade == REDUCED


def test_a_disagreement_the_null_also_gives_is_built_in():
    assert row(DOES_NOT, nulls=(NullResult("L x delay", "0 %", DOES_NOT),)).grade == BUILT_IN


def test_any_of_several_nulls_decides():
    nulls = (NullResult("never opens", "4 of 6", AGREES), NullResult("always opens", "2 of 6", DOES_NOT))
    assert row(AGREES, nulls=nulls).grade == BUILT_IN
    assert row(DOES_NOT, nulls=nulls).grade == BUILT_IN
    assert row(AGREES, nulls=nulls[1:]).grade == REPRODUCED


def test_a_not_decidable_row_is_never_built_in_by_a_null():
    r = row(NOT_DECIDABLE, scaled_setting="3 workers", nulls=(NullResult("x", "-", NOT_DECIDABLE),))
    assert r.grade == REDUCED


def test_a_stated_construction_is_built_in_without_a_null():
    r = row(DOES_NOT, built_in_reason="a raw-TCP producer, not a broker")
    assert (r.grade, r.why) == (BUILT_IN, "a raw-TCP producer, not a broker")


def test_a_scaled_setting_is_not_reproduced_without_its_argued_scaling():
    assert row(AGREES, scaled_setting="3 workers, 60 s").grade == REDUCED
    assert row(AGREES, scaled_setting="3 workers, 60 s", scaling_argument="times x 0.1 keep the ratio").grade == REPRODUCED


def test_the_papers_setting_is_reproduced():
    assert row(AGREES).grade == REPRODUCED and row(DOES_NOT).grade == REPRODUCED


def test_counts_never_count_built_in_as_agreement_and_skip_rows_beside():
    rows = [row(AGREES, nulls=(NullResult("n", "v", AGREES),)),  # built in, agrees
            row(AGREES, scaled_setting="s"),  # reduced, agrees
            row(DOES_NOT), row(NOT_DECIDABLE, scaled_setting="s"),
            row(AGREES, counted=False)]  # a second reading: shown, not counted
    c = counts(rows)
    assert c["rows"] == 4 and c["agreement"] == 1
    assert c["grades"] == {REPRODUCED: 1, REDUCED: 2, BUILT_IN: 1}
    assert c["outcomes"] == {AGREES: 2, DOES_NOT: 1, NOT_DECIDABLE: 1}
    assert counts([r.to_json() for r in rows]) == c  # the JSON rows count alike
    table = papers_table({"P": c, "Q": c})
    assert table[-2] == "| all | 2 | 4 | 2 | 4 | 2 | 2 | 2 | 8 |"  # reproduced, reduced, built in; outcomes; agreement, rows


def test_outcome_of_reads_the_rules_words_and_refuses_others():
    for word, want in (("agrees", AGREES), ("matches", AGREES), ("pass", AGREES), (True, AGREES),
                       ("does not agree", DOES_NOT), ("disagrees", DOES_NOT), ("FAIL", DOES_NOT), ("below", DOES_NOT),
                       ("neighbour", DOES_NOT), (False, DOES_NOT), ("not decidable (2 of 3 seeds)", NOT_DECIDABLE),
                       ("no verdict (the models span)", NOT_DECIDABLE), (None, NOT_DECIDABLE), ("not measured", NOT_DECIDABLE)):
        assert outcome_of(word) == want, word
    with pytest.raises(ValueError, match="names no outcome"):
        outcome_of("splendid")
    with pytest.raises(ValueError, match="outcome"):
        GradedRow("P", "c", "", "", "maybe")


# --- the null models, by hand ---------------------------------------------------------------------------------------

def test_adsp_pacing_nulls():
    from rog.papers.adsp.nulls import paced_step_rates, paced_waiting_share

    # 1:1:3 behind a barrier: the fast workers wait 2/3 of each 0.3 s step, the slow one none
    assert paced_waiting_share((1, 1, 3)) == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    assert paced_waiting_share((1, 1, 1)) == 0.0
    r = paced_step_rates((1, 1, 3), 0.1)  # 10 + 10 + 3.33 mini-batches a second without a barrier; 3 / 0.3 with one
    assert r["no_barrier"] == pytest.approx(70 / 3) and r["barrier"] == pytest.approx(10.0)
    with pytest.raises(ValueError):
        paced_waiting_share((1, 0))


def test_adsp_rows_graded_with_their_nulls():
    from rog.papers.adsp.grading import fig1_row, fig4c_row

    # Fig. 1: 44.4 % from the pacing does not pass "> 50 %", so a measured 57.6 / 53.0 % is not built in
    assert fig1_row(0.576, 0.530, "agrees").grade == REDUCED
    # ... but at 1:1:10 the pacing alone waits 60 %: the same measurement would be built in
    assert fig1_row(0.576, 0.530, "agrees", ratios=(1, 1, 10)).grade == BUILT_IN
    # Fig. 4c: 23.3 against 10 steps/s is 2.33 x >= 1.2 x without any communication
    assert fig4c_row({"ADSP": 22.5, "BSP": 7.3}, "agrees").grade == BUILT_IN
    assert fig4c_row({"ADSP": 22.5, "BSP": 7.3}, "agrees", ratios=(1, 1, 1.1)).grade == REDUCED


def test_scadles_gate_nulls_and_table_v():
    from rog.papers.scadles.grading import table_v_row
    from rog.papers.scadles.nulls import gate_null_scores, majority, sleep_latency_null

    # bands widened by 0.1 (clipped to [0, 1]): (0.1, 0.1) [0, 0.39]; (0.1, 0.3), (0.1, 0.4) [0.9, 1];
    # (0.01, 0.1) [0, 0.1]; (0.01, 0.2) [0, 0.27]; (0.01, 0.3) [0, 0.53]; (0.1, 0.2) and (0.01, 0.4) span [0, 1]
    assert gate_null_scores() == {"never opens": (4, 6), "always opens": (2, 6)}
    assert majority((4, 6)) and not majority((3, 6)) and not majority((0, 0))
    norm = {(0.1, 0.1): 0.0, (0.1, 0.3): 0.67, (0.1, 0.4): 0.97, (0.01, 0.1): 0.0, (0.01, 0.2): 0.0, (0.01, 0.3): 0.0}
    r = table_v_row(norm, "norm")
    assert (r.ours, r.outcome, r.grade, r.counted) == ("5 of 6 cells", AGREES, BUILT_IN, True)
    assert table_v_row(norm, "energy").counted is False
    # a reading that agreed in the two telling cells only would not be built in: 2 of 6 is no majority, like "always opens"
    # latencies b / S: 8/10 = 0.8, 16/10 = 1.6 and 0.4, 0.8: rising, the 10/s worker slowest, 0.8 s > 0.5 s compute
    assert sleep_latency_null([10.0, 20.0], [8, 16], 8, 0.5) == dict(rises=True, straggler=True, starved=True)
    assert sleep_latency_null([10.0, 20.0], [8, 16], 8, 1.0)["starved"] is False


def test_dynacomm_delay_nulls():
    from rog.papers.dynacomm.nulls import check_holds, forward_lead_pp, iteration_lead

    assert forward_lead_pp(23, 0.010, 0.082) == pytest.approx(100 * 0.23 / 0.082)  # 280.5 pp
    assert iteration_lead(155, 0.010, 0.672) == pytest.approx(2 * 1.55 / 0.672)  # 4.61 of Sequential's iteration
    assert iteration_lead(9, 0.0, 1.0) == 0.0 and check_holds(9, 0.01, 1.0)
    with pytest.raises(ValueError):
        iteration_lead(0, 0.01, 1.0)


def test_dynacomm_claims_graded_on_the_155_layer_model():
    from rog.papers.dynacomm.grading import claim_rows, documented_rows
    from rog.papers.dynacomm.summary import PAPER

    assert "resnet152_mini" in PAPER and "resnet_mini" not in PAPER
    rows = {"sequential": dict(fwd_s=0.5, iteration_s=1.0, fwd_red=0.0, it_red=0.0), "lbl": dict(fwd_red=-300.0),
            "dynacomm": dict(fwd_red=18.0, it_red=7.0)}
    got = {r.claim: r for r in claim_rows("resnet152_mini", "ResNet-152", PAPER["resnet152_mini"], rows, 10.0, "3 rounds")}
    lead = got["ResNet-152: LBL's forward far behind DynaComm's"]
    # null lead 100 x 155 x 0.01 / 0.5 = 310 pp >= 15 pp: the 318 pp measured is built in
    assert lead.outcome == AGREES and lead.grade == BUILT_IN and lead.nulls[0].value == "lead 310.0 pp"
    it = got["ResNet-152: iteration time -37.06 % vs Sequential"]
    assert it.outcome == DOES_NOT and it.grade == BUILT_IN  # no overlap gain also misses -37 % by more than 10 pp
    assert all("resnet152_mini" in r.scaled_setting or not r.counted or "Sweep" in r.claim or "Item" in r.claim
               or "VGG" in r.claim for r in documented_rows())


def test_every_paper_has_documented_rows_and_the_status_page(tmp_path):
    from rog.analysis.reproduction_status import PAPER_GRADINGS, paper_rows, status_markdown, write_status

    by = paper_rows(tmp_path)  # no summary.json: the documented rows, said so
    assert list(by) == list(PAPER_GRADINGS) == ["ROG", "ADSP", "DynaComm", "ScaDLES", "Intra-DP"]
    assert all(rows and "reports for its last runs" in src and "does not exist here" in src for src, rows in by.values())
    text = status_markdown(by)
    assert "## Counts" in text and all(f"## {p}" in text for p in by)
    # a summary.json with one paper's graded rows: that paper reads them, the others stay documented
    one = row(DOES_NOT, scaled_setting="s").to_json()
    one["paper"] = "ADSP"
    (tmp_path / "summary.json").write_text(json.dumps({"grades": {"ADSP": {"rows": [one]}}}))
    by = paper_rows(tmp_path)
    assert by["ADSP"][1] == [one] and "summary.json" in by["ADSP"][0] and "has no graded rows" in by["ROG"][0]
    out = write_status(tmp_path, tmp_path / "page.md")
    assert "| claim | - | 10 % | 9 % | consistent at reduced scale | does not |" in out.read_text()
    (tmp_path / "summary.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        paper_rows(tmp_path)


def test_status_command_refuses_a_missing_folder(tmp_path, capsys):
    from rog.analysis.reproduction_status import main

    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "nope"), "--out", str(tmp_path / "p.md")])
    assert e.value.code == 2 and "is not a folder" in capsys.readouterr().err
    assert main([str(tmp_path), "--out", str(tmp_path / "p.md")]) == 0 and (tmp_path / "p.md").is_file()


def test_fig6_guard_noise_between_commits():
    from rog.papers.adsp.fig6 import FIG6_GUARD_SEEDS, depth_check, loss_noise, loss_noise_between_commits

    c = pd.DataFrame({"time_s": [0, 1, 2, 3, 4], "loss": [2.0, 2.0, 1.9, 1.9, 1.7]})
    # changes 0, 0.1, 0, 0.2: the first guard's median is 0.05, between commits (0.1, 0.2) it is 0.15
    assert loss_noise(c) == pytest.approx(0.05) and loss_noise_between_commits(c) == pytest.approx(0.15)
    flat = pd.DataFrame({"time_s": [0, 1], "loss": [2.0, 2.0]})
    assert loss_noise_between_commits(flat) == 0.0
    # depth 0.2: passes 2 x 0.05 (the old statistic, seed 3) but not 2 x 0.15 (seeds 6-8)
    assert depth_check(2.0, 1.8, [c], seed=3)["ok"] and not depth_check(2.0, 1.8, [c], seed=FIG6_GUARD_SEEDS[0])["ok"]


def test_intradp_rows_name_their_server_and_energy_source():
    from rog.papers.intradp.grading import ENERGY_SOURCE, yardstick_rows

    def y(server, plans, lat, en):
        sp = lambda v: {"median": v, "min": v - 1, "max": v + 1, "n": 3}  # noqa: E731
        return {"model": "vgg19", "environment": "indoors", "server_device": server, "plans": plans, "n": 3,
                "latency_reduction_pct": sp(lat), "energy_reduction_pct": sp(en),
                "paper": {"latency_reduction_pct": 20.9, "energy_reduction_pct": 15.8},
                "latency_verdict": "matches" if abs(lat - 20.9) <= 5 else "below", "energy_verdict": "below"}

    rows = yardstick_rows([y("cpu-paced", "LOSS", 18.9, -76.7), y("cuda", "LOSS", 5.0, -70.0),
                           y("cpu-paced", "one segment", 17.1, -77.8)])
    cpu, cpu_en, gpu, gpu_en, one, _ = rows
    assert cpu.outcome == AGREES and cpu.counted and "paced CPU server" in cpu.reading
    assert gpu.outcome == DOES_NOT and not gpu.counted and "CUDA server" in gpu.reading  # beside, named
    assert not one.counted  # the one-segment ablation is beside the paper's planner
    assert ENERGY_SOURCE in cpu_en.reading and "tegrastats" in cpu_en.reading and ENERGY_SOURCE not in cpu.reading
    assert counts(rows)["rows"] == 2


def test_adsp_fig6_guard_seeds_replace_the_first_fresh_seeds():
    from rog.papers.adsp.grading import graded_rows

    block = dict(times=[{}], ratio_grows="agrees", adsp_best_of_local="agrees", adsp_fastest="does not agree")
    f6 = dict(block, fresh_seeds=[3, 4, 5], guard_seeds=[6, 7, 8], guard=None)
    rows = [r for r in graded_rows({"fig56": {"fig6": f6}}) if r.claim.startswith("Fig. 6")]
    assert [r.counted for r in rows] == [True, True, False]  # the all-systems reading is always beside
    f6["guard"] = dict(block, ratio_grows="not decidable (2 of 3 seeds)")
    rows = [r for r in graded_rows({"fig56": {"fig6": f6}}) if r.claim.startswith("Fig. 6")]
    assert [r.counted for r in rows] == [False, False, False, True, True, False]
    assert rows[3].outcome == NOT_DECIDABLE and "seeds 6, 7, 8" in rows[3].seeds
