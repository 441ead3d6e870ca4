"""outdoors_long (rog.experiment.long_item), its reading at the paper's horizons (rog.analysis.horizons)
and data_gen.synth_traces --seeds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from rog.experiment import items as I
from rog.experiment import long_item as L

sys.path.insert(0, str(Path(__file__).parent))


def test_long_budget_is_the_paper_hour_through_the_time_scale():
    from rog.testbed.profiles import load_profile

    assert load_profile("quick-cpu").compute_s_per_iteration == L.QUICK_COMPUTE_S
    # 0.28 / 1.12 = 0.25 wall s per trace second: 60 min -> 900 s, 30 min -> 450 s
    assert L.LONG_BUDGET_S == pytest.approx(900.0) and L.paper_horizon_s(30) == pytest.approx(450.0)
    assert I.PROFILES["quick"].budget_for("outdoors_long") == pytest.approx(900.0)
    assert I.PROFILES["quick"].budget_for("outdoors_long:w1:seed2") == pytest.approx(900.0)
    assert I.PROFILES["full"].budget_for("outdoors_long") == pytest.approx(3600.0)
    assert "outdoors_long" not in I.ITEM_NAMES  # opt-in
    long_ids = [I.run_id(s) for s in I.ITEMS["outdoors_long"].runs]
    assert long_ids == [I.run_id(s) for s in I.ITEMS["outdoors"].runs]  # shared with outdoors
    runs = I.plan_runs(I.items_for(["outdoors", "outdoors_long"]))
    assert len(runs) == 7 and {r.budget_s for r in runs} == {900.0}


def test_passes_lines_by_hand(tmp_path):
    tr = tmp_path / "t600.csv"
    tr.write_text("t_s,mbps\n" + "".join(f"{t},{10 + t % 7}\n" for t in range(0, 600)))  # 600 samples of 1 s: 600 s
    its = I.items_for(["outdoors_long"], [tr])
    (line,) = L.passes_lines(its, {it.name: 900.0 for it in its})
    # 900 s / 0.25 = 3600 trace s over a 600 s trace: 6 passes
    assert "3600 trace s" in line and "6.00 passes of t600.csv (600 trace s)" in line


def test_synth_traces_seeds_write_a_trace_folder(tmp_path, capsys):
    from data_gen import synth_traces as S
    from rog.traces import load_trace

    assert S.main(["--seeds", "1,2", "--seconds", "120", "--out", str(tmp_path / "tr")]) == 0
    files = sorted((tmp_path / "tr").iterdir())
    assert [f.name for f in files] == ["synth-outdoors-seed1.csv", "synth-outdoors-seed2.csv"]
    a, b = (load_trace(f) for f in files)
    assert a.duration_s == pytest.approx(120.0, abs=1.0) and list(a.rate_mbit) != list(b.rate_mbit)
    from rog.experiment.driver import trace_files

    assert trace_files(str(tmp_path / "tr")) == files  # usable with --traces
    with pytest.raises(SystemExit):
        S.main(["--seeds", "1,1", "--out", str(tmp_path / "x")])
    assert "--seeds" in capsys.readouterr().err


def _with_scale(d: Path, scale: float, budget_s: float) -> None:
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    cfg.update(time_scale=scale, time_budget_s=budget_s)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))


def test_horizons_by_hand(tmp_path):
    from test_analysis import make_run

    from rog.analysis.horizons import long_horizon, long_horizon_markdown

    # time scale 1/60: the paper's 30 min are 30 s here, 60 min 60 s.  BSP: 2 s per iteration, tests at
    # t = 0, 30, 60 s (50, 60, 70 %); ROG-4: 1 s per iteration, tests at 0, 30, 60 s (50, 70, 80 %)
    b = make_run(tmp_path, "BSP-x", system="BSP", threshold=0, iterations=30, workers=((1.0, 0.5, 0.25, 0.25),) * 2,
                 evals=((0, 0.50), (15, 0.60), (30, 0.70)))
    r = make_run(tmp_path, "ROG4-x", iterations=60, workers=((0.5, 0.25, 0.125, 0.125),) * 2,
                 evals=((0, 0.50), (30, 0.70), (60, 0.80)))
    for d in (b, r):
        _with_scale(d, 1 / 60, 60.0)
    from rog.analysis.load import load_run

    runs = [load_run(b), load_run(r)]
    out = long_horizon(runs, {"outdoors_long": ["BSP-x", "ROG4-x"], "outdoors": ["BSP-x"]}, smooth_tests=1)
    rep = out["replicas"][""]
    assert [h["horizon_s"] for h in rep["horizons"]] == [pytest.approx(30.0), pytest.approx(60.0)]
    eq = {e["fraction"]: e for e in rep["equal_time"]}
    # at 15 s (1/4 of 60 s): BSP 50 + 10 x 15/30 = 55 %, ROG-4 50 + 20 x 15/30 = 60 %: +5 points
    assert eq[0.25]["time_s"] == pytest.approx(15.0) and eq[0.25]["paper_min"] == pytest.approx(15.0)
    assert eq[0.25]["accuracy_pct"]["BSP"] == pytest.approx(55.0)
    assert eq[0.25]["rog4_minus_best"] == pytest.approx(5.0)
    assert eq[0.5]["rog4_minus_best"] == pytest.approx(10.0)  # 70 - 60
    assert eq[1.0]["rog4_minus_best"] == pytest.approx(10.0)  # 80 - 70
    # time per iteration ROG-4 / BSP: 1 s / 2 s at both horizons
    for h in rep["horizons"]:
        c = next(c for c in h["claims"] if c["claim"] == "time / iteration, ROG-4 / BSP")
        assert c["ours"] == pytest.approx(0.5) and c["verdict"] == "pass"
    over = {o["paper_min"]: o for o in out["over_replicas"]}
    it = next(e for e in over[30.0]["robustness"] if e["claim"] == "time / iteration, ROG-4 / BSP")
    assert (it["holds"], it["of"]) == (1, 1)
    md = long_horizon_markdown(out)
    assert "### 30 minutes" in md and "### 60 minutes" in md and "| all | 15 | 15 |" in md
    assert long_horizon(runs, {"outdoors": ["BSP-x"]}) is None and long_horizon_markdown(None) == ""
