"""rog.papers.rog.robustness's causes on replay logs and claims written by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from rog.analysis.claim_table import Claim
from rog.analysis.load import RunData
from rog.papers.rog import robustness as C
from rog.papers.rog.robustness import aggregate


def _replay(links: dict[str, list[tuple[float, float]]]) -> pd.DataFrame:
    rows = []
    for link, samples in links.items():
        w = -1 if link.startswith("ps") else int(link[len("replay-w")])
        rows += [dict(worker=w, link=link, time_s=t, rate_mbit=r) for t, r in samples]
    return pd.DataFrame(rows)


# link w0: median 10 (of 10,10,2,2,2,10,10), below 5 from 2 s to 8 s (6 s); link w1: median 20, below 10 from
# 6 s to 13 s (7 s); a short dip of w0 is not a fade; the PS's own link (worker -1) never counts
REPLAY = _replay({
    "replay-w0-up": [(0, 10), (1, 10), (2, 2), (3, 2), (4, 2), (8, 10), (9, 10)],
    "replay-w1-up": [(0, 20), (5, 20), (6, 1), (13, 20), (20, 20)],
    "ps-cap": [(0, 0.0), (1, 0.0), (19, 0.0)],
})


def test_fades_by_hand():
    assert C.fades(REPLAY, 1.0, end_s=20) == [("replay-w0-up", 2.0, 8.0), ("replay-w1-up", 6.0, 13.0)]
    assert C.first_fade_s(REPLAY, 1.0, 20) == 2.0
    # union of (2, 8) and (6, 13) = 11 s of the 20 s replayed
    assert C.fade_share(REPLAY, 1.0, 20) == pytest.approx(11 / 20)
    # time scale 1.25: a fade must last 6.25 wall s: only w1's (7 s) does
    assert C.fades(REPLAY, 1.25, 20) == [("replay-w1-up", 6.0, 13.0)]
    assert C.first_fade_s(REPLAY, 2.0, 20) is None and C.fade_share(REPLAY, 2.0, 20) == 0.0
    assert C.fade_share(pd.DataFrame(columns=["worker", "link", "time_s", "rate_mbit"])) is None
    # the replay starts 1 s before the run's clock (t0) inside a fade: the first fade is at 0
    early = _replay({"replay-w0-up": [(-1, 1), (6, 10), (7, 10), (20, 10)]})
    assert C.fades(early, 1.0, 20) == [("replay-w0-up", -1.0, 6.0)] and C.first_fade_s(early, 1.0, 20) == 0.0


def test_classify_target_rules():
    assert C.classify_target(30.0, {"BSP": 25.0, "ROG-4": 27.0, "FLOWN": None})[0] == "target before the first fade"
    cause, ev = C.classify_target(20.0, {"BSP": 25.0, "ROG-4": 18.0})
    assert cause == "not explained by fade timing" and "BSP" in ev and "20.0 s" in ev
    assert C.classify_target(None, {"BSP": 25.0})[0] == "no fade"


def test_classify_share_rules():
    cause, ev = C.classify_share(0.10, [0.30, 0.50])
    assert cause == "fewer fades" and "10 %" in ev and "40 %" in ev
    assert C.classify_share(0.45, [0.30, 0.50])[0] == "not explained by the fade share"
    assert C.classify_share(0.45, [])[0] == "not explained by the fade share"
    assert C.classify_share(None, [0.3])[0] == "no replay log"


def _m(rid: str, label: str, ttt: float | None, replay: pd.DataFrame, end_s: float = 20.0):
    acc = pd.DataFrame({"iteration": [0, 10], "time_s": [0.0, end_s], "accuracy_pct": [50.0, 60.0]})
    run = RunData(Path(rid), rid, {"time_scale": 1.0}, "done", 0.0, None, replay=replay, accuracy=acc)
    return SimpleNamespace(run=run, label=label, time_to_target_s=ttt)


def test_explain_names_the_cause_of_every_failing_replica():
    calm = _replay({"replay-w0-up": [(0, 10), (10, 10), (20, 10)]})  # never fades
    # replica a: every system crossed at 1-1.5 s, before the first fade (2 s): the time-to-target claim fails
    # replica b: crossings 10 and 5 s, after the fade: it holds; replica c: no fade and it fails
    ms = [_m("B-a", "BSP", 1.0, REPLAY), _m("R-a", "ROG-4", 1.5, REPLAY),
          _m("B-b", "BSP", 10.0, REPLAY), _m("R-b", "ROG-4", 5.0, REPLAY),
          _m("B-c", "BSP", 4.0, calm), _m("R-c", "ROG-4", 4.0, calm)]

    def claims(rep, ttt, stall):
        ids = (f"R-{rep}", f"B-{rep}")
        return [Claim("time to target, ROG-4 / min(BSP, SSP-4, FLOWN)", ttt, None, None, "", ("<=", 0.75), "x", "", ids),
                Claim("stall / iteration, ROG-4 / BSP", stall, None, None, "", ("<=", 0.5), "x", "", ids)]

    per = {"a": claims("a", 1.5, 0.3), "b": claims("b", 0.5, 0.3), "c": claims("c", 1.0, 0.7)}
    entries = aggregate(per)
    assert [(e["holds"], e["of"]) for e in entries] == [(1, 3), (2, 3)]
    rows = C.explain(entries, per, ms)
    got = {(r["claim"].split(",")[0], r["replica"]): r for r in rows}
    assert set(got) == {("time to target", "a"), ("time to target", "c"), ("stall / iteration", "c")}
    assert got[("time to target", "a")]["cause"] == "target before the first fade"
    assert got[("time to target", "a")]["first_fade_s"] == 2.0
    assert got[("time to target", "c")]["cause"] == "no fade"
    # replica c's fade share 0 against 11/20 where the stall claim holds
    assert got[("stall / iteration", "c")]["cause"] == "fewer fades"
    assert got[("stall / iteration", "c")]["fade_share"] == 0.0
    md = C.causes_markdown(rows)
    assert "| time to target, ROG-4 / min(BSP, SSP-4, FLOWN) | a | 1.50 | target before the first fade |" in md
    assert C.causes_markdown([]) == ""


def test_write_summary_names_the_cause(tmp_path):
    import json
    from test_analysis import make_run

    from rog.analysis.summary import write_summary

    items = {}
    # seed0: ROG-4 stalls 1 s of BSP's 3 (0.33, holds <= 0.5) with a 20 s fade in 60 s of replay;
    # seed1: 2.5 of 3 (0.83, fails) and its link never fades: cause "fewer fades" (0 % against 33 %)
    for seed, rog_stall, replay in ((0, 1.0, [(0, 10), (10, 1), (30, 10), (60, 10)]), (1, 2.5, [(0, 10), (60, 10)])):
        b = make_run(tmp_path, f"BSP-s{seed}", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2, replay=replay)
        r = make_run(tmp_path, f"ROG4-s{seed}", workers=((1.0, 0.5, rog_stall, 0.5),) * 2, replay=replay)
        items[f"outdoors:seed{seed}"] = [b.name, r.name]
    js, md = write_summary(tmp_path, items=items, smooth_tests=1)
    rows = [c for c in json.loads(js.read_text())["robustness_causes"] if c["claim"] == "stall / iteration, ROG-4 / BSP"]
    assert [(c["replica"], c["cause"]) for c in rows] == [("seed1", "fewer fades")]
    assert rows[0]["fade_share"] == 0.0
    assert "## Why a claim fails on some replicas" in md.read_text()


def _curve(iterations: float, seconds: float):
    return pd.DataFrame({"iteration": [0.0, iterations], "time_s": [0.0, seconds], "accuracy_pct": [50.0, 60.0]})


def _sm(label, ttt, curve, energy=None):
    return SimpleNamespace(label=label, time_to_target_s=ttt, accuracy_curve=curve, energy_to_target_j=energy)


def test_split_ratio_and_rules_by_hand():
    from rog.papers.rog.robustness import best_base, claim_parties, classify_split, split_ratio

    # ours: 2 iterations/s, crosses at 30 s = iteration 60; base: 0.5 iterations/s, crosses at 40 s = iteration 20
    ours, base = _sm("ROG-4", 30.0, _curve(100, 50), energy=90.0), _sm("BSP", 40.0, _curve(40, 80), energy=80.0)
    sp = split_ratio(ours, base)
    assert sp["i_ours"] == pytest.approx(60) and sp["i_base"] == pytest.approx(20)
    assert sp["iter_ratio"] == pytest.approx(3.0) and sp["spi_ratio"] == pytest.approx(0.25)
    assert sp["time_ratio"] == pytest.approx(0.75) == sp["iter_ratio"] * sp["spi_ratio"]
    # power: 90/30 = 3 W against 80/40 = 2 W
    assert sp["power_ratio"] == pytest.approx(1.5) and sp["energy_ratio"] == pytest.approx(90 / 80)
    cause, ev = classify_split(sp, 0.7)
    assert cause == "more iterations to the target" and "3.00x the iterations x 0.25x" in ev
    assert classify_split(sp, 0.2)[0] == "slow iterations before the crossing"  # 0.25 > 0.2 on its own
    assert classify_split(sp, 0.8, energy=True)[0] == "higher power before the crossing"  # time 0.75 meets 0.8
    assert split_ratio(_sm("ROG-4", None, _curve(1, 1)), base) is None
    assert claim_parties("time to target, ROG-4 / min(BSP, SSP-4, FLOWN)") == ("ROG-4", ["BSP", "SSP-4", "FLOWN"])
    assert claim_parties("energy to target, ROG-4 / BSP") == ("ROG-4", ["BSP"])
    assert claim_parties("stall / iteration") is None
    ms = [base, _sm("SSP-4", 35.0, _curve(10, 10)), _sm("FLOWN", None, None), ours]
    assert best_base(ms, ["BSP", "SSP-4", "FLOWN"]).label == "SSP-4"


def test_explain_splits_a_target_ratio_when_a_fade_came_first():
    # a fade from 2 s; ROG-4 crosses at 30 s (iteration 60), BSP at 40 s (iteration 20): 0.75 > 0.7
    ms = [SimpleNamespace(run=RunData(Path("R"), "R", {}, "done", 0.0, None, replay=REPLAY, accuracy=_curve(100, 50)),
                          **vars(_sm("ROG-4", 30.0, _curve(100, 50)))),
          SimpleNamespace(run=RunData(Path("B"), "B", {}, "done", 0.0, None, replay=REPLAY, accuracy=_curve(40, 80)),
                          **vars(_sm("BSP", 40.0, _curve(40, 80))))]
    per = {"x": [Claim("time to target, ROG-4 / min(BSP, SSP-4, FLOWN)", 0.75, None, None, "", ("<=", 0.7), "x", "",
                       ("R", "B"))]}
    rows = C.explain(aggregate(per), per, ms)
    assert [r["cause"] for r in rows] == ["more iterations to the target"]
    assert "first fade at 2.0 s" in rows[0]["evidence"] and "3.00x the iterations" in rows[0]["evidence"]


def test_accuracy_difference_within_the_swing_by_hand():
    # raw tests 60, 62, 59, 63: changes 2, 3, 4 -> median 3 pts; the other run: 70, 71, 70.5 -> 1, 0.5 -> 0.75
    a = pd.DataFrame({"iteration": [0, 1, 2, 3], "time_s": [0, 1, 2, 3], "accuracy_pct": [60.0, 62, 59, 63]})
    b = pd.DataFrame({"iteration": [0, 1, 2], "time_s": [0, 1, 2], "accuracy_pct": [70.0, 71, 70.5]})
    assert C.swing_pts(a) == pytest.approx(3.0) and C.swing_pts(b) == pytest.approx(0.75)
    assert C.swing_pts(b.iloc[:2]) is None
    cause, ev = C.classify_swing(-5.0, {"ROG-4": 3.0, "BSP": 0.75}, "fewer fades", "fades cover 10 %")
    assert cause == "within the test-to-test swing" and "ROG-4 3.00 pts" in ev  # 5 <= 2 x 3
    assert C.classify_swing(-7.0, {"ROG-4": 3.0, "BSP": 0.75}, "fewer fades", "x")[0] == "fewer fades"
    runs = [SimpleNamespace(run=RunData(Path("R"), "R", {}, "done", 0.0, None, replay=REPLAY, accuracy=a), label="ROG-4",
                            time_to_target_s=None),
            SimpleNamespace(run=RunData(Path("B"), "B", {}, "done", 0.0, None, replay=REPLAY, accuracy=b), label="BSP",
                            time_to_target_s=None)]
    per = {"x": [Claim("accuracy at equal iterations, ROG-4 - BSP", -5.0, None, None, "", (">=", -1.5), "pts", "",
                       ("R", "B"))]}
    rows = C.explain(aggregate(per), per, runs)
    assert [r["cause"] for r in rows] == ["within the test-to-test swing"]
