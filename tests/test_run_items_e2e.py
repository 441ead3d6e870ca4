"""bash scripts/run_all.sh end to end on the emulated testbed with a tiny budget (slow: a few minutes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from rog.analysis.metrics import SUMMARY_KEYS
from rog.experiment import items as I

ROOT = Path(__file__).resolve().parents[1]
# Three of the item's five runs (ROG at thresholds 4, 20 and 40: the sensitivity figure draws a threshold study
# from three thresholds on): the test checks the plan's plumbing (DONE, the summary's keys, the figures, resume),
# which three runs exercise as five did; each run here costs about 50 s, mostly the testbed's start-up, whatever
# the 6 s budget.
RUNS = r"^ROG(4|20|40)-"  # a regular expression: --runs-regex


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the emulated testbed needs root")
def test_run_all_threshold_item_with_a_tiny_budget(tmp_path):
    res, fig = tmp_path / "result", tmp_path / "figure"
    r = subprocess.run(["bash", str(ROOT / "scripts" / "run_all.sh"), "threshold", "--budget-s", "6", "--runs-regex", RUNS,
                        "--result-dir", str(res), "--figure-dir", str(fig), "--cache-dir", str(ROOT / "result" / ".cache")],
                       capture_output=True, text=True, timeout=1200, cwd=str(ROOT))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ids = [I.run_id(s) for s in I.ITEMS["threshold"].runs if re.search(RUNS, I.run_id(s))]
    assert len(ids) == 3 and not [p.name for p in res.iterdir() if p.name.startswith(("BSP-", "ROG30-"))]
    for rid in ids:
        d = res / rid
        assert (d / "DONE").exists() and not (d / "INCOMPLETE").exists(), rid
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        assert cfg["time_budget_s"] == 6.0 and cfg["replay_mode"] == "artifact" and cfg["item"] == "threshold"
        assert (d / "accuracy.csv").read_text().count("\n") >= 3  # header, the start, the last iteration
        assert (d / "manifest.json").exists() and (d / "energy.json").exists()
    doc = json.loads((res / "summary.json").read_text())
    assert set(doc["runs"]) == set(ids) and "threshold" in doc["items"]
    assert all(tuple(e) == SUMMARY_KEYS for e in doc["runs"].values())
    assert all(e["iterations"] >= 1 and e["stall_s"] is not None for e in doc["runs"].values())
    assert (fig / "composition.png").exists() and (fig / "sensitivity.pdf").exists()
    assert not list(res.glob("*.incomplete-*"))
    # a second call finds everything complete and runs nothing
    r = subprocess.run(["bash", str(ROOT / "scripts" / "run_all.sh"), "threshold", "--budget-s", "6", "--dry-run",
                        "--runs-regex", RUNS,
                        "--result-dir", str(res), "--figure-dir", str(fig)], capture_output=True, text=True, cwd=str(ROOT))
    assert r.returncode == 0 and r.stdout.count(" skip ") == len(ids) and "0 to run" in r.stdout
