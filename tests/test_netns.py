"""The emulated testbed: creation, addressing, connectivity, shaping accuracy, replay, and cleanup (root)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rog.testbed.netns import (NO_NETNS_WARNING, Testbed, cleanup_prefix, have_root_netns, inspect_prefix,
                               list_netns, no_netns_warning, probe_argv, root_netns_status,
                               start_probe, wait_ready)
from rog.testbed.replay import Schedule
from rog.testbed.tc import FRAME_BYTES, save_state
from benchmarks.timing import network as TN

ROOT_OK, WHY = root_netns_status()
needs_root = pytest.mark.skipif(not ROOT_OK, reason=f"needs root and working 'ip netns' ({WHY}); CI runs as root")
_seq = itertools.count()


def unique_prefix() -> str:
    """``rogt<pid><n>``: no two tests (or runs) share namespace names."""
    return f"rogt{os.getpid() % 100000}{next(_seq)}"[:10]


def leftovers(prefix: str) -> list[str]:
    ns = [n for n in list_netns() if n.startswith(prefix)]
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout or "[]")
    return ns + [lk["ifname"] for lk in links if lk["ifname"].startswith(prefix)]


@pytest.fixture
def prefix():
    p = unique_prefix()
    yield p
    cleanup_prefix(p)  # finaliser: whatever the test did


@pytest.fixture
def tb2(prefix):
    tb = Testbed(n_workers=2, prefix=prefix)
    try:
        yield tb.create()
    finally:
        tb.destroy()


# ------------------------------------------------------------------ no root needed

def test_addressing_and_names_without_creating():
    tb = Testbed(n_workers=3, prefix="rogx")
    assert tb.namespaces == ["rogxps", "rogxw1", "rogxw2", "rogxw3"]
    assert (tb.ps_address(2), tb.worker_address(2)) == ("10.213.2.1", "10.213.2.2")
    assert tb.veth_names(3) == ("rogxv3w", "rogxv3p")
    assert (tb.uplink_dev(1).dev, tb.uplink_dev(1).netns) == ("rogxv1w", "rogxw1")
    assert (tb.downlink_dev(1).dev, tb.downlink_dev(1).netns) == ("rogxv1p", "rogxps")
    assert tb.exec_argv("ps", ["true"]) == ["ip", "netns", "exec", "rogxps", "true"]
    assert tb.exec_argv(2, ["true"])[3] == "rogxw2"
    small = Testbed(n_workers=2, prefix="rogx", subnet="10.99.0.0/24")  # /30 per link
    assert (small.ps_address(1), small.worker_address(1)) == ("10.99.0.5", "10.99.0.6")


@pytest.mark.parametrize("kw,what", [
    ({"prefix": "Rog-"}, "prefix"), ({"prefix": "abcdefghijk"}, "prefix"), ({"n_workers": 0}, "n_workers"),
    ({"subnet": "8.8.0.0/16"}, "private"), ({"subnet": "10.1.0.0/29"}, "too small"), ({"subnet": "x"}, "subnet"),
    ({"cap_mbit": 0}, "cap_mbit"), ({"tcp_cc": "a b"}, "tcp_cc"),
])
def test_bad_arguments(kw, what):
    with pytest.raises(ValueError, match=what):
        Testbed(**kw)


def test_bad_worker_and_direction():
    tb = Testbed(n_workers=2, prefix="rogx")
    for bad in (0, 3, True, "1"):
        with pytest.raises(ValueError, match="worker"):
            tb.worker_address(bad)
    with pytest.raises(ValueError, match="direction"):
        tb.shaper(1, "sideways")


def test_fallback_warning_names_the_reason():
    text = no_netns_warning()
    assert "loopback" in text and "token bucket" in text and "{reason}" in NO_NETNS_WARNING
    assert have_root_netns() == ROOT_OK


# ------------------------------------------------------------------ root

@needs_root
def test_create_layout_offloads_and_cc(tb2, prefix):
    rows = {(r["netns"], r["dev"]): r for r in inspect_prefix(prefix)}
    assert rows[(f"{prefix}w1", f"{prefix}v1w")]["address"] == "10.213.1.2/24"
    assert rows[(f"{prefix}ps", f"{prefix}v2p")]["address"] == "10.213.2.1/24"
    assert {r["qdisc"] for r in rows.values()} == {"tbf"} and {r["rate_mbit"] for r in rows.values()} == {1000.0}
    # the private range exists only inside the namespaces
    assert "10.213." not in subprocess.run(["ip", "addr"], capture_output=True, text=True).stdout
    for w in (1, 2):
        for t in (tb2.uplink_dev(w), tb2.downlink_dev(w)):
            out = subprocess.run(tb2.exec_argv(t.netns, probe_argv("offloads", t.dev)), capture_output=True,
                                 text=True, check=True).stdout
            assert json.loads(out) == {"tso": False, "gso": False, "gro": False}
            detail = subprocess.run(["ip", "-n", t.netns, "-d", "link", "show", t.dev], capture_output=True,
                                    text=True).stdout
            assert "gso_max_segs 1 " in detail
    cc = subprocess.run(tb2.exec_argv(1, ["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]),
                        capture_output=True, text=True).stdout.strip()
    assert cc == "cubic"


@needs_root
def test_every_worker_reaches_the_ps(tb2):
    srv = start_probe(tb2, "ps", "echo-server", "--host", "0.0.0.0", "--port", "7001", "--count", "2")
    try:
        wait_ready(srv)
        for w in (1, 2):
            payload = f"hello-from-w{w}"
            out = subprocess.run(tb2.exec_argv(w, probe_argv("echo-client", "--host", tb2.ps_address(w), "--port",
                                                             "7001", "--payload", payload, "--timeout-s", "10")),
                                 capture_output=True, text=True, timeout=30)
            assert out.stdout.strip() == payload, out.stderr
        assert srv.wait(timeout=10) == 0
    finally:
        if srv.poll() is None:
            srv.kill()


@needs_root
def test_shaped_uplink_takes_at_least_bytes_over_rate(tb2):
    """8 Mbit/s for ~3 s: every byte arrives, and the transfer takes at least 95 % of wire bytes / rate (the
    shaper never lets more through; the tbf bucket's burst is the 5 %) and less than 5 x it even on a loaded
    machine; within 5 %: benchmarks/timing/network.py (bench)."""
    r = TN.shaped_uplink(tb2, 8.0, 3_000_000)
    assert r["received"] == 3_000_000
    assert 0.95 * r["expected_s"] <= r["measured_s"] < 5 * r["expected_s"], r
    assert FRAME_BYTES == 1514


@needs_root
@pytest.mark.bench
def test_bench_shaped_uplink_matches_bytes_over_rate_within_5_percent(tb2):
    r = TN.shaped_uplink(tb2, 8.0, 3_000_000)
    assert abs(r["measured_s"] - r["expected_s"]) / r["expected_s"] < 0.05, r


@needs_root
def test_set_rate_changes_in_place_and_replay_logs(tb2, tmp_path):
    tb2.set_rate(2, "both", 12.5)
    for t in (tb2.uplink_dev(2), tb2.downlink_dev(2)):
        root = save_state(t).root
        assert (root["handle"], root["options"]["rate"] * 8) == ("1:", 12_500_000)
    log = tmp_path / "w1.csv"
    h = tb2.start_replay(1, "down", Schedule(((0.0, 5.0), (0.05, 0.0), (0.1, 7.0)), end_s=0.15), log)
    h.thread.join(10)
    assert not h.running and h.error is None
    logged = [float(x.split(",")[2]) for x in log.read_text().splitlines()[1:]]
    # in order, a change late enough that the next is due skipped (a loaded machine), never the last; every
    # change on time and the skip rule on a fake clock: tests/test_replay.py
    st = h.replayer.stats
    assert logged[-1] == 7.0 and logged == [r for r in (5.0, 0.0, 7.0) if r in logged], logged
    assert st.applied == len(logged) and st.applied + st.skipped == 3, st
    assert save_state(tb2.downlink_dev(1)).root["options"]["rate"] * 8 == 7_000_000
    assert save_state(tb2.uplink_dev(1)).root["options"]["rate"] * 8 == 1_000_000_000  # other direction untouched


@needs_root
def test_shared_cap(prefix):
    with Testbed(n_workers=2, prefix=prefix, cap_mbit=30.0) as tb:
        rows = {r["dev"]: r for r in tb.inspect_rows()}
        assert rows[f"{prefix}cap"]["qdisc"] == "htb" and rows[f"{prefix}cap"]["rate_mbit"] == 30.0
        assert rows[f"{prefix}v1p"]["qdisc"] == "tbf+clsact"
        tb.set_cap(12.0)
        assert {r["dev"]: r for r in tb.inspect_rows()}[f"{prefix}cap"]["rate_mbit"] == 12.0
    assert leftovers(prefix) == []


@needs_root
def test_exception_inside_context_cleans_up(prefix):
    with pytest.raises(RuntimeError, match="boom"):
        with Testbed(n_workers=2, prefix=prefix) as tb:
            sleeper = subprocess.Popen(tb.exec_argv(1, ["sleep", "60"]))
            assert tb.exists()
            raise RuntimeError("boom")
    assert leftovers(prefix) == []
    assert not Path(f"/run/rog-testbed/{prefix}.tcp_allowed_congestion_control").exists()
    assert sleeper.wait(timeout=10) is not None  # the process inside the namespace was ended


@needs_root
def test_next_create_removes_leftovers(prefix):
    # what a SIGKILLed run leaves: a namespace of the prefix and a half-made veth in the root namespace
    subprocess.run(["ip", "netns", "add", f"{prefix}w7"], check=True)
    subprocess.run(["ip", "link", "add", f"{prefix}v9w", "type", "veth", "peer", "name", f"{prefix}v9p"], check=True)
    other = f"{prefix}xps"  # not this prefix's name pattern: must survive
    subprocess.run(["ip", "netns", "add", other], check=True)
    try:
        tb = Testbed(n_workers=1, prefix=prefix).create()
        try:
            assert sorted(leftovers(prefix)) == sorted([f"{prefix}ps", f"{prefix}w1", other])
        finally:
            tb.destroy()
        assert leftovers(prefix) == [other]
    finally:
        subprocess.run(["ip", "netns", "del", other], capture_output=True)


@needs_root
def test_sigterm_to_owner_process_cleans_up(prefix, tmp_path):
    code = (f"import sys, time; from rog.testbed import Testbed\n"
            f"with Testbed(n_workers=1, prefix={prefix!r}) as tb:\n"
            f"    print('UP', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "UP", p.stderr.read()
        assert f"{prefix}w1" in list_netns()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGTERM
    assert leftovers(prefix) == []


@needs_root
def test_cli_create_inspect_destroy(prefix):
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    before = allowed.read_text()
    script = Path(__file__).resolve().parent.parent / "scripts" / "testbed.py"
    run = lambda *a: subprocess.run([sys.executable, str(script), *a, "--prefix", prefix],  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    p = run("create", "--workers", "2")
    assert p.returncode == 0, p.stderr
    assert f"{prefix}v2w" in p.stdout and "10.213.2.2/24" in p.stdout
    assert f"{prefix}w2" in list_netns()  # still there after the CLI exited
    p = run("inspect")
    assert p.stdout.splitlines()[0].split() == ["netns", "dev", "address", "state", "qdisc", "rate_mbit"]
    p = run("destroy")
    assert p.returncode == 0 and f"netns {prefix}ps" in p.stdout
    assert leftovers(prefix) == []
    assert allowed.read_text() == before  # the host's allowed congestion controls are as they were


@needs_root
@pytest.mark.slow
def test_bench_replay_prints_json_and_cleans_up():
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench_replay.py"
    prefix = unique_prefix()
    try:
        p = subprocess.run([sys.executable, str(script), "--seconds", "8", "--steps", "2", "--prefix", prefix],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
        assert {"corr", "goodput_over_rate", "change_latency_s", "trace_source", "trace_seconds"} <= set(out)
        assert out["trace_seconds"] == 8 and len(out["change_latency_down_all_s"]) == 2
        assert leftovers(prefix) == []
    finally:
        cleanup_prefix(prefix)
