"""A parameter server for any model in one call (``rog.serve``, ``rog-server``) and one starting model: the PS
hands every worker the team's initial parameters at join (the first worker's, or a file), refuses a worker that
keeps different ones (``initial_model="own"``), and checks the secret before anything starts.  The slow test runs
examples/own_loop.py as two real worker processes plus ``rog-server`` over TCP on loopback."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import rog
from rog.optim import ROGOptimizer, row_layout
from rog.serving import main as server_main

ROOT = Path(__file__).resolve().parents[1]


def mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def run_workers(served, models, secret, steps=3, options=None):
    """Train each model as a worker thread on ``served`` (``options``: worker -> ROGOptimizer keywords); returns
    ({worker: exception or None}, {worker: its parameters after the join})."""
    out = {}
    start = {}

    def work(k, model):
        try:
            opt = ROGOptimizer(model.parameters(), server=served.address, worker_id=k, lr=0.05, policy="BSP",
                               compression="none", secret=secret, **(options or {}).get(k, {}))
            start[k] = flat(model)  # after the join: what the team starts from
            g = torch.Generator().manual_seed(k)
            for _ in range(steps):
                opt.zero_grad()
                nn.functional.cross_entropy(model(torch.randn(4, 6, generator=g)), torch.tensor([0, 1, 0, 1])).backward()
                opt.step()
            opt.close()
            out[k] = None
        except Exception as e:  # noqa: BLE001 - reported to the test
            out[k] = e

    threads = [threading.Thread(target=work, args=(k, m)) for k, m in enumerate(models)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out, start


def test_serve_hands_out_the_first_workers_model_and_workers_end_identical():
    secret = secrets.token_hex(32)
    models = [mlp(0), mlp(1)]  # different initial weights
    originals = [flat(m) for m in models]
    served = rog.serve(mlp(9), workers=2, port=0, host="127.0.0.1", policy="BSP", compression="none", secret=secret,
                       wait=False)
    out, start = run_workers(served, models, secret)
    ps = served.wait(30)
    assert out == {0: None, 1: None} and not ps.errors
    first = ps.team.join_order[0]
    np.testing.assert_array_equal(start[0], originals[first])  # both start from the first joiner's weights
    np.testing.assert_array_equal(start[1], originals[first])
    # and end identical after the flush, up to float32 rounding (a pull may group two workers' updates differently:
    # a few ulp; one update of either worker would be ~1e-3)
    np.testing.assert_allclose(flat(models[0]), flat(models[1]), rtol=0, atol=1e-6)


def test_a_file_given_to_the_server_is_the_teams_start(tmp_path):
    secret = secrets.token_hex(32)
    team = mlp(5)
    torch.save(team.state_dict(), tmp_path / "start.pt")
    models = [mlp(0), mlp(1)]
    served = rog.serve(mlp(9), workers=2, port=0, host="127.0.0.1", policy="BSP", compression="none", secret=secret,
                       wait=False, initial=tmp_path / "start.pt")
    out, start = run_workers(served, models, secret)
    served.wait(30)
    assert out == {0: None, 1: None}
    for k in (0, 1):
        np.testing.assert_array_equal(start[k], flat(team))


def test_a_worker_keeping_different_weights_is_refused_clearly(tmp_path):
    secret = secrets.token_hex(32)
    np.save(tmp_path / "start.npy", flat(mlp(3)))  # the team's start
    served = rog.serve(row_layout(mlp(0)), workers=1, port=0, host="127.0.0.1", policy="BSP", compression="none",
                       secret=secret, wait=False, initial=tmp_path / "start.npy", evict_after_s=0.0)
    out, _ = run_workers(served, [mlp(0)], secret, options={0: dict(initial_model="own")})
    served.close()
    assert "keeps its own initial parameters (initial_model='own') but they differ from the team's" in str(out[0])
    assert "initial_model='team'" in str(out[0])


def test_a_restarted_worker_with_other_initial_weights_is_refused():
    """A fresh rejoin gets everything committed since the start on top of the weights it holds: they must be the
    team's, or the restarted worker would silently train another model."""
    from rog.optim import WorkerOptions
    from rog.runtime.worker import RuntimeFailure

    secret = secrets.token_hex(32)
    served = rog.serve(mlp(0), workers=1, port=0, host="127.0.0.1", policy="BSP", compression="none", secret=secret,
                       wait=False, evict_after_s=60.0)
    first = ROGOptimizer(mlp(0).parameters(), server=served.address, worker_id=0, lr=0.05, policy="BSP",
                         compression="none", secret=secret)
    first.engine.conn.abort()  # the process dies
    with pytest.raises(RuntimeFailure, match="restarted from initial parameters that differ from the team's"):
        ROGOptimizer(mlp(7).parameters(), server=served.address, worker_id=0, lr=0.05, policy="BSP",
                     compression="none", secret=secret, options=WorkerOptions(rejoin=True, reconnect_timeout_s=None))
    served.close()


def test_the_secret_is_checked_before_anything_starts(capsys, monkeypatch):
    with pytest.raises(ValueError, match="needs at least 16"):
        rog.serve(mlp(0), workers=1, port=0, secret="short")
    monkeypatch.setenv("ROG_SECRET", "short")
    assert server_main(["--model", "examples/own_loop.py:make_model", "--workers", "1", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: environment variable ROG_SECRET holds 5 bytes")
    monkeypatch.setenv("ROG_SECRET", secrets.token_hex(32))
    assert server_main(["--model", "examples/nothing.py:make_model", "--workers", "1"]) == 2
    assert "no file examples/nothing.py under the current directory" in capsys.readouterr().err


@pytest.mark.slow
def test_rog_server_and_two_example_workers_over_tcp_end_identical(tmp_path):
    """README's "Use ROG in your own training loop": rog-server plus two examples/own_loop.py processes (different
    initial weights) on loopback under BSP; after the flush both hold the same parameters, and they trained."""
    env = dict(os.environ, ROG_SECRET=secrets.token_hex(32))
    exe = shutil.which("rog-server", path=str(Path(sys.executable).parent))
    server_cmd = [exe] if exe else [sys.executable, "-m", "rog.serving"]
    port = 40000 + os.getpid() % 20000
    server = subprocess.Popen(server_cmd + ["--model", "examples/own_loop.py:make_model", "--workers", "2", "--port",
                                            str(port), "--host", "127.0.0.1", "--policy", "BSP", "--compression", "none"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers = [subprocess.Popen([sys.executable, "examples/own_loop.py", "--server", f"127.0.0.1:{port}", "--worker",
                                 str(k), "--iterations", "60", "--policy", "BSP", "--compression", "none", "--save",
                                 str(tmp_path / f"w{k}.npy")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for k in (0, 1)]
    try:
        for w in workers:
            assert w.wait(240) == 0, w.stdout.read()
        assert server.wait(60) == 0, server.stdout.read()
    finally:
        for p in workers + [server]:
            if p.poll() is None:
                p.kill()
    w0, w1 = np.load(tmp_path / "w0.npy"), np.load(tmp_path / "w1.npy")
    np.testing.assert_allclose(w0, w1, rtol=0, atol=1e-6)  # identical up to float32 rounding (test above)
    torch.manual_seed(0)
    from examples.own_loop import make_model

    assert not np.array_equal(w0, flat(make_model()))  # it trained
    out = workers[0].stdout.read()
    assert "60 iterations" in out and float(out.rsplit("accuracy ", 1)[1]) > 0.8, out
