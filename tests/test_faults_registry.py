"""The fault-scenario registry and scripts/bench_faults.py: modules are merged, a missing module is
reported as a failed scenario (never skipped), and the bench's last line is the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.faults.registry import SCENARIO_MODULES, ScenarioContext, load_module, scenarios

ROOT = Path(__file__).resolve().parents[1]


def test_missing_module_is_a_failed_scenario(tmp_path):
    found = scenarios(("benchmarks.faults.bad_inputs", "benchmarks.faults.no_such_module"))
    assert "bad_inputs" in found and "benchmarks.faults.no_such_module:import" in found
    out = found["benchmarks.faults.no_such_module:import"](ScenarioContext(work_dir=tmp_path))
    assert out["passed"] is False and "does not exist" in out["error"] and out["rows_lost"] == 0


def test_module_without_scenarios_is_reported():
    found, why = load_module("benchmarks.faults.registry")
    assert found == {} and "SCENARIOS" in why


def test_registry_lists_every_module_of_the_interface():
    assert SCENARIO_MODULES == ("benchmarks.faults.wire_fuzz", "benchmarks.faults.hostile_peers", "benchmarks.faults.signals",
                                "benchmarks.faults.bad_inputs", "benchmarks.faults.runtime_scenarios")


def test_bench_prints_one_line_per_scenario_and_the_summary(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_faults.py"), "--quick", "--only", "bad_inputs",
                           "--work-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    lines = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert lines[0]["scenario"] == "bad_inputs" and lines[0]["passed"] is True
    assert lines[0]["details"]["cases"] >= 40
    summary = lines[-1]
    assert summary["scenarios"] == 1 and summary["passed"] == 1 and summary["rows_lost"] == 0
    assert proc.returncode == 0


def test_bench_rejects_an_unknown_scenario():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_faults.py"), "--only", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown scenario" in proc.stderr


def test_bench_without_hypothesis_says_so_in_one_line_before_any_scenario(tmp_path):
    """An interpreter without the test extra: one line naming hypothesis and the setup command, exit 2."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['hypothesis'] = None  # find_spec() is now None\n")
    work = tmp_path / "work"
    env = {**os.environ, "PYTHONPATH": str(hide)}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_faults.py"), "--only", "wire_fuzz",
                           "--work-dir", str(work)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "hypothesis" in lines[0] and "ROG_EXTRAS=test" in lines[0]
    assert not work.exists()  # no scenario started


def test_missing_imports_names_only_what_the_chosen_modules_need(monkeypatch):
    import importlib.util

    from benchmarks.faults import registry

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "hypothesis" else real(name, *a))
    wire = [m for m in SCENARIO_MODULES if m.endswith(".wire_fuzz")]
    others = [m for m in SCENARIO_MODULES if not m.endswith(".wire_fuzz")]
    assert registry.missing_imports(wire) == ["hypothesis"]
    assert registry.missing_imports(others) == []


def test_a_prefix_that_random_run_prefixes_can_start_with_is_refused():
    from benchmarks.faults.registry import shadows_random_prefixes

    assert shadows_random_prefixes("rgd") and shadows_random_prefixes("rg") and shadows_random_prefixes("r")
    assert shadows_random_prefixes("rg0af")
    assert not shadows_random_prefixes("rgz") and not shadows_random_prefixes("rgdz") and not shadows_random_prefixes("xy")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_faults.py"), "--prefix", "rgd", "--list"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--prefix 'rgd'" in proc.stderr and "'rgdz'" in proc.stderr
