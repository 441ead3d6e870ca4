"""outdoors_long (rog.papers.rog.long_item), its reading at the paper's horizons (rog.papers.rog.horizons)
and data_gen.synth_traces --seeds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rog.experiment import items as I
from rog.papers.rog import long_item as L



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

    from rog.papers.rog.horizons import long_horizon
    from rog.papers.rog.horizons import long_horizon_markdown

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
    # the end-to-end item's budget (the plan's, 20 s here) is read beside the paper's two horizons
    out = long_horizon(runs, {"outdoors_long": ["BSP-x", "ROG4-x"], "outdoors": ["BSP-x"]}, {"outdoors": 20.0},
                       smooth_tests=1)
    rep = out["replicas"][""]
    assert [h["horizon_s"] for h in rep["horizons"]] == [pytest.approx(20.0), pytest.approx(30.0), pytest.approx(60.0)]
    assert [h["label"] for h in rep["horizons"]] == ["20 s", "30 min", "60 min"]
    assert [h["kind"] for h in rep["horizons"]] == ["item", "paper", "paper"]
    eq = {e["fraction"]: e for e in rep["equal_time"]}
    # at 15 s (1/4 of 60 s): BSP 50 + 10 x 15/30 = 55 %, ROG-4 50 + 20 x 15/30 = 60 %: +5 points
    assert eq[0.25]["time_s"] == pytest.approx(15.0) and eq[0.25]["paper_min"] == pytest.approx(15.0)
    assert eq[0.25]["accuracy_pct"]["BSP"] == pytest.approx(55.0)
    assert eq[0.25]["rog4_minus_best"] == pytest.approx(5.0)
    assert eq[0.5]["rog4_minus_best"] == pytest.approx(10.0)  # 70 - 60
    assert eq[1.0]["rog4_minus_best"] == pytest.approx(10.0)  # 80 - 70
    # time per iteration ROG-4 / BSP: 1 s / 2 s at every horizon
    for h in rep["horizons"]:
        c = next(c for c in h["claims"] if c["claim"] == "time / iteration, ROG-4 / BSP")
        assert c["ours"] == pytest.approx(0.5) and c["verdict"] == "pass"
    by = {h["label"]: h["efficiency"] for h in rep["horizons"]}
    # 60 min: start 50, lowest peak 70 (BSP): target 66 %.  BSP 60 -> 70 % over 30..60 s crosses at
    # 30 + 30 x 6/10 = 48 s (iteration 24); ROG-4 50 -> 70 % over 0..30 s at 30 x 16/20 = 24 s (iteration 24)
    pos = by["60 min"]["target_position"]
    assert pos["BSP"]["crossing_s"] == pytest.approx(48.0) and pos["ROG-4"]["crossing_s"] == pytest.approx(24.0)
    assert by["60 min"]["levels"]["0.8"]["iterations"] == pytest.approx({"BSP": 24.0, "ROG-4": 24.0})
    ratios = {h["label"]: h["ratios"] for h in rep["horizons"]}
    assert ratios["60 min"]["time"]["BSP"] == pytest.approx(24.0 / 48.0) and ratios["60 min"]["best_time"] == "BSP"
    assert ratios["20 s"]["time"]["best"] is None  # nobody crossed within 20 s
    # 30 min (first 30 s): BSP 50 -> 60 %, target 58 %: BSP at 24 s, ROG-4 (50 -> 70 %) at 12 s
    pos30 = by["30 min"]["target_position"]
    assert pos30["BSP"]["crossing_s"] == pytest.approx(24.0) and pos30["ROG-4"]["crossing_s"] == pytest.approx(12.0)
    # ROG-4 reaches BSP's final accuracy: 60 % at 15 s within 30 min, 70 % at 30 s within 60 min
    assert by["30 min"]["to_final_of"]["BSP"]["subject_s"] == pytest.approx(15.0)
    assert by["60 min"]["to_final_of"]["BSP"]["subject_s"] == pytest.approx(30.0)
    over = {o["label"]: o for o in out["over_replicas"]}
    assert list(over) == ["20 s", "30 min", "60 min"]
    it = next(e for e in over["30 min"]["robustness"] if e["claim"] == "time / iteration, ROG-4 / BSP")
    assert (it["holds"], it["of"]) == (1, 1)
    md = long_horizon_markdown(out)
    assert "| 20 s | 30 min | 60 min |" in md and "| all | 15 | 15 |" in md
    assert "| BSP | - | 24.0 s (" in md and "48.0 s (" in md
    assert "No claim's state at 20 s differs" in md
    assert long_horizon(runs, {"outdoors": ["BSP-x"]}) is None and long_horizon_markdown(None) == ""


def test_a_verdict_that_changes_with_the_horizon_is_named_with_its_numbers():
    from rog.papers.rog.horizons import horizon_changes, verdict_state

    def entry(claim, holds, of, median):
        return {"claim": claim, "holds": holds, "of": of, "median": median, "bound": ["<=", 0.75]}

    over = [{"label": "150 s", "kind": "item", "robustness": [entry("t", 0, 2, 0.9), entry("e", 2, 2, 0.5),
                                                               entry("m", 1, 2, 0.7)]},
            {"label": "30 min", "kind": "paper", "robustness": [entry("t", 1, 2, 0.8), entry("e", 2, 2, 0.4),
                                                                 entry("m", 1, 2, 0.7)]},
            {"label": "60 min", "kind": "paper", "robustness": [entry("t", 2, 2, 0.6), entry("e", 2, 2, 0.3)]}]
    assert [verdict_state(e) for e in over[0]["robustness"]] == ["fails", "holds", "mixed"]
    assert verdict_state({"claim": "x", "holds": None, "of": 2}) is None
    (c,) = horizon_changes(over)  # "e" holds everywhere, "m" stays mixed (and is missing at 60 min)
    assert c["claim"] == "t" and c["from"] == "150 s" and c["to"] == ["30 min", "60 min"]
    assert c["states"] == {"150 s": "fails", "30 min": "mixed", "60 min": "holds"}
    assert c["text"] == ("t: 150 s: fails on 0 of 2 (median 0.90); 30 min: mixed on 1 of 2 (median 0.80); "
                         "60 min: holds on 2 of 2 (median 0.60)")
    assert horizon_changes(over[:1]) == []


def test_the_short_horizon_is_the_end_to_end_items_budget():
    from rog.paper_horizons import QUICK_E2E_BUDGET_S

    assert I.PROFILES["quick"].budget_for("outdoors") == QUICK_E2E_BUDGET_S == 150.0


def test_pair_ratios_over_each_baseline_and_the_best():
    import types

    from rog.papers.rog.horizons import pair_ratios

    def m(label, t, e):
        return types.SimpleNamespace(label=label, time_to_target_s=t, energy_to_target_j=e)

    # ROG-4 40 s / 400 J; BSP 80 s / 1000 J; SSP-4 50 s / 350 J (first to cross, least energy); FLOWN never reached
    r = pair_ratios([m("ROG-4", 40.0, 400.0), m("BSP", 80.0, 1000.0), m("SSP-4", 50.0, 350.0), m("FLOWN", None, None)])
    assert r["time"] == pytest.approx({"BSP": 0.5, "SSP-4": 0.8, "FLOWN": None, "best": 0.8})
    assert r["energy"]["BSP"] == pytest.approx(0.4) and r["energy"]["best"] == pytest.approx(400 / 350)
    assert (r["best_time"], r["best_energy"]) == ("SSP-4", "SSP-4")
    none = pair_ratios([m("ROG-4", None, None), m("BSP", 80.0, 1000.0)])
    assert none["time"] == {"BSP": None, "best": None} and none["best_time"] == "BSP"


def test_the_long_figure_marks_each_horizon(tmp_path):
    from test_analysis import make_run

    from rog.analysis.figures import draw_all
    from rog.analysis.load import load_run
    from rog.analysis.replica_figures import horizon_marks

    res = tmp_path / "res"
    res.mkdir()
    b = make_run(res, "BSP-x", system="BSP", threshold=0, iterations=30, workers=((1.0, 0.5, 0.25, 0.25),) * 2,
                 evals=((0, 0.50), (15, 0.60), (30, 0.70)))
    r = make_run(res, "ROG4-x", iterations=60, workers=((0.5, 0.25, 0.125, 0.125),) * 2,
                 evals=((0, 0.50), (30, 0.70), (60, 0.80)))
    for d in (b, r):
        _with_scale(d, 1 / 60, 60.0)
    runs = [load_run(b), load_run(r)]
    # time scale 1/60: the paper's 30 and 60 minutes are 30 and 60 s; the end-to-end item's budget 20 s
    assert horizon_marks(runs, 20.0) == [(20.0, "20 s"), (pytest.approx(30.0), "30 min"), (pytest.approx(60.0), "60 min")]
    assert horizon_marks(runs, None) == [(pytest.approx(30.0), "30 min"), (pytest.approx(60.0), "60 min")]
    items = {"outdoors_long": ["BSP-x", "ROG4-x"]}
    out = draw_all(res, tmp_path / "fig", items=items, budgets_s={"outdoors_long": 60.0, "outdoors": 20.0},
                   formats=("png",))
    assert (tmp_path / "fig" / "accuracy_vs_time_long.png") in out


def test_the_replica_panels_draw_the_marks():
    import types

    import pandas as pd

    from rog.analysis.replica_figures import plot_replica_accuracy

    acc = pd.DataFrame({"time_s": [0.0, 30.0, 60.0], "accuracy_pct": [50.0, 60.0, 70.0]})
    m = types.SimpleNamespace(label="BSP", run=types.SimpleNamespace(accuracy=acc))
    seen = []

    def save(fig, d, name):
        seen.append((name, [sorted({float(x) for x in ln.get_xdata()}) for ln in fig.axes[0].lines]))
        return [name]

    out = plot_replica_accuracy({"k": [m]}, {"k": 66.0}, ["k"], None, lambda run, runs: {"color": "k"},
                                lambda mm: False, save, name="x", marks_s=[(20.0, "20 s"), (60.0, "60 min")],
                                min_panels=1)
    assert out == ["x"]
    (name, xs), = seen
    assert [0.0, 30.0, 60.0] in xs and [20.0] in xs and [60.0] in xs  # the curve and two vertical lines
    assert plot_replica_accuracy({"k": [m]}, {}, ["k"], None, None, None, save) == []  # one panel: not by default
