"""rog.analysis.causes on replay logs and claims written by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from rog.analysis import causes as C
from rog.analysis.robustness import aggregate
from rog.analysis.summary import Claim


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
    run = SimpleNamespace(run_id=rid, replay=replay, config={"time_scale": 1.0}, accuracy=acc)
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
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
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
