"""Kill and restore: a ROGOptimizer worker process is SIGKILLed mid-run (after its step 3 of 6, its state_dict
saved), restarted from that state_dict (a fresh rejoin), and the run finishes.  Its momentum, error feedback and
iteration continue where they were, and the parameter server's conservation holds: every worker ends with
``w0 - (everything committed) / W`` plus what the PS still holds for it (1-bit compression keeps residuals), where
a worker's committed sum is every update it computed minus what it still holds undelivered (nothing lost,
nothing applied twice; the float32 rounding bound is the fault scenarios' oracle)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.faults.conservation import rows_off, tolerance
from rog.codecs.compression import SignCodec
from rog.optim import row_layout
from rog.policies import make_policy
from rog.runtime import ParameterServer
from rog.transport import Listener, TransportConfig
from tests.optim_restore_worker import model_and_data, train

WORKER = Path(__file__).with_name("optim_restore_worker.py")
N, HANG = 6, 3


def spawn(port: int, k: int, out: Path, env: dict, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), "--port", str(port), "--worker", str(k), "--iterations",
                             str(N), "--out", str(out), *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for(cond, timeout_s: float, what: str, procs) -> None:
    t_end = time.monotonic() + timeout_s
    while not cond():
        for p in procs:
            if p.poll() not in (None, 0):
                raise AssertionError(f"{what}: a worker exited with {p.returncode}: {p.stdout.read()}")
        assert time.monotonic() < t_end, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)


def test_a_killed_worker_restored_from_its_state_dict_continues_and_conserves(tmp_path):
    secret = secrets.token_hex(32)
    env = dict(os.environ, ROG_SECRET=secret, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    model, _ = model_and_data(0, 0)
    part = row_layout(model)
    listener = Listener("127.0.0.1", 0, config=TransportConfig(secret=secret.encode()), worker_ids={0, 1})
    ps = ParameterServer(part, 2, make_policy("BSP"), SignCodec(), join_timeout_s=60.0, wait_timeout_s=60.0,
                         evict_after_s=60.0)  # the killed worker keeps its slot: the other waits at the gate
    t = ps.start(listener)
    port = listener.address[1]
    procs = [spawn(port, 1, tmp_path, env, "--hang-after", str(HANG))]  # the one to kill: a process
    w0_done = []  # worker 0 in this process (saves a torch import on a loaded machine)
    th = threading.Thread(target=lambda: w0_done.append(train(0, port, N, tmp_path, secret=secret)), daemon=True)
    th.start()
    try:
        wait_for(lambda: (tmp_path / "hung-w1").exists(), 120, "worker 1 reaching its step 3", procs)
        os.kill(procs[0].pid, signal.SIGKILL)  # mid-run: worker 0 waits at the gate of step 4
        assert procs[0].wait(20) == -signal.SIGKILL
        restored = spawn(port, 1, tmp_path, env, "--restore")
        procs.append(restored)
        assert restored.wait(120) == 0, restored.stdout.read()
        th.join(60)
        assert w0_done == [0]
        t.join(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        listener.close()
    assert [(r, type(e).__name__) for r, e in ps.errors] == [(1, "LinkClosed")]  # the kill, and nothing else
    rep = json.loads((tmp_path / "report-w1.json").read_text())
    assert rep["resumed_at"] == HANG and rep["iteration"] == N  # the iteration continued from the state
    assert rep["momentum_restored"] and rep["error_feedback_restored"]
    assert rep["saved_error_feedback_abs_sum"] > 0  # 1-bit error feedback: there was something to restore
    assert [(f["worker"], f["fresh"]) for f in ps.faults if f["event"] == "worker_rejoined"] == [(1, True)]
    # conservation: committed_k = sum(u_k) - acc_k (what it still holds); final_k = w0 - sum committed / W + pending_k
    w0 = np.concatenate([p.detach().reshape(-1).numpy() for p in model.parameters()]).astype(np.float64)
    sums = [np.load(tmp_path / f"sum_u-w{k}.npy") for k in (0, 1)]
    abs_sums = [np.load(tmp_path / f"sum_abs_u-w{k}.npy") for k in (0, 1)]
    accs = [np.load(tmp_path / f"acc-w{k}.npy") for k in (0, 1)]
    committed = sum(s - a for s, a in zip(sums, accs))
    pending = np.asarray(ps.pending, dtype=np.float64)
    n_updates = 2 * N
    lost_by = {}
    for k in (0, 1):
        final = np.load(tmp_path / f"final-w{k}.npy")
        expect = w0 - committed / 2 + pending[k]
        bound = tolerance(n_updates, np.abs(w0) + sum(abs_sums) / 2 + np.abs(pending[k]) + sum(np.abs(a) for a in accs) / 2)
        rows, ratio = rows_off(final, expect, bound, part.row_start)
        lost_by[k] = (rows.size, ratio)
    assert all(n_rows == 0 for n_rows, _ in lost_by.values()), lost_by
