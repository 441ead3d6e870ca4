"""Per-item budgets: a run shared by items runs for the longest budget and every item reads it over
its own (rog.analysis.load.clip_run); values computed by hand from synthetic event logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_analysis import make_run

from rog.analysis import load_run
from rog.analysis.load import clip_run
from rog.analysis.metrics import MODEL_SOURCE, TARGET_FRACTION, composition, team_energy_j
from rog.analysis.plan_file import read_plan
from rog.analysis.paper_sections import SummaryContext
from rog.analysis.summary import item_views, write_summary
from rog.papers.rog.item_groups import item_groups

ROOT = Path(__file__).resolve().parents[1]


def _groups(tmp_path, runs, items, budgets_s):
    """ROG's item groups (rog.papers.rog.item_groups) as its summary section builds them, smooth_tests 1."""
    primary, per_item, views = item_views(runs, items, smooth_tests=1, budgets_s=budgets_s)
    ctx = SummaryContext(result_dir=tmp_path, runs=runs, metrics=primary, target_acc=None, target_rule="-",
                         equal_iters=None, target_fraction=TARGET_FRACTION, power="auto", smooth_tests=1, items=items,
                         budgets_s=budgets_s, per_item=per_item, views=views)
    return item_groups(ctx)


def _with_budget(run_dir: Path, budget_s: float) -> Path:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["time_budget_s"] = budget_s
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    return run_dir


def test_clip_run_keeps_what_a_shorter_run_would_have_measured(tmp_path):
    # worker 0: 4 s iterations (compute 1, push 0.5, stall 2, pull 0.5), tests at 0 / 20 / 40 s;
    # worker 1: 3.5 s iterations (compute 1, push 1, stall 0.5, pull 1)
    run = load_run(_with_budget(make_run(tmp_path, "X", evals=((0, 0.50), (5, 0.60), (10, 0.70))), 40.0))
    short = clip_run(run, 20.0)
    # iterations complete by 20 s: worker 0 ends at 4, 8, ..., 20 (5); worker 1 at 3.5, ..., 17.5 (5)
    assert short.iterations.groupby("worker")["iteration"].max().to_dict() == {0: 5, 1: 5}
    comp = composition(short)
    assert comp["iterations"] == 5 and comp["stall_s"] == pytest.approx((2.0 + 0.5) / 2)
    assert comp["iter_s"] == pytest.approx((4.0 + 3.5) / 2)
    # tests taken by 20 s: 50 % at 0 s and 60 % at 20 s
    assert short.accuracy["accuracy_pct"].tolist() == pytest.approx([50.0, 60.0])
    # the energy to 20 s is the whole run's to 20 s: every state that began by then is kept; worker 1's
    # 6th pull begins at 20.0 s and is dropped, which the integral to 20 s does not see either
    assert team_energy_j(short, 20.0, MODEL_SOURCE) == pytest.approx(team_energy_j(run, 20.0, MODEL_SOURCE))
    assert short.config["time_budget_s"] == 20.0 and short.config["clipped_from_s"] == 40.0
    assert any("first 20 s" in w for w in short.warnings)
    assert run.config["time_budget_s"] == 40.0 and len(run.iterations) == 20  # the original is untouched
    # a run no longer than the horizon (within a second) is read whole
    assert clip_run(run, 39.5) is run and clip_run(run, 40.0) is run


def test_each_item_reads_shared_runs_over_its_own_budget(tmp_path):
    make_run(tmp_path, "X", evals=((0, 0.50), (5, 0.60), (10, 0.70)))  # 0 / 20 / 40 s
    make_run(tmp_path, "Y", evals=((0, 0.50), (5, 0.65), (10, 0.75)))
    make_run(tmp_path, "Z", iterations=5, evals=((0, 0.50), (5, 0.80)))  # 0 / 20 s
    for name, budget in (("X", 40.0), ("Y", 40.0), ("Z", 20.0)):
        _with_budget(tmp_path / name, budget)
    runs = [load_run(tmp_path / n) for n in ("X", "Y", "Z")]
    items = {"outdoors": ["X", "Y"], "workers": ["X", "Z"]}
    primary, per_item, views = item_views(runs, items, smooth_tests=1, budgets_s={"outdoors": 40.0, "workers": 20.0})
    # outdoors: lowest peak 70 (X) -> target 50 + 0.8 x 20 = 66; X crosses at 20 + 20 x 6 / 10 = 32 s
    assert per_item["outdoors"]["target_acc"] == pytest.approx(66.0) and per_item["outdoors"]["budget_s"] == 40.0
    assert per_item["outdoors"]["runs"]["X"]["time_to_target_s"] == pytest.approx(32.0)
    # workers: X read over 20 s peaks at 60 (not 70) -> target 50 + 0.8 x 10 = 58; X at 20 x 8 / 10 = 16 s,
    # Z at 20 x 8 / 30 s
    assert per_item["workers"]["target_acc"] == pytest.approx(58.0) and per_item["workers"]["budget_s"] == 20.0
    assert per_item["workers"]["runs"]["X"]["time_to_target_s"] == pytest.approx(16.0)
    assert per_item["workers"]["runs"]["Z"]["time_to_target_s"] == pytest.approx(20 * 8 / 30)
    # X's primary item is the first (outdoors, whole); the sensitivity view holds its clipped reading
    by_id = {m.run.run_id: m for m in primary}
    assert by_id["X"].iterations == 10 and by_id["X"].time_to_target_s == pytest.approx(32.0)
    groups = _groups(tmp_path, runs, items, {"outdoors": 40.0, "workers": 20.0})
    sens = {m.run.run_id: m for m in groups.sensitivity}
    assert set(sens) == {"X", "Z"} and sens["X"].iterations == 5 and sens["X"].acc_final == pytest.approx(60.0)
    assert groups.threshold is None and groups.replay is None


def test_replay_modes_are_compared_over_the_shorter_budget(tmp_path):
    make_run(tmp_path, "A", replay_mode="artifact")  # 10 iterations of 4 / 3.5 s
    make_run(tmp_path, "B", iterations=5, replay_mode="recorded")
    _with_budget(tmp_path / "A", 40.0)
    _with_budget(tmp_path / "B", 20.0)
    runs = [load_run(tmp_path / n) for n in ("A", "B")]
    groups = _groups(tmp_path, runs, {"outdoors": ["A"], "recorded": ["B"]}, {"outdoors": 40.0, "recorded": 20.0})
    assert groups.replay_horizon_s == 20.0
    assert {m.run.run_id: m.iterations for m in groups.replay} == {"A": 5, "B": 5}


def test_read_plan_and_the_summary_cli_use_the_budgets(tmp_path):
    make_run(tmp_path, "X", evals=((0, 0.50), (5, 0.60), (10, 0.70)))
    make_run(tmp_path, "Z", iterations=5, evals=((0, 0.50), (5, 0.80)))
    _with_budget(tmp_path / "X", 40.0)
    _with_budget(tmp_path / "Z", 20.0)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"items": {"workers": ["X", "Z"]}, "budgets_s": {"workers": 20}}))
    assert read_plan(plan) == ({"workers": ["X", "Z"]}, {"workers": 20.0})
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize.py"), "--result-dir", str(tmp_path),
                        "--items", str(plan), "--smooth-tests", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["items"]["workers"]["budget_s"] == 20.0 and doc["target_acc"] == pytest.approx(58.0)
    assert doc["runs"]["X"]["iterations"] == 5 and doc["runs"]["X"]["acc_final"] == pytest.approx(60.0)
    assert "Budgets per item: workers 20 s" in (tmp_path / "summary.md").read_text()
    # a plan without budgets (older run_items.py) reads every run whole
    plan.write_text(json.dumps({"items": {"workers": ["X", "Z"]}}))
    write_summary(tmp_path, ["X", "Z"], items=read_plan(plan)[0], smooth_tests=1)
    assert json.loads((tmp_path / "summary.json").read_text())["runs"]["X"]["iterations"] == 10
    for bad, field in (({"items": {"a": ["X"]}, "budgets_s": {"a": -1}}, "budgets_s"),
                       ({"items": ["X"]}, "items")):
        plan.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=f"plan.json: field '{field}'"):
            read_plan(plan)
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize.py"), "--result-dir", str(tmp_path),
                            "--items", str(plan)], capture_output=True, text=True)
        assert r.returncode == 2 and f"field '{field}'" in r.stderr


def test_target_sensitivity_by_hand(tmp_path):
    from rog.analysis.metrics import MODEL_SOURCE, team_energy_j
    from rog.papers.rog.claims import target_sensitivity

    # tests at 0 / 20 / 40 s (worker 0's 4 s iterations); every run starts at 50 %, BSP peaks lowest (70)
    curves = {"BSP": ("BSP", 0, (50, 60, 70)), "SSP4": ("SSP", 4, (50, 62, 72)), "FLOWN4": ("FLOWN", 4, (50, 61, 71)),
              "ROG4": ("ROG", 4, (50, 70, 80))}
    for name, (system, thr, accs) in curves.items():
        make_run(tmp_path, name, system=system, threshold=thr,
                 evals=tuple((it, a / 100) for it, a in zip((0, 5, 10), accs)))
    runs = [load_run(tmp_path / n) for n in curves]
    rows = {r["fraction"]: r for r in target_sensitivity(runs, fractions=(0.5, 0.9), smooth_tests=1)}
    # f 0.5: target 60; ROG at 20 x 10/20 = 10 s, SSP-4 (fastest baseline) at 20 x 10/12 s
    assert rows[0.5]["target_acc"] == pytest.approx(60.0)
    assert rows[0.5]["ttt_ratio"] == pytest.approx(10.0 / (20 * 10 / 12))
    # f 0.9: target 68; ROG at 20 x 18/20 = 18 s, SSP-4 at 20 + 20 x 6/10 = 32 s, BSP at 20 + 20 x 8/10 = 36 s
    assert rows[0.9]["target_acc"] == pytest.approx(68.0)
    assert rows[0.9]["ttt_ratio"] == pytest.approx(18.0 / 32.0)
    by = {r.run_id: r for r in runs}
    e_rog, e_bsp, e_ssp = (team_energy_j(by[n], t, MODEL_SOURCE) for n, t in (("ROG4", 18.0), ("BSP", 36.0), ("SSP4", 32.0)))
    assert rows[0.9]["energy_ratio_bsp"] == pytest.approx(e_rog / e_bsp)
    assert rows[0.9]["energy_ratio_ssp4"] == pytest.approx(e_rog / e_ssp)
