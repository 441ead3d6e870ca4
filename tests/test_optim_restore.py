"""Kill and restore: a ROGOptimizer worker process is SIGKILLed mid-run (after its step 3 of 6, its state_dict
saved), restarted from that state_dict (a fresh rejoin), and the run finishes.  Its momentum, error feedback and
iteration continue where they were, and the parameter server's conservation holds: every worker ends with
``w0 - (everything committed) / W`` plus what the PS still holds for it (1-bit compression keeps residuals), where
a worker's committed sum is every update it computed minus what it still holds undelivered (nothing lost,
nothing applied twice; the float32 rounding bound is the fault scenarios' oracle).  The checks live in
tests/optim_restore_checks.py; tests/test_optim_restore_emulated.py (faults tier) repeats the run on the emulated
testbed."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
from pathlib import Path

from rog.optim import row_layout
from rog.transport import Listener, TransportConfig
from tests.optim_restore_checks import check_restored_and_conserved, start, wait_for, worker_argv
from tests.optim_restore_ps import parameter_server
from tests.optim_restore_worker import model_and_data, train

N, HANG = 6, 3


def spawn(port: int, k: int, out: Path, env: dict, *extra: str) -> subprocess.Popen:
    return start(worker_argv(port, k, N, out, *extra), env)


def test_a_killed_worker_restored_from_its_state_dict_continues_and_conserves(tmp_path):
    secret = secrets.token_hex(32)
    env = dict(os.environ, ROG_SECRET=secret, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    model, _ = model_and_data(0, 0)
    part = row_layout(model)
    listener = Listener("127.0.0.1", 0, config=TransportConfig(secret=secret.encode()), worker_ids={0, 1})
    ps = parameter_server(part)  # the killed worker keeps its slot: the other waits at the gate
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
    check_restored_and_conserved(tmp_path, [(r, type(e).__name__) for r, e in ps.errors], ps.faults, ps.state.pending,
                                 iterations=N, hang_after=HANG)
