"""The default tier's xdist groups hold (tests/conftest.py, ``--dist loadgroup``): every test module that touches the
host's network runs on one worker, and every user of the shared loopback runs on one worker (so the runs start
once), and a module that names those words only in docstrings and comments is not held to one worker.  Run on a
throwaway suite in a fresh pytest with two workers, the suite's own conftest loaded as a plugin.

On pytest 9 with pytest-xdist 3.8 the groups were silently ignored (xdist renames ``Item._nodeid``, pytest 9
reads ``Item._id``): both workers ran host-network tests and each started the shared runs; this test failed so."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent

RECORD = '''
import os, time

def record(tmp_dir, kind, i):
    time.sleep(0.05)  # long enough that both workers take tests
    with open(os.path.join(tmp_dir, "placement.txt"), "a") as f:
        f.write(f"{kind} {i} {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''

HOST_NETWORK = '''
import os
import pytest
from record import record

LISTS = "ip netns"  # touches the host: a word of HOST_NETWORK_WORDS, in code

@pytest.mark.parametrize("i", range(6))
def test_net(i):
    record(os.environ["PLACEMENT_DIR"], "net", i)
'''

SHARED_RUNS = '''
import os
import pytest
from record import record

@pytest.fixture(scope="session")
def loopback_runs():  # stands in for the plugin's fixture, which would start the real runs
    return {}

@pytest.mark.parametrize("i", range(6))
def test_shared(i, loopback_runs):
    record(os.environ["PLACEMENT_DIR"], "shared", i)
'''

PLAIN = '''
"""Mentions bash scripts/run_all.sh and a qdisc in its prose only: not a host-network module."""
import os
import pytest
from record import record

# a comment that names tc_replay and ip netns does not make it one either

@pytest.mark.parametrize("i", range(12))
def test_plain(i):
    record(os.environ["PLACEMENT_DIR"], "plain", i)
'''

def test_host_network_and_shared_run_users_each_stay_on_one_worker(tmp_path):
    (tmp_path / "record.py").write_text(RECORD)
    (tmp_path / "test_a_net.py").write_text(HOST_NETWORK)
    (tmp_path / "test_b_net.py").write_text(HOST_NETWORK)
    (tmp_path / "test_c_shared.py").write_text(SHARED_RUNS)
    (tmp_path / "test_d_shared.py").write_text(SHARED_RUNS)
    (tmp_path / "test_e_plain.py").write_text(PLAIN)
    env = dict(os.environ, PLACEMENT_DIR=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(TESTS), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "-n", "2",
                        "--dist", "loadgroup", "--rootdir", str(tmp_path), "-o", "addopts=", "-o", "timeout=120",
                        str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    workers = defaultdict(set)
    counts = defaultdict(int)
    for line in (tmp_path / "placement.txt").read_text().splitlines():
        kind, _, worker = line.split()
        workers[kind].add(worker)
        counts[kind] += 1
    assert dict(counts) == {"net": 12, "shared": 12, "plain": 12}
    assert len(workers["net"]) == 1, f"host-network tests ran on {sorted(workers['net'])}"
    assert len(workers["shared"]) == 1, f"users of the shared runs ran on {sorted(workers['shared'])}"
    assert workers["plain"] == {"gw0", "gw1"}  # the others are shared out (the check above could fail)
