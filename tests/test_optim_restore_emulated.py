"""Kill and restore on the emulated testbed: tests/test_optim_restore.py again, with the parameter server
(tests/optim_restore_ps.py) in the testbed's PS namespace and both ROGOptimizer workers
(tests/optim_restore_worker.py) as processes in their own worker namespaces, every link shaped to 20 Mbit/s
each way.  Worker 1 is SIGKILLed after its step 3 of 6, restarted from its saved state_dict, and the run
finishes; the checks are the loopback test's (tests/optim_restore_checks.py: momentum, error feedback and
iteration continue, the PS's conservation holds), plus the traffic having crossed the shaped links.
Needs root and ``ip netns`` (CI runs as root); a faults-tier test (tens of seconds).

    bash scripts/test.sh -m faults tests/test_optim_restore_emulated.py
"""

from __future__ import annotations

import json
import math
import os
import secrets
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from rog.optim import row_layout
from rog.testbed.netns import Testbed, root_netns_status
from rog.testbed.tc import parse_qdisc_json, run_argv
from tests.optim_restore_checks import check_restored_and_conserved, start, wait_for, worker_argv
from tests.optim_restore_worker import model_and_data

pytestmark = [pytest.mark.slow, pytest.mark.faults]

PS_RUNNER = Path(__file__).with_name("optim_restore_ps.py")
N, HANG = 6, 3
RATE_MBIT = 20.0  # every link, both directions: modest, and the tiny model's run stays short


def shaped_bytes(tb: Testbed, w: int, direction: str) -> int:
    """Bytes the tbf of one direction of testbed worker ``w``'s link has sent (``tc -s``)."""
    t = tb.uplink_dev(w) if direction == "up" else tb.downlink_dev(w)
    qdiscs = parse_qdisc_json(run_argv(t.tc("-s", "-j", "qdisc", "show", "dev", t.dev)).stdout)
    tbf = [q for q in qdiscs if q.get("kind") == "tbf"]
    assert len(tbf) == 1, f"{t}: expected one tbf, got {qdiscs}"
    return int(tbf[0]["bytes"])


def test_a_killed_worker_restored_on_the_emulated_testbed_continues_and_conserves(tmp_path):
    ok, why = root_netns_status()
    if not ok:
        pytest.skip(f"needs root and working 'ip netns' ({why}); CI runs as root")
    secret = secrets.token_hex(32)
    env = dict(os.environ, ROG_SECRET=secret, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    n_elements = row_layout(model_and_data(0, 0)[0]).n_elements
    procs = []
    # optimizer worker k runs in testbed worker k + 1's namespace (the testbed numbers its workers from 1)
    with Testbed(n_workers=2, prefix=f"r51e{os.getpid() % 100000}", rate_mbit=RATE_MBIT) as tb:
        try:
            ps = start(tb.exec_argv("ps", [sys.executable, str(PS_RUNNER), "--out", str(tmp_path)]), env)
            procs.append(ps)
            wait_for(lambda: (tmp_path / "ps.ready").exists(), 120, "the PS listening", procs)
            port = int((tmp_path / "ps.ready").read_text())

            def spawn(k: int, *extra: str):
                argv = worker_argv(port, k, N, tmp_path, *extra, host=tb.ps_address(k + 1))
                procs.append(start(tb.exec_argv(k + 1, argv), env))
                return procs[-1]

            w0 = spawn(0)
            killed = spawn(1, "--hang-after", str(HANG))
            wait_for(lambda: (tmp_path / "hung-w1").exists(), 180, "worker 1 reaching its step 3", procs)
            os.kill(killed.pid, signal.SIGKILL)  # `ip netns exec` execs the command: its pid is the worker's
            assert killed.wait(20) == -signal.SIGKILL
            restored = spawn(1, "--restore")
            assert restored.wait(180) == 0, restored.stdout.read()
            assert w0.wait(60) == 0, w0.stdout.read()
            assert ps.wait(60) == 0, ps.stdout.read()
            sent = {(w, d): shaped_bytes(tb, w, d) for w in (1, 2) for d in ("up", "down")}
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(20)
    # the run went over the shaped links: each direction of each link carried at least the 1-bit payloads of
    # N pushes (up) or N pulls (down), ceil(n_elements / 8) bytes each (frames and TCP headers come on top)
    least = N * math.ceil(n_elements / 8)
    assert all(b >= least for b in sent.values()), (least, sent)
    errors = [(r, name) for r, name, _ in json.loads((tmp_path / "errors.json").read_text())]
    faults = json.loads((tmp_path / "faults.json").read_text())
    check_restored_and_conserved(tmp_path, errors, faults, np.load(tmp_path / "pending.npy"), iterations=N,
                                 hang_after=HANG)
