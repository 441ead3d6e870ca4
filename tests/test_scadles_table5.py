"""ScaDLES's Table V to a target (rog.papers.scadles.table5_steps): the runs it plans parse as run.py flags, and the
target, iterations and floats to it, CNC and the "compression pays" verdict on runs whose curves and push records are
set by hand."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rog.analysis.load import RunData
from rog.papers.scadles import table5_steps as T


def test_steps_parse_as_run_py_flags(tmp_path):
    from rog.experiment.cli import parse_args

    st = T.steps(tmp_path)
    assert len(st) == 2 * 4 + 2 + 1 == len(T.cells())
    by = {}
    for folder, argv in st:
        a = parse_args(argv[2:])
        assert argv[:2] == ["-m", "rog.experiment"] and argv[argv.index("--result-dir") + 1] == folder
        assert (a.library, a.workers, a.iterations, a.seed, a.compression) == ("BSP", 4, 120, 1, "topk")
        by[folder.rsplit("/", 1)[-1]] = a
    assert by["dense"].topk_gate is True and by["dense"].topk_gate_delta == 0.0  # the gate never opens
    assert by["cr0.01-static"].topk_gate is False and by["cr0.01-static"].topk_ratio == 0.01
    assert by["cr0.1-d0.3"].topk_gate_delta == 0.3 and by["cr0.1-d0.3"].topk_gate_statistic == "norm"


def test_floats_to_a_target_by_hand():
    recs = [[dict(floats=10 * (i + 1), compressed=False) for i in range(5)] for _ in range(2)]
    # ceil(2.5) = 3 pushes per worker: 10 + 20 + 30, twice
    assert T.floats_to(recs, 2.5) == 120 and T.floats_to(recs, 3.0) == 120 and T.floats_to(recs, None) is None


def _fake(tmp_path, monkeypatch, reach: dict, floats: dict, cnc: dict):
    """Every run: accuracy 60 % at iteration 0 rising linearly to 90 % at iteration ``reach[name]``, then flat;
    4 workers, 120 pushes each (+ the final flush) of ``floats[name]`` floats, compressed when i < cnc x 120."""
    runs = {}
    for name, _, _ in T.cells():
        d = tmp_path / name
        d.mkdir()
        its = list(range(0, 121, 10))
        acc = [min(60 + 30 * i / reach[name], 90.0) for i in its]
        runs[name] = RunData(d, name, {}, "done", 0.0, None, accuracy=pd.DataFrame(
            {"iteration": its, "time_s": [float(i) for i in its], "accuracy_pct": acc}))
        recs = [dict(floats=floats[name], compressed=i < cnc[name] * 120) for i in range(120)]
        for k in range(4):
            (d / f"topk-w{k}.json").write_text(json.dumps({"records": recs + [dict(floats=999, compressed=False)]}))
    monkeypatch.setattr(T, "load_step", lambda folder: runs[str(folder).rsplit("/", 1)[-1]])


def test_rows_and_verdict_by_hand(tmp_path, monkeypatch):
    names = [n for n, _, _ in T.cells()]
    reach = {n: 100 for n in names}
    reach["dense"] = 50
    floats = {n: 100 for n in names}
    floats["dense"] = 1000
    floats["cr0.01-d0.4"] = 600
    cnc = {n: 0.0 for n in names}
    cnc.update({"cr0.1-d0.3": 1.0, "cr0.1-d0.4": 1.0, "cr0.01-d0.4": 1.0, "cr0.1-d0.2": 0.5})
    _fake(tmp_path, monkeypatch, reach, floats, cnc)
    d = T.table5_rows(tmp_path)
    # every run peaks at 90: target 60 + 0.8 x 30 = 84, crossed at iteration 40 (dense) and 80 (the others)
    assert d["complete"] and d["target_pct"] == pytest.approx(84.0)
    rows = {r["name"]: r for r in d["rows"]}
    assert rows["dense"]["iteration_to_target"] == pytest.approx(40.0)
    assert rows["cr0.1-d0.3"]["iteration_to_target"] == pytest.approx(80.0)
    # floats to the target: dense 4 x 40 x 1000 = 160,000; CR 0.1 full cells 4 x 80 x 100 = 32,000 (fewer: pays);
    # CR 0.01 at delta 0.4: 4 x 80 x 600 = 192,000 (more: does not)
    assert rows["dense"]["floats_to_target"] == 160_000 and rows["cr0.1-d0.4"]["floats_to_target"] == 32_000
    assert rows["cr0.01-d0.4"]["floats_to_target"] == 192_000
    assert rows["cr0.1-d0.2"]["cnc"] == pytest.approx(0.5) and rows["dense"]["floats_total"] == 4 * 120 * 1000
    assert d["pays_cr0.1"] == "agrees" and d["pays_cr0.01"] == "does not agree"
    # CNC cells against the paper's band: CR 0.1 delta 0.3 (1.0 / 1.0): 1.0 agrees; CR 0.01 delta 0.1 (0 / 0): 0 agrees
    assert rows["cr0.1-d0.3"]["cnc_verdict"] == "agrees" and rows["cr0.01-d0.1"]["cnc_verdict"] == "agrees"
    assert rows["cr0.1-d0.1"]["cnc_verdict"] == "agrees"  # 0 within [0, 0.39]
    md = T.markdown(tmp_path)
    assert "CR 0.1: **agrees**; CR 0.01: **does not agree**" in md and "| dense | 0 (never opens) |" in md


def test_no_full_cell_is_not_decidable_and_missing_runs_are_named(tmp_path, monkeypatch):
    names = [n for n, _, _ in T.cells()]
    _fake(tmp_path, monkeypatch, {n: 100 for n in names}, {n: 100 for n in names}, {n: 0.0 for n in names})
    d = T.table5_rows(tmp_path)
    assert d["pays_cr0.1"] == d["pays_cr0.01"] == "not decidable (no cell with CNC >= 0.9)"
    monkeypatch.setattr(T, "load_step", lambda folder: None)
    d = T.table5_rows(tmp_path)
    assert not d["complete"] and d["missing"] == names and "Runs missing: cr0.1-d0.1" in T.markdown(tmp_path)
