"""The statistical-efficiency readings (rog/papers/rog/efficiency.py) on hand-made curves whose crossings are
worked out by hand, and the per-tensor staleness read from event-log records."""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rog.papers.rog.efficiency import (efficiency, efficiency_markdown, iterations_to_levels, level_ratios,
                                     stale_tensors, target_position, time_to_final_of)


def _m(label, it_per_s, acc_at):
    t = np.arange(0, 101, 10, dtype=float)
    curve = pd.DataFrame({"time_s": t, "iteration": t * it_per_s, "accuracy_pct": [acc_at(x) for x in t]})
    return types.SimpleNamespace(label=label, accuracy_curve=curve, train_s=100.0)


def _team():
    # BSP: 0.5 it/s, 40 % -> 80 % linearly over 100 s; SSP-4: 0.8 it/s, same curve; ROG-4: 1 it/s, 80 % at 80 s
    return [_m("BSP", 0.5, lambda x: 40 + 0.4 * x), _m("SSP-4", 0.8, lambda x: 40 + 0.4 * x),
            _m("ROG-4", 1.0, lambda x: min(80.0, 40 + 0.5 * x))]


def test_iterations_to_each_level_and_rog_over_the_baselines():
    table = iterations_to_levels(_team(), levels=(0.5, 0.9))
    # start 40, lowest peak 80: level 0.5 -> 60 % (BSP at 50 s = it 25, SSP-4 at 50 s = it 40, ROG-4 at 40 s = it 40)
    assert table[0.5]["target_pct"] == pytest.approx(60.0)
    assert table[0.5]["iterations"] == pytest.approx({"BSP": 25.0, "SSP-4": 40.0, "ROG-4": 40.0})
    # level 0.9 -> 76 %: BSP at 90 s = it 45, ROG-4 at 72 s = it 72
    assert table[0.9]["iterations"]["ROG-4"] == pytest.approx(72.0)
    r = level_ratios(table)
    assert r[0.5] == pytest.approx({"BSP": 1.6, "SSP-4": 1.0})
    assert r[0.9]["BSP"] == pytest.approx(72.0 / 45.0)


def test_where_the_target_falls_and_rog_to_each_final():
    pos = target_position(_team(), 72.0, first_fade_s=50.0)
    assert pos["BSP"]["crossing_s"] == pytest.approx(80.0) and pos["BSP"]["crossing_share"] == pytest.approx(0.8)
    assert pos["ROG-4"]["crossing_s"] == pytest.approx(64.0)  # 40 + 0.5 t = 72
    assert pos["BSP"]["first_fade_share"] == pytest.approx(0.5)
    fin = time_to_final_of(_team())
    assert fin["BSP"]["final_pct"] == pytest.approx(80.0)
    assert fin["BSP"]["subject_s"] == pytest.approx(80.0) and fin["BSP"]["share"] == pytest.approx(0.8)
    assert "ROG-4" not in fin


def test_stale_tensors_from_the_records_named_from_the_layout(tmp_path):
    (tmp_path / "layout.json").write_text(json.dumps({"names": ["conv.w", "conv.b", "fc.w"], "shapes": [[2], [2], [2]]}))
    ev = {"w0": pd.DataFrame([{"kind": "staleness", "tensor_max": [1, 0, 4]}, {"kind": "pull", "tensor_max": None},
                              {"kind": "staleness", "tensor_max": [3, 0, 2]}]),
          "w1": pd.DataFrame([{"kind": "staleness", "tensor_max": [2, 1, 0]}])}
    run = types.SimpleNamespace(events=ev, worker_ranks=["w0", "w1"], run_dir=tmp_path, label="ROG-4")
    got = stale_tensors(run, top=2)
    # means over the 3 records: conv.w (1+3+2)/3 = 2, conv.b 1/3, fc.w (4+2+0)/3 = 2 -> ties keep layout order
    assert [(g["tensor"], round(g["mean_max_staleness"], 4)) for g in got] == [("conv.w", 2.0), ("fc.w", 2.0)]
    old = types.SimpleNamespace(events={"w0": pd.DataFrame([{"kind": "staleness"}])}, worker_ranks=["w0"],
                                run_dir=tmp_path)
    assert stale_tensors(old) == []  # logs from before the per-tensor field: nothing to say


def test_the_section_renders_every_reading():
    team = _team()
    doc = efficiency(team, [], first_fade_s=30.0, target_pct=72.0)
    json.dumps(doc)  # JSON-ready
    md = efficiency_markdown(doc)
    assert "| 0.5 | 60.00 | 1.60 | 1.00 |" in md
    assert "| BSP | 80.0 | 0.80 | 0.30 |" in md


def test_a_reference_baseline_is_measured_against_the_levels_it_does_not_set():
    # DDP peaks at 50 %: were it to set the targets, level 0.5 would be 45 %; the paper's systems (start 40,
    # lowest peak 80) set 60 %, which DDP never reaches
    team = _team()
    from rog.analysis.load import RunData

    for m in team:
        m.run = RunData(Path(m.label), m.label, {"library": m.label.split("-")[0]}, "done", 0.0, None)
    ddp = _m("DDP", 0.2, lambda x: 40 + 0.1 * x)
    ddp.run = RunData(Path("DDP"), "DDP", {"library": "DDP"}, "done", 0.0, None)
    table = iterations_to_levels(team + [ddp], levels=(0.5,))
    assert table[0.5]["target_pct"] == pytest.approx(60.0)
    assert table[0.5]["iterations"]["DDP"] is None and table[0.5]["iterations"]["BSP"] == pytest.approx(25.0)
