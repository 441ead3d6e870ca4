"""A device lost mid-run on the hosts testbed (emulated devices; root and sshd only; faults tier).

``python -m rog.testbed.emulated_hosts --workers 2`` makes a PS and two worker devices, each a namespace with
its own sshd; ``run.py --testbed hosts`` deploys a long run to them.  Once worker w1 trains, its device
becomes unreachable: every sshd process and the SSH relay of its namespace are killed (the control
connection breaks and cannot be reopened).  Checked: the run ends INCOMPLETE naming w1; the other devices
were stopped and their qdiscs are what they were before the run (the replay restored them); w0's and the
PS's folders were collected.  Afterwards the lost device's own processes are killed (as a power cycle
would) and the devices are torn down, also when the test fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_run_all_emulated_hosts import _qdiscs, start_devices, stop_devices

pytestmark = [pytest.mark.faults, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "result" / ".cache"
TAG = "rgl"


def _ns_pids(ns: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_device_lost_mid_run_is_named_and_the_others_are_restored(tmp_path):
    from rog.testbed.netns import root_netns_status
    from rog.testbed.sshd import find_sshd

    ok, why = root_netns_status()
    if not ok or find_sshd() is None:
        pytest.skip(f"needs root, network namespaces and sshd ({why or 'no sshd'})")
    hosts, res = tmp_path / "hosts.yaml", tmp_path / "result"
    dev, prefix = start_devices(hosts, 2, TAG)
    run = None
    try:
        before = _qdiscs(prefix)
        run = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "run.py"), "--testbed", "hosts", "--hosts",
                                str(hosts), "-c", "outdoors", "--iterations", "100000", "--result-dir", str(res),
                                "--cache-dir", str(CACHE), "--no-progress", "--reconnect-timeout-s", "0"],
                               cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run_dir = res / "ROG4-outdoors-recorded-b1-w2-seed0"
        ev = run_dir / "events-w1.jsonl"  # mirrored from the device while the run goes on
        end = time.monotonic() + 600
        while not (ev.exists() and '"push"' in ev.read_text()):
            assert run.poll() is None and time.monotonic() < end, run.stderr.read()[-3000:] if run.poll() else "slow"
            time.sleep(0.5)
        ns_w1 = f"{prefix}w2"  # worker w1 lives in testbed namespace <prefix>w2
        lost = [p for p in _ns_pids(ns_w1) if "sshd" in _cmdline(p) or "rog.testbed.sshd relay" in _cmdline(p)]
        lost += [int(p) for p in subprocess.run(["pgrep", "-f", f"netns exec {ns_w1} .*rog.testbed.sshd relay"],
                                                capture_output=True, text=True).stdout.split()]
        assert lost
        _kill(lost)
        out, err = run.communicate(timeout=600)
        assert run.returncode == 1, err[-3000:]
        reason = (run_dir / "INCOMPLETE").read_text()
        assert reason.startswith("w1: ") and "w1 (root@" in reason, reason  # the lost host is named
        assert not (run_dir / "DONE").exists()
        after = _qdiscs(prefix)
        # the reachable devices: w0's namespace as before, and the PS's end of w0's link (v1p) as before
        assert after[f"{prefix}w1"] == before[f"{prefix}w1"]
        ps_v1 = [q for q in after[f"{prefix}ps"] if f'"{prefix}v1p"' in q]
        assert ps_v1 and ps_v1 == [q for q in before[f"{prefix}ps"] if f'"{prefix}v1p"' in q]
        assert (run_dir / "hosts" / "w0" / "worker.log").is_file() and (run_dir / "hosts" / "ps" / "ps.log").is_file()
        alive = [p for p in _ns_pids(f"{prefix}w1") + _ns_pids(f"{prefix}ps") if "scripts/" in _cmdline(p)]
        assert alive == [], [_cmdline(p) for p in alive]  # nothing of the run still runs on the reachable devices
    finally:
        if run is not None and run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.communicate(timeout=300)
        _kill(p for p in _ns_pids(f"{prefix}w2") if "sshd" not in _cmdline(p))  # the lost device's own (a power cycle)
        stop_devices(dev, prefix)
