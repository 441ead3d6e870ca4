"""Fabric over real sshd processes inside the emulated testbed's namespaces (root only).

A 2-worker testbed gets one sshd per namespace; the Fabric runner ships the code, starts a probe
"PS" and two probe "workers" (plus trace replay and power samplers) in the namespaces, waits, stops
and copies every run folder back.  Afterwards no sshd, no namespace, no key folder and no process
of the run may be left, also when the run fails or an exception escapes the context.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import fabric  # noqa: F401  (a declared dependency: a broken install fails, it does not skip)

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "configs" / "traces" / "outdoors-synth.csv"

PROBE = r'''
"""ps N PORT OUT: accept N connections, write what they sent.
worker PS PORT OUT K fail=F: report namespace and secret digest, connect to the PS (exit 1 if K == F)."""
import hashlib, os, socket, subprocess, sys
from rog.runtime import EventLog

role, out = sys.argv[1], sys.argv[4]
rank = "ps" if role == "ps" else "w" + sys.argv[5]
if role == "worker" and sys.argv[6] == f"fail={sys.argv[5]}":
    sys.exit("probe worker failing on purpose")
with EventLog(os.path.join(os.path.dirname(out), f"events-{rank}.jsonl"), rank, "probe"):
    if role == "ps":
        srv = socket.create_server(("0.0.0.0", int(sys.argv[3])))
        open(os.path.join(os.path.dirname(out), "ps.port"), "w").write(sys.argv[3])
        got = []
        for _ in range(int(sys.argv[2])):
            conn, _ = srv.accept()
            got.append(conn.makefile().readline().strip())
            conn.close()
        open(out, "w").write("\n".join(sorted(got)) + "\n")
    else:
        ns = subprocess.run(["ip", "netns", "identify", str(os.getpid())], capture_output=True, text=True).stdout.strip()
        secret = os.environ.get("ROG_SECRET", "")
        cmdline = open("/proc/self/cmdline", "rb").read()
        line = f"{ns} sha={hashlib.sha256(secret.encode()).hexdigest()} in_cmdline={secret.encode() in cmdline}"
        open(out, "w").write(line + "\n")
        with socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=20) as s:
            s.sendall((line + "\n").encode())
'''


@pytest.fixture(scope="module")
def sshd_ready():
    """Skip unless root with namespaces, Fabric and an sshd (installed here when missing)."""
    from rog.testbed.netns import root_netns_status
    from rog.testbed.sshd import find_sshd

    ok, why = root_netns_status()
    if not ok:
        pytest.skip(f"needs root and network namespaces: {why}")
    if find_sshd() is None:
        p = subprocess.run(["bash", str(ROOT / "scripts" / "setup_sshd.sh")], capture_output=True, text=True, timeout=600)
        if p.returncode != 0 or find_sshd() is None:
            pytest.skip(f"sshd is not installed and scripts/setup_sshd.sh could not install it: {p.stderr.strip()[-300:]}")


def _prefix(tag: str) -> str:
    return f"rd{tag}{os.getpid() % 100000}"


def _leftovers(prefix: str, key_dir: str, work_dir: Path) -> list[str]:
    """Anything of this test still alive: namespaces, sshd of our key folder, processes of the run."""
    from rog.testbed.netns import list_netns, netns_names

    left = [f"netns {ns}" for ns in list_netns() if netns_names(prefix).match(ns)]
    if Path(key_dir).exists():
        left.append(f"key folder {key_dir}")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if key_dir in cmd or str(work_dir) in cmd:
            left.append(f"process {d.name}: {cmd[:120]}")
    return left


def _plan(tmp_path, sshd, run_id, power=True, trace=True, fail_worker=None):
    from rog.deploy import CodeBundle, RunSpec, build_plan

    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    hosts = sshd.hosts_file(python=sys.executable, work_dir=str(tmp_path / "work"), device_profile="quick-cpu")
    spec = RunSpec(run_id=run_id, ps_argv=("{python}", "{run_dir}/probe.py", "ps", "{n_workers}", "{ps_port}", "{run_dir}/got.txt"),
                   worker_argv=("{python}", "{run_dir}/probe.py", "worker", "{ps_address}", "{ps_port}",
                                "{run_dir}/me.txt", "{worker_id}", f"fail={fail_worker}"),
                   files=((str(probe), "probe.py"),), trace=str(TRACE) if trace else None, power=power, ps_port=29611,
                   ps_ready_timeout_s=60, timeout_s=120, stop_grace_s=5)
    return build_plan(hosts, spec, CodeBundle.scan(ROOT), tmp_path / "result" / run_id)


def test_fabric_runs_in_every_namespace_and_collects(sshd_ready, tmp_path):
    from rog.deploy import FabricRunner
    from rog.testbed.netns import Testbed
    from rog.testbed.sshd import NamespaceSshd

    prefix = _prefix("a")
    secret = secrets.token_hex(32)
    with Testbed(n_workers=2, prefix=prefix) as tb, NamespaceSshd(tb) as sshd:
        key_dir = str(sshd.dir)
        assert len(sshd.running()) == 3  # one sshd per namespace
        plan = _plan(tmp_path, sshd, "probe-ok")
        with FabricRunner(plan, secret=secret, poll_s=0.3) as runner:
            out = runner.run()
            got = runner.read_remote("ps", "got.txt")  # what a live progress line reads
            assert runner.read_remote("ps", "got.txt", offset=10) == got[10:]
            assert runner.read_remote("ps", "no-such-file") == b""
    assert out.status == "done", out.reason
    assert got.decode().count(f"{prefix}w") == 2
    res = tmp_path / "result" / "probe-ok"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    expected = [f"{prefix}w{w} sha={digest} in_cmdline=False" for w in (1, 2)]  # namespace, secret via env only
    assert (res / "hosts" / "ps" / "got.txt").read_text().splitlines() == expected  # over the shaped links to the PS
    for w in (1, 2):  # testbed worker w = host and event rank w{w-1}
        assert (res / "hosts" / f"w{w - 1}" / "me.txt").read_text().strip() == expected[w - 1]
        assert (res / "hosts" / f"w{w - 1}" / "worker.rc").read_text().strip() == "0"
        rows = (res / f"replay-w{w - 1}.csv").read_text().splitlines()
        assert rows[0].startswith("t_s") and len(rows) >= 2  # the replay applied at least its first rate
    for rank in ("ps", "w0", "w1"):
        assert (res / f"events-{rank}.jsonl").is_file()
    for rank in ("ps", "w0", "w1"):
        power = (res / f"power-{rank}.csv").read_text().splitlines()
        assert power[0] == "t_s,power_w,source" and power[1].endswith("model:quick-cpu")
    assert set(out.pids) == {("ps", "power"), ("ps", "ps"), ("w0", "power"), ("w0", "replay"), ("w0", "worker"),
                             ("w1", "power"), ("w1", "replay"), ("w1", "worker")}
    assert secret not in "".join(p.read_text(errors="replace") for p in res.rglob("*.log"))
    assert _leftovers(prefix, key_dir, tmp_path / "work") == []


def test_failure_inside_the_context_leaves_nothing(sshd_ready, tmp_path):
    from rog.deploy import DeployError, FabricRunner, build_plan
    from rog.deploy.hosts import HostsFile
    from rog.testbed.netns import Testbed
    from rog.testbed.sshd import NamespaceSshd

    prefix = _prefix("b")
    key_dir = ""
    with pytest.raises(RuntimeError, match="escapes the context"):
        with Testbed(n_workers=2, prefix=prefix) as tb, NamespaceSshd(tb) as sshd:
            key_dir = str(sshd.dir)
            plan = _plan(tmp_path, sshd, "probe-fail", power=False, trace=False, fail_worker=1)
            with FabricRunner(plan, secret=secrets.token_hex(32), poll_s=0.3) as runner:
                out = runner.run()
            assert out.status == "failed"
            assert out.reason.startswith("w1: worker exited with code 1") and "failing on purpose" in out.reason
            assert (tmp_path / "result" / "probe-fail" / "hosts" / "w1" / "worker.log").is_file()  # collected anyway

            # a key the namespace's sshd does not know, and an unknown host key, are refused with a reason
            other = tmp_path / "other_key"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
            hosts = plan.hosts
            wrong_key = HostsFile(tuple(replace(h, key_file=str(other)) if h.name == "w1" else h for h in hosts.hosts),
                                  known_hosts=hosts.known_hosts)
            empty = tmp_path / "known_hosts"
            empty.write_text("")
            unknown = HostsFile(hosts.hosts, known_hosts=str(empty))
            for hf, why in ((wrong_key, "w1 (root@"), (unknown, "unknown host key")):
                runner = FabricRunner(build_plan(hf, plan.spec, plan.code, plan.result_dir), secret="x" * 32)
                try:
                    with pytest.raises(DeployError, match="cannot reach every host") as ei:
                        runner.connect()
                finally:
                    runner.close()
                assert why in str(ei.value)
            assert "key authentication failed (passwords are never used)" in _connect_error(wrong_key, plan)
            raise RuntimeError("escapes the context")
    assert _leftovers(prefix, key_dir, tmp_path / "work") == []


def _connect_error(hf, plan) -> str:
    from rog.deploy import DeployError, FabricRunner, build_plan

    runner = FabricRunner(build_plan(hf, plan.spec, plan.code, plan.result_dir), secret="x" * 32)
    try:
        runner.connect()
    except DeployError as e:
        return str(e)
    finally:
        runner.close()
    return ""
