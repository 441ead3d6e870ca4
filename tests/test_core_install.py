"""The light install for robots: ``pip install .`` in a fresh venv brings only the core (numpy, torch and what they
need), and there ``rog.optim``, ``rog.serve`` and a worker step run (a parameter server and one ROGOptimizer
step over loopback TCP) without scipy, scikit-learn, h5py, PyYAML, tqdm, pandas, matplotlib, fabric or simpy.
Prints the install's packages, size and import time (JSON, last line).  Slow: it builds a venv (torch from the
local wheel cache, ``pip install torch==2.13.0``).

    bash scripts/test.sh -m slow tests/test_core_install.py -s
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLKIT_ONLY = ("scipy", "sklearn", "h5py", "yaml", "tqdm", "pandas", "matplotlib", "fabric", "simpy")

PROBE = r"""
import json, secrets, sys, time
t0 = time.perf_counter()
import rog, rog.optim
from rog.optim import ROGOptimizer
serve = rog.serve
import_s = time.perf_counter() - t0
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
key = secrets.token_hex(32)
served = serve(model, workers=1, port=0, host="127.0.0.1", policy="BSP", compression="none", secret=key, wait=False)
opt = ROGOptimizer(model.parameters(), server=served.address, worker_id=0, lr=0.1, policy="BSP", compression="none",
                   secret=key)
before = [p.detach().clone() for p in model.parameters()]
opt.zero_grad()
nn.functional.cross_entropy(model(torch.randn(5, 4)), torch.tensor([0, 1, 0, 1, 1])).backward()
opt.step()
opt.close()
served.wait(60)
moved = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
toolkit = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
print(json.dumps(dict(import_s=import_s, iteration=opt.iteration, moved=moved, toolkit_modules=toolkit)))
""" % (TOOLKIT_ONLY,)


def _run(cmd, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert out.returncode == 0, f"{cmd}: {out.stdout[-2000:]}{out.stderr[-2000:]}"
    return out.stdout


@pytest.mark.slow
def test_core_install_runs_optimizer_server_and_a_step_without_the_toolkit(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", "--no-compile", "torch==2.13.0"])  # the project's pin (the local wheel cache)
    _run([py, "-m", "pip", "install", "-q", "--no-compile", str(ROOT)])
    listed = json.loads(_run([py, "-m", "pip", "list", "--format", "json"]))
    names = {p["name"].lower() for p in listed}
    assert "rog" in names and "torch" in names and "numpy" in names
    assert not names & {"scipy", "scikit-learn", "h5py", "pyyaml", "tqdm", "pandas", "matplotlib", "fabric", "simpy"}
    probe = json.loads(_run([py, "-c", PROBE], cwd=str(tmp_path)).strip().splitlines()[-1])  # not the checkout
    assert probe["iteration"] == 1 and probe["moved"] and probe["toolkit_modules"] == []
    site = next((env_dir / "lib").glob("python*/site-packages"))
    size_mb = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 2**20
    torch_mb = sum(f.stat().st_size for f in (site / "torch").rglob("*") if f.is_file()) / 2**20
    tools = {"pip", "setuptools", "wheel"}
    print(json.dumps(dict(packages=sorted(names - tools), n_packages=len(names - tools), site_packages_mb=round(size_mb, 1),
                          torch_mb=round(torch_mb, 1), import_rog_optim_serve_s=round(probe["import_s"], 2),
                          python=sys.version.split()[0])))
