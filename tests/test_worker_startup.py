"""A Fabric-launched worker pays its start-up before it reports ready, not after the links start.

The launcher writes the go file (links start replaying, workers connect) once every worker wrote
``worker.ready``.  Whatever a worker imports after the go delays its join while the traces already
replay.  ``torch.optim.Optimizer.__init__`` imports ``torch._dynamo`` on its first call (seconds of
CPU); the gate must pay it.  Checked in a fresh interpreter: before the gate the module is not
loaded, the ready file appears only once it is, and after the go constructing an optimizer and the
engine's optimizer class imports nothing new.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, threading, time
from pathlib import Path
from rog.experiment import children, rundir
run_dir = Path(sys.argv[1])
before_gate = "torch._dynamo" in sys.modules
seen = {}

def launcher():  # the runner's side: wait for the ready file, note what was loaded then, write go
    ready = run_dir / rundir.WORKER_READY_FILE
    while not ready.exists():
        time.sleep(0.01)
    seen["dynamo_at_ready"] = "torch._dynamo" in sys.modules
    (run_dir / rundir.GO_FILE).write_text("{}")

t = threading.Thread(target=launcher)
t.start()
children.fabric_gate("fabric", run_dir, timeout_s=120.0)
t.join()
loaded = set(sys.modules)
import torch
from rog.optim import ROGOptimizer
torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1)
print(json.dumps(dict(before_gate=before_gate, at_ready=seen["dynamo_at_ready"],
                      new_after_go=sorted(set(sys.modules) - loaded))))
"""


def test_the_fabric_gate_pays_the_optimizers_lazy_imports_before_ready(tmp_path):
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before_gate"] is False  # so the check below is not vacuous
    assert got["at_ready"] is True
    assert got["new_after_go"] == []


def test_a_gate_outside_fabric_returns_at_once(tmp_path):
    from rog.experiment import children, rundir

    children.fabric_gate("local", tmp_path, timeout_s=0.01)  # would time out if it waited for go
    assert not (tmp_path / rundir.WORKER_READY_FILE).exists()
