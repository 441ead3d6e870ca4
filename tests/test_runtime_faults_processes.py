"""The runtime fault scenarios of :mod:`benchmarks.faults.runtime_scenarios` over real processes and TCP:
the quick versions (one worker's link at 0 Mbit/s, a worker SIGKILLed mid-push and restarted, an
eviction and a late rejoin, a parameter-server SIGKILL and restart from its checkpoint).  Each
passes only with every worker's final model equal to the reference computed from the workers'
committed sums (``rows_lost == 0``).  Behind the ``faults`` marker (and ``slow``): tens of seconds each.

    bash scripts/test.sh -m faults tests/test_runtime_faults_processes.py
"""

from __future__ import annotations

import sys

import pytest

from benchmarks.faults.registry import ScenarioContext
from benchmarks.faults.runtime_scenarios import SCENARIOS

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_runtime_scenario_quick(name, tmp_path):
    out = SCENARIOS[name](ScenarioContext(tmp_path, quick=True, seed=0, prefix="rgr", python=sys.executable))
    assert out["scenario"] == name
    assert out["passed"], out.get("error")
    assert out["rows_lost"] == 0
    d = out["details"]
    assert d["max_rel_error"] <= 1e-5
    if name.startswith("runtime_outage"):
        during, ahead = d["iterations_during_outage"], d["ahead_at_outage_start"]
        assert during["1"] <= 1
        # the scenario's no-deadlock rule: a worker level with (or behind) the cut one when the link went down
        # moves on during the outage; one already ahead may wait the whole outage on ROG's row gate (see the
        # scenario).  Under load the cut can land after both others moved one ahead ({0: 1, 2: 1} with nobody
        # moving, seen in the faults tier on 2026-12-06): the rule is then not exercised, as the scenario reports
        level = [k for k in ("0", "2") if ahead[k] <= 0]
        assert d["no_deadlock_rule_exercised"] == bool(level)
        if level:
            assert max(during[k] for k in level) >= 1, (during, ahead)
        assert d["others_ahead_at_outage_end"] <= d["threshold"] + 1
    if name == "runtime_ps_crash":
        assert d["resent_push_frames"] > 0  # the restarted PS really lacked pushes the workers re-sent
    if name == "runtime_outage_sign":
        assert d["residual_over_grad_norm_during_run"]["max"] < 100  # bounded, not growing with the run
