"""Claims over trace x seed replicas (rog.papers.rog.robustness), the decidability rule of the
sensitivity items' accuracy claims (rog.papers.rog.robustness) and run_items.py --seeds."""

import json
from pathlib import Path

import pytest

from rog.analysis.claim_table import Claim
from rog.analysis.summary import write_summary
from rog.experiment import items as I
from rog.papers.rog.robustness import NOT_DECIDABLE, not_decidable_reason, reasons
from rog.papers.rog.claims import claim_key
from rog.papers.rog.robustness import ROBUSTNESS_KEYS, aggregate, replica_of

STALL = "stall / iteration, ROG-4 / BSP"
ACC_EQ = "accuracy at equal time ({} s, the shortest of these runs), ROG-4 - best of BSP / SSP-4 / FLOWN"


def claim(name, ours, bound=None, unit="x", ids=(), source=""):
    return Claim(name, ours, None, None, "", bound, unit, "" if ours is not None else "missing", tuple(ids), source)


def test_aggregate_by_hand_k_of_n_median_range_and_missing_values():
    per = {
        "w1:seed0": [claim(STALL, 0.40, ("<=", 0.5), ids=("ROG4-s0", "BSP-s0")), claim(ACC_EQ.format(140), 2.0, unit="points")],
        "w1:seed1": [claim(STALL, 0.60, ("<=", 0.5), ids=("ROG4-s1", "BSP-s1")), claim(ACC_EQ.format(131), -1.0, unit="points")],
        "w2:seed0": [claim(STALL, 0.45, ("<=", 0.5), ids=("ROG4-t2", "BSP-t2")), claim(ACC_EQ.format(150), None, unit="points")],
        "w2:seed1": [claim(STALL, None, ("<=", 0.5), ids=("BSP-t3",))],  # ROG-4's run missing
    }
    out = {e["claim"]: e for e in aggregate(per)}
    assert list(out) == [STALL, claim_key(ACC_EQ.format(140))]  # the equal-time claims of all replicas are one
    s = out[STALL]
    assert tuple(s) == ROBUSTNESS_KEYS
    # measured on 3 of 4 replicas; 0.40 and 0.45 meet <= 0.5, 0.60 does not; sorted 0.40 0.45 0.60
    assert s["of"] == 3 and s["holds"] == 2
    assert s["median"] == pytest.approx(0.45) and s["min"] == pytest.approx(0.40) and s["max"] == pytest.approx(0.60)
    assert s["bound"] == ["<=", 0.5]
    assert s["run_ids"] == sorted(["ROG4-s0", "BSP-s0", "ROG4-s1", "BSP-s1", "ROG4-t2", "BSP-t2", "BSP-t3"])
    a = out[claim_key(ACC_EQ.format(140))]
    # no bound: holds None; two measured values 2.0 and -1.0: median their mean 0.5
    assert a["holds"] is None and a["of"] == 2 and a["median"] == pytest.approx(0.5)
    assert (a["min"], a["max"]) == (pytest.approx(-1.0), pytest.approx(2.0))


def test_one_replica_reports_of_1_and_an_unmeasured_claim_of_0():
    out = aggregate({"": [claim(STALL, 0.7, ("<=", 0.5)), claim("time to target, X", None, ("<=", 0.75))]})
    assert out[0]["of"] == 1 and out[0]["holds"] == 0 and out[0]["median"] == out[0]["min"] == out[0]["max"] == 0.7
    assert out[1]["of"] == 0 and out[1]["holds"] == 0 and out[1]["median"] is None and out[1]["min"] is None


def test_replica_names():
    assert replica_of("outdoors") == "" and replica_of("outdoors:w1:seed2") == "w1:seed2"
    assert replica_of("batch:seed1") == "seed1"


def test_sensitivity_accuracy_claims_are_not_decidable_when_short_or_spread():
    energy = claim("energy to target, ROG-4 / BSP at 6 workers", 0.8, source="sensitivity")
    final = claim("final accuracy, ROG-30 - ROG-4", 2.0, unit="points", source="threshold")
    stall = claim("stall / iteration, ROG-4 / BSP at 6 workers", 0.3, ("<=", 0.6), source="sensitivity")
    e2e = claim("time to target, ROG-4 / min(BSP, SSP-4, FLOWN)", 0.9, ("<=", 0.75))
    budgets = {"outdoors": 150.0, "batch": 40.0, "workers": 40.0, "threshold": 40.0}
    why = reasons([energy, final, stall, e2e], budgets)
    assert set(why) == {energy.name, final.name}  # stall and end-to-end claims are never marked
    assert why[energy.name].startswith(NOT_DECIDABLE) and "40 s" in why[energy.name]
    # long enough: the spread rule; 0.8x median is 0.2 from parity
    assert not_decidable_reason(energy, 150.0, dict(of=3, median=0.8, min=0.7, max=0.85)) is None  # spread 0.15
    assert NOT_DECIDABLE in not_decidable_reason(energy, 150.0, dict(of=3, median=0.8, min=0.6, max=1.1))  # 0.5
    # points: +2.0 median, spread 5 > 2 -> not decidable; one replica: no spread to judge
    assert not_decidable_reason(final, 200.0, dict(of=2, median=2.0, min=-0.5, max=4.5)) is not None
    assert not_decidable_reason(final, 200.0, dict(of=1, median=2.0, min=2.0, max=2.0)) is None


def test_items_for_seeds_gives_one_item_per_replica_and_run_ids_by_seed(tmp_path):
    traces = [tmp_path / "a.csv", tmp_path / "b.csv"]
    its = I.items_for(["outdoors"], traces, [0, 2])
    assert [it.name for it in its] == ["outdoors:a:seed0", "outdoors:a:seed2", "outdoors:b:seed0", "outdoors:b:seed2"]
    runs = I.plan_runs(its)
    assert len(runs) == 4 * len(I.ITEMS["outdoors"].runs) and len({r.run_id for r in runs}) == len(runs)
    assert {r.budget_s for r in runs} == {I.OUTDOORS_BUDGET_S}  # the item's budget by its base name
    assert all(r.run_id.split("-seed")[1][0] == r.items[0][-1] for r in runs)
    assert [it.name for it in I.items_for(["outdoors"])] == ["outdoors"]  # no seeds: unchanged
    assert I.parse_seeds("0,1,2") == [0, 1, 2]
    for bad in ("0,x", "1,1", "-1", ""):
        with pytest.raises(ValueError, match="--seeds"):
            I.parse_seeds(bad)


def test_write_summary_reads_claims_per_replica(tmp_path):
    from test_analysis import make_run

    # two replicas; ROG-4 / BSP stall: seed0 1/3 (holds <= 0.5), seed1 2/3 (misses)
    items = {}
    for seed, rog_stall in ((0, 1.0), (1, 2.0)):
        b = make_run(tmp_path, f"BSP-s{seed}", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2)
        r = make_run(tmp_path, f"ROG4-s{seed}", workers=((1.0, 0.5, rog_stall, 0.5),) * 2)
        items[f"outdoors:seed{seed}"] = [b.name, r.name]
    js, md = write_summary(tmp_path, items=items, smooth_tests=1)
    e = next(e for e in json.loads(js.read_text())["robustness"] if e["claim"] == STALL)
    assert (e["of"], e["holds"]) == (2, 1)
    assert e["median"] == pytest.approx(0.5) and (e["min"], e["max"]) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert e["run_ids"] == ["BSP-s0", "BSP-s1", "ROG4-s0", "ROG4-s1"]
    text = md.read_text()
    assert "## Robustness over traces and seeds" in text and f"| {STALL} | on 1 of 2 |" in text
    eff = json.loads(js.read_text())["efficiency"]  # the first replica's runs: ROG-4 against BSP, per level
    assert set(eff["levels"]) == {"0.5", "0.7", "0.8", "0.9"} and "## Statistical efficiency" in text
    assert set(eff["target_position"]) == {"BSP", "ROG-4"}


def test_summary_md_marks_short_threshold_accuracy_claims_and_keeps_stall_verdicts(tmp_path):
    from test_analysis import make_run

    w = ((1.0, 0.5, 1.0, 0.5),) * 2  # 3 s per iteration, 10 iterations: 30 s
    ids = [make_run(tmp_path, n, system=s, threshold=t, workers=w, evals=((0, 0.5), (5, 0.6), (10, ev))).name
           for n, s, t, ev in (("BSP-t", "BSP", 0, 0.64), ("ROG4-t", "ROG", 4, 0.65), ("ROG30-t", "ROG", 30, 0.66))]
    _, md = write_summary(tmp_path, items={"threshold": ids}, budgets_s={"threshold": 40.0}, smooth_tests=1)
    rows = {}  # the claims table's rows (the first row of each name; the robustness table follows)
    for line in md.read_text().splitlines():
        if line.startswith("| "):
            rows.setdefault(line.split(" | ")[0].lstrip("| "), line)
    final = rows["final accuracy, ROG-30 - ROG-4"]
    assert f"| {NOT_DECIDABLE} |" in final and "40 s" in final and "+1.00" in final  # 66 - 65, shown, not judged
    assert NOT_DECIDABLE not in rows["stall / iteration, ROG-4 / BSP"]
    # one replica: no robustness table (it would repeat the claims table); summary.json keeps the entries
    assert "## Robustness over traces and seeds" not in md.read_text()
    robust = json.loads((tmp_path / "summary.json").read_text())["robustness"]
    assert any(e["claim"] == "final accuracy, ROG-30 - ROG-4" and e["of"] == 1 for e in robust)
