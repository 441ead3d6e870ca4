"""What both kill-and-restore tests share (tests/test_optim_restore.py on loopback, tests/test_optim_restore_emulated.py
on the emulated testbed): starting a worker process of tests/optim_restore_worker.py, waiting on a condition while
watching the processes, and the checks on a finished run: the restored worker continued (momentum, error feedback,
iteration) and the parameter server's conservation holds (nothing lost, nothing applied twice)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from benchmarks.faults.conservation import rows_off, tolerance
from rog.optim import row_layout
from tests.optim_restore_worker import model_and_data

WORKER = Path(__file__).with_name("optim_restore_worker.py")


def worker_argv(port: int, k: int, iterations: int, out: Path, *extra: str, host: str = "127.0.0.1") -> list[str]:
    """The command line of worker ``k``'s process (``extra``: ``--hang-after K`` or ``--restore``)."""
    return [sys.executable, str(WORKER), "--host", host, "--port", str(port), "--worker", str(k), "--iterations",
            str(iterations), "--out", str(out), *extra]


def start(argv: Sequence[str], env: dict) -> subprocess.Popen:
    """Start a process with its output (stdout and stderr together) kept for the failure message."""
    return subprocess.Popen(list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(cond, timeout_s: float, what: str, procs) -> None:
    """Wait until ``cond()``; fail at once when one of ``procs`` exits with an error, or after ``timeout_s``."""
    t_end = time.monotonic() + timeout_s
    while not cond():
        for p in procs:
            if p.poll() not in (None, 0):
                raise AssertionError(f"{what}: a process exited with {p.returncode}: {p.stdout.read()}")
        assert time.monotonic() < t_end, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)


def check_restored_and_conserved(out: Path, errors, faults, pending, iterations: int, hang_after: int) -> None:
    """The checks on a finished run of workers 0 and 1, worker 1 killed after step ``hang_after`` and restored.

    ``out`` holds the workers' files; ``errors`` is the PS's failed links as ``(worker, error type name)``,
    ``faults`` its fault records, ``pending`` its pending buffers (one row per worker).
    """
    # (a helper module gets no pytest assertion rewriting: each assert names what it saw)
    failed = [(r, name) for r, name in errors]
    assert failed == [(1, "LinkClosed")], f"the PS's failed links: {failed}"  # the kill, and nothing else
    rep = json.loads((out / "report-w1.json").read_text())
    assert rep["resumed_at"] == hang_after and rep["iteration"] == iterations, rep  # the iteration continued
    assert rep["momentum_restored"] and rep["error_feedback_restored"], rep
    assert rep["saved_error_feedback_abs_sum"] > 0, rep  # 1-bit error feedback: there was something to restore
    rejoins = [(f["worker"], f["fresh"]) for f in faults if f["event"] == "worker_rejoined"]
    assert rejoins == [(1, True)], f"rejoins (worker, fresh): {rejoins}; faults: {faults}"
    # conservation: committed_k = sum(u_k) - acc_k (what it still holds); final_k = w0 - sum committed / W + pending_k
    model, _ = model_and_data(0, 0)  # the initial model, as every worker built it
    part = row_layout(model)
    w0 = np.concatenate([p.detach().reshape(-1).numpy() for p in model.parameters()]).astype(np.float64)
    sums = [np.load(out / f"sum_u-w{k}.npy") for k in (0, 1)]
    abs_sums = [np.load(out / f"sum_abs_u-w{k}.npy") for k in (0, 1)]
    accs = [np.load(out / f"acc-w{k}.npy") for k in (0, 1)]
    committed = sum(s - a for s, a in zip(sums, accs))
    pending = np.asarray(pending, dtype=np.float64)
    n_updates = 2 * iterations
    lost_by = {}
    for k in (0, 1):
        final = np.load(out / f"final-w{k}.npy")
        expect = w0 - committed / 2 + pending[k]
        bound = tolerance(n_updates, np.abs(w0) + sum(abs_sums) / 2 + np.abs(pending[k]) + sum(np.abs(a) for a in accs) / 2)
        rows, ratio = rows_off(final, expect, bound, part.row_start)
        lost_by[k] = (rows.size, ratio)
    assert all(n_rows == 0 for n_rows, _ in lost_by.values()), lost_by
